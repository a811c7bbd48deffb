#include <cstring>

#include "collectives/reduce.hpp"
#include "zob/collectives.hpp"

namespace zob {

void SingleRankCollectives::all_gather(const void* shard, void* full, std::size_t shard_bytes) {
  if (full != shard && shard_bytes > 0) std::memcpy(full, shard, shard_bytes);
}

void SingleRankCollectives::reduce_scatter(const void* in, ElemType in_type, float* out,
                                           std::size_t shard_elems) {
  const void* parts[1] = {in};
  collectives_detail::sum_in_rank_order(parts, 1, in_type, out, shard_elems);
}

}  // namespace zob
