// One arm of the benchmark: allocate the offload state in the arm's kind of host memory,
// run warmup + timed ZeRO-3 CPU-offload steps on a device, return the measurements.
// Knows nothing of processes; the driver calls it inside a child.
#pragma once
#include "zob/config.hpp"
#include "zob/device.hpp"
#include "zob/result.hpp"

namespace zob {

// Runs config.warmup + config.steps steps of config.loop. Progress goes to stderr. Throws
// DeviceError / UsageError; every host buffer is released on every path.
ArmResult run_arm(const RunConfig& config, Arm arm, Device& device);

// An ArmResult naming the workload (arm, device, model, params, batch, seq, tokens_per_step,
// steps, warmup, loop, schedule; registration "none"): where every arm's result starts,
// completed or failed before it produced anything.
ArmResult workload_result(const RunConfig& config, Arm arm, const DeviceInfo& device);

// Bytes the arm needs, for the pre-flight check and the step's byte-count tests.
struct MemoryPlan {
  std::uint64_t host_pinned_bytes = 0;    // locked/registered in the arm (master, grads, bf16 params)
  std::uint64_t host_pageable_bytes = 0;  // Adam states
  std::uint64_t device_bytes = 0;         // device high-water mark the step will reach (estimate)
};
MemoryPlan plan_memory(const RunConfig& config);

// Bytes each phase moves per step (host<->device), for GB/s and the tests.
struct StepTraffic {
  std::uint64_t grad_offload_d2h = 0;  // 4 B/param
  std::uint64_t copy_back_h2d = 0;     // 4 B/param (copy_back loop)
  std::uint64_t param_fetch_h2d = 0;   // 2 B/param per fetch (offload_param loop)
  std::uint64_t adam_bytes = 0;        // 28 B/param
};
StepTraffic step_traffic(const RunConfig& config);

}  // namespace zob
