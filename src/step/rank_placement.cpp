// Rank placement of the Adam threads (rank_placement.hpp).
#include "step/rank_placement.hpp"

#include <algorithm>
#include <cstdio>

#include "zob/cpu_affinity.hpp"
#include "zob/thread_pool.hpp"

namespace zob {

std::vector<int> exchange_numa_nodes(Collectives& host, int my_node) {
  std::vector<int> nodes(static_cast<std::size_t>(host.size()), -1);
  host.all_gather(&my_node, nodes.data(), sizeof(int));
  return nodes;
}

RankAdamPlacement place_rank_adam_threads(const RunConfig& config, Arm arm,
                                          const DeviceInfo& device, Collectives& host) {
  const std::vector<int> nodes = exchange_numa_nodes(host, device_numa_node(device));
  std::string notice;
  RankAdamPlacement out;
  out.placement = choose_rank_placement(config.cpu_affinity, config.threads, host.rank(), nodes,
                                        allowed_cpu_list(), &notice);
  out.threads = static_cast<int>(out.placement.cpus.size());
  if (out.threads == 0) {  // unpinned (allowed CPUs unknown): an even share of the CPUs
    out.threads = config.threads > 0 ? config.threads
                                     : std::max(1, available_cpus() / std::max(1, host.size()));
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
