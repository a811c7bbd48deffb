// Internal to src/step: where a rank's CPU Adam threads run when several ranks share a host
// (--gpus N > 1), so that N ranks split the host's CPUs instead of each taking all of them.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "zob/collectives.hpp"
#include "zob/config.hpp"
#include "zob/device.hpp"
#include "zob/result.hpp"

namespace zob {

// Where every rank runs, in rank order: its machine (a hash of the hostname and the kernel's
// boot id) and its device's NUMA node (-1 unknown). Gathered over `host`, whose ranks may span
// machines (--launcher mpi). A collective: every rank of `host` calls it at the same point.
struct RankLocation {
  std::uint64_t machine = 0;
  int numa_node = -1;
};
std::vector<RankLocation> exchange_locations(Collectives& host, int my_node);
// This machine's key for RankLocation::machine.
std::uint64_t machine_key();

// The ranks on `rank`'s machine: their NUMA nodes in rank order, and rank's index among them.
// Only they share this machine's CPUs, so only they split them.
struct LocalRanks {
  int index = 0;
  std::vector<int> nodes;
};
LocalRanks local_ranks(const std::vector<RankLocation>& where, int rank);

struct RankAdamPlacement {
  ThreadPlacement placement;
  int threads = 1;
};

// Exchanges the locations over `host`, chooses this rank's slice among the ranks of its machine
// (choose_rank_placement:
// --cpu-affinity, else its device's NUMA node, else the allowed CPUs), and prints
// "[arm rank r/N] Adam threads: T, placement ..." (and any notice) to stderr. A collective.
RankAdamPlacement place_rank_adam_threads(const RunConfig& config, Arm arm,
                                          const DeviceInfo& device, Collectives& host);

}  // namespace zob
