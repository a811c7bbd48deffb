// Internal to src/step: where a rank's CPU Adam threads run when several ranks share a host
// (--gpus N > 1), so that N ranks split the host's CPUs instead of each taking all of them.
#pragma once
#include <string>
#include <vector>

#include "zob/collectives.hpp"
#include "zob/config.hpp"
#include "zob/device.hpp"
#include "zob/result.hpp"

namespace zob {

// The NUMA node of every rank's device (-1 unknown), in rank order: one int per rank gathered
// over `host`, a communicator of the ranks of this host (host-memory collectives). A
// collective: every rank of `host` calls it at the same point.
std::vector<int> exchange_numa_nodes(Collectives& host, int my_node);

struct RankAdamPlacement {
  ThreadPlacement placement;
  int threads = 1;
};

// Exchanges the nodes over `host`, chooses this rank's slice (choose_rank_placement:
// --cpu-affinity, else its device's NUMA node, else the allowed CPUs), and prints
// "[arm rank r/N] Adam threads: T, placement ..." (and any notice) to stderr. A collective.
RankAdamPlacement place_rank_adam_threads(const RunConfig& config, Arm arm,
                                          const DeviceInfo& device, Collectives& host);

}  // namespace zob
