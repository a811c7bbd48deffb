// Rank placement of the Adam threads (rank_placement.hpp).
#include "step/ranks/rank_placement.hpp"

#include <unistd.h>
#include <algorithm>

#include <cstdio>
#include <fstream>
#include <string>

#include "zob/cpu_affinity.hpp"
#include "zob/thread_pool.hpp"

namespace zob {

std::uint64_t machine_key() {
  std::string id;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0) id = name;
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  if (boot >> boot_id) id += "/" + boot_id;
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : id) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::vector<RankLocation> exchange_locations(Collectives& host, int my_node) {
  static_assert(sizeof(RankLocation) == 16, "gathered as bytes");
  RankLocation mine;
  mine.machine = machine_key();
  mine.numa_node = my_node;
  std::vector<RankLocation> where(static_cast<std::size_t>(host.size()));
  host.all_gather(&mine, where.data(), sizeof(RankLocation));
  return where;
}

LocalRanks local_ranks(const std::vector<RankLocation>& where, int rank) {
  LocalRanks out;
  const std::uint64_t mine = where.at(static_cast<std::size_t>(rank)).machine;
  for (int r = 0; r < static_cast<int>(where.size()); ++r) {
    const RankLocation& w = where[static_cast<std::size_t>(r)];
    if (w.machine != mine) continue;
    if (r == rank) out.index = static_cast<int>(out.nodes.size());
    out.nodes.push_back(w.numa_node);
  }
  return out;
}

RankAdamPlacement place_rank_adam_threads(const RunConfig& config, Arm arm,
                                          const DeviceInfo& device, Collectives& host) {
  const LocalRanks local =
      local_ranks(exchange_locations(host, device_numa_node(device)), host.rank());
  std::string notice;
  RankAdamPlacement out;
  out.placement = choose_rank_placement(config.cpu_affinity, config.threads, local.index,
                                        local.nodes, allowed_cpu_list(), &notice);
  out.threads = static_cast<int>(out.placement.cpus.size());
  if (out.threads == 0) {  // unpinned (allowed CPUs unknown): an even share of the CPUs
    out.threads = config.threads > 0
                      ? config.threads
                      : std::max(1, available_cpus() / static_cast<int>(local.nodes.size()));
  }
  if (!notice.empty()) {
    std::fprintf(stderr, "[%s rank %d/%d] notice: %s\n", to_string(arm), host.rank(), host.size(),
                 notice.c_str());
  }
  std::fprintf(stderr, "[%s rank %d/%d] Adam threads: %d, placement %s%s%s\n", to_string(arm),
               host.rank(), host.size(), out.threads, out.placement.policy.c_str(),
               out.placement.cpus.empty() ? "" : ", CPUs ",
               format_cpu_list(out.placement.cpus).c_str());
  return out;
}

}  // namespace zob
