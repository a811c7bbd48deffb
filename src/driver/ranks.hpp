// --gpus N: one arm as N rank processes, one per device. The arm's child process becomes the
// ranks' launcher: it creates the shared-memory region, forks the ranks, watches them (a rank
// that dies raises the region's abort flag, so the others fail fast instead of waiting), and
// merges their results into one ArmResult. Nothing here knows what a step computes.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

#include "zob/config.hpp"
#include "zob/result.hpp"

namespace zob {

// The launcher: runs in the arm child when config.gpus > 1; writes one ArmResult to result_fd.
int run_ranked_arm_child(const RunConfig& config, Arm arm, int result_fd);

// What one rank process left behind.
struct RankOutcome {
  int rank = 0;
  int device_index = 0;
  pid_t pid = 0;
  std::string output;  // its ArmResult JSON, if it sent one
  bool exited = false;
  int exit_code = 0;
  int term_signal = 0;
  bool killed_by_launcher = false;  // SIGKILLed after the grace period that followed a failure
};

// Builds the arm's result from the ranks' (pure; unit-tested). With every rank ok: each
// step's wall_s is the slowest rank's, step_avg/min follow from those, param_checksum combines
// the shards' checksums in rank order. Otherwise ok = false and the error names the rank at
// fault: `culprit` (from the region's abort flag, -1 if none) or the first rank that failed.
ArmResult merge_rank_results(const RunConfig& config, Arm arm,
                             const std::vector<RankOutcome>& ranks, int culprit,
                             const std::string& abort_reason);

// Combines the shards' checksums (rank order) into the arm's param_checksum; one rank: its own.
std::string combine_checksums(const std::vector<std::string>& shard_checksums);

}  // namespace zob
