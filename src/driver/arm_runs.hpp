// One arm run in a fresh child, for the two drivers of arm runs: the sweep's rounds
// (parent.cpp) and the --fit search (fit_search.cpp).
#pragma once
#include <string>

#include "zob/config.hpp"
#include "zob/device.hpp"
#include "zob/result.hpp"

namespace zob {

// The run's arm runs (every configuration, round and arm): how many, how many ran and how
// long they took, for the estimate of the time left that each arm's start line gives.
struct RunProgress {
  int total = 0, done = 0;
  double spent_s = 0;
  std::string starting(const std::string& label) const;
};

// The Python-compatible fields of an arm that produced no result, so its DRIVERRESULT entry
// still names the workload.
ArmResult failed_arm(const RunConfig& c, Arm arm, const DeviceInfo& info, int pid,
                     std::string error);

// `arm` under `config` in a fresh child (its start line on stderr names `label`); every way of
// failing gets one line on stderr and an ArmResult that says it. Sets stopped_by when a stop
// signal reached the child or the parent.
ArmResult run_arm_once(const RunConfig& config, Arm arm, const DeviceInfo& info,
                       const std::string& label, RunProgress& progress, int& stopped_by);

}  // namespace zob
