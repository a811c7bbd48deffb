// Internal to src/step: the ArmResult fields that run_arm and run_partitioned_arm fill the
// same way (workload, host memory pinned by setup, registration, the timed-step loop, the
// final checksum), so the one-rank and the multi-rank arm report them alike.
#pragma once
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "zob/config.hpp"
#include "zob/device.hpp"
#include "zob/host_memory.hpp"
#include "zob/phase.hpp"
#include "zob/result.hpp"

namespace zob::step_detail {

// What an arm's runner knows once its setup() has returned.
struct ArmSetup {
  std::chrono::steady_clock::time_point started;  // before the runner was built
  HostMemoryCounters before, after;               // around the runner's construction + setup
  int adam_threads = 0;
  double register_s = 0;
  const HostBuffer* master = nullptr;      // its registration stands for the arm's
  std::vector<const HostBuffer*> buffers;  // every host buffer of the arm (unallocated: skipped)
};

// workload_result (zob/step.hpp) with the host-memory growth of setup, the registration and
// setup_s (up to this call) filled in.
ArmResult arm_result_after_setup(const RunConfig& config, Arm arm, const Device& device,
                                 const ArmSetup& setup);

// Asks the driver (Device::is_registered: cudaPointerGetAttributes, the Level Zero import
// table) about every buffer of the arm, independently of what the registration call said:
// each buffer the arm registered must be registered, and no other may be (an unregistered arm
// whose memory a bug registered would time registered copies under the wrong name). Throws a
// DeviceError naming the first buffer that is not as the arm says. Returns the arm's
// registered_at_driver: "all" (registered arm), "none" (unregistered, pageable),
// "not-applicable" (a device without registration, or hostalloc: the runtime's own memory).
std::string check_driver_registration(Arm arm, const Device& device,
                                      const std::vector<const HostBuffer*>& buffers);

// The phase a runner's host is in, for the step failure point: sets `slot` for its scope and
// puts the outer phase back when the scope ends normally. When an exception leaves the scope
// the slot keeps the inner phase, so the step loop's catch still sees where it was thrown.
class PhaseScope {
 public:
  PhaseScope(Phase& slot, Phase phase)
      : slot_(slot), outer_(slot), uncaught_(std::uncaught_exceptions()) {
    slot_ = phase;
  }
  ~PhaseScope() {
    if (std::uncaught_exceptions() == uncaught_) slot_ = outer_;
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  Phase& slot_;
  Phase outer_;
  int uncaught_;
};

// Runs warmup + steps steps through run_step (its argument: the Adam step number, from 1),
// printing "[<label>] step i/n (...)" on stderr after each; appends every sample to r and
// sets step_avg_s and step_min_s from the timed ones. When a step throws, the step and
// `phase` (the runner's current phase) become step_failure_point() and the exception goes on.
void run_timed_steps(ArmResult& r, const RunConfig& config, const std::string& label,
                     const Phase& phase, const std::function<StepSample(int)>& run_step);

// A runner that allocates through the caching pool (caching_pool.hpp): its high-water marks.
struct PoolPeaks {
  std::uint64_t allocated = 0, reserved = 0;
};
// gpu_peak_gb from the pool's allocated bytes (PyTorch's max_memory_allocated, DeepSpeed's
// figure), gpu_reserved_peak_gb from its reserved ones.
inline void set_pool_peaks(ArmResult& r, PoolPeaks p) {
  r.gpu_peak_gb = static_cast<double>(p.allocated) / 1e9;
  r.gpu_reserved_peak_gb = static_cast<double>(p.reserved) / 1e9;
}
// gpu_peak_gb, param_checksum of the final fp32 master (count elements) and ok.
void finish_arm_result(ArmResult& r, const Device& device, const float* master, std::int64_t count);

}  // namespace zob::step_detail
