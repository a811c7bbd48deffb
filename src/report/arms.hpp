// What every report reads of the arms alike: which arms the headline compares, their keys
// and labels, the speedup, one sweep point as a run, whether registration applies. Below the
// table, the details, the verdict and the DeepSpeed lines, which all take it: no report file
// includes another in a circle (scripts/check-layers).
#pragma once
#include <optional>
#include <string>

#include "zob/config.hpp"
#include "zob/result.hpp"

namespace zob {

// The two arms the headline speedup compares (slow avg / fast avg): v1 unregistered /
// registered; v2 (--compat v2) unpinned (the pageable arm) / pinned (the registered arm).
struct SpeedupArms {
  Arm slow, fast;
};
SpeedupArms speedup_arms(const RunConfig& config);
// An arm's key in DRIVERRESULT and its row name in the table: the tool's names (v1), or the v2
// script's: unpinned, pinned (the row reads pinned-registered with --ablate-register),
// pinned-unregistered.
std::string arm_key(const RunConfig& config, Arm arm);
std::string arm_label(const RunConfig& config, Arm arm);

// The arm `arm` of run.arms when it completed, else nullptr.
const ArmResult* find_ok_arm(const RunResult& run, Arm arm);

// slow avg / fast avg (speedup_arms); nullopt unless both arms completed with a positive avg.
std::optional<double> speedup(const RunResult& run);

// One configuration of a sweep as a RunResult of its own (the first keeps the run's rounds),
// for the per-configuration reports.
RunResult point_result(const RunResult& run, const SweepPoint& point);

// True unless the arms ran on the CPU device, where registration does not exist.
bool registration_applicable(const RunResult& run);
// The warning DRIVERRESULT lists (and stderr shows) when it is not applicable; "" otherwise.
std::string not_applicable_warning(const RunResult& run);

}  // namespace zob
