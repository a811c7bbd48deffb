// Pre-flight: before any arm starts, check that the machine can hold what the flags ask for,
// and refuse (UsageError, exit 2) with the numbers and the fix rather than failing half-way
// through an arm with memory locked.
#pragma once
#include <cstdint>
#include <string>

#include "zob/config.hpp"
#include "zob/environment.hpp"
#include "zob/step.hpp"

namespace zob {

// The device's memory as the pre-flight knows it (0: unknown). `free` is what a fresh process
// found free with its own context made (the device probe's cudaMemGetInfo): on a GPU another
// process shares, an arm has that, not the total. Converts from a total alone (no free known).
// `host_ram`: the device's memory is the host's (DeviceInfo::memory_is_host_ram).
struct DeviceMemory {
  std::uint64_t total = 0, free = 0;
  bool host_ram = false;
  DeviceMemory(std::uint64_t total_bytes = 0, std::uint64_t free_bytes = 0,  // NOLINT: implicit
               bool is_host_ram = false)
      : total(total_bytes), free(free_bytes), host_ram(is_host_ram) {}
};

// What a run may allocate on one device: the least of --device-memory, the device's total and
// its free memory, where known; 0 when none is.
std::uint64_t device_limit_bytes(const RunConfig& config, DeviceMemory device);

// Each figure is checked against its own limit: the node's host memory against MemAvailable,
// one rank's locked bytes against RLIMIT_MEMLOCK (per process), one rank's device peak against
// device_limit_bytes. Where the device's memory is the host's RAM (DeviceMemory::host_ram), the
// host check adds each rank's planned device peak. Throws UsageError naming the first shortfall.
void preflight_check(const RunConfig& config, const MemoryPlan& plan, const HostEnvironment& host,
                     DeviceMemory device);
// The node's host RAM the pre-flight checks against MemAvailable: the plan's host bytes, plus
// each rank's planned device peak where the device's memory is host RAM.
std::uint64_t host_ram_needed(const MemoryPlan& plan, DeviceMemory device);

// What DeepSpeed's own estimator (estimate_zero3_model_states_mem_needs_all_cold, the row with
// this offload_param, offload_optimizer=cpu and zero_init=1) says a model needs, computed from
// its published formula: model states only (no activations, no reduce bucket, no gradients in
// flight, no allocator rounding), its CPU figure per node with a 1.5x buffer factor.
struct DeepSpeedEstimate {
  std::int64_t largest_layer_params = 0;  // the largest leaf module's own parameters
  std::uint64_t cpu_bytes = 0, gpu_bytes = 0;
};
DeepSpeedEstimate deepspeed_estimate(const ModelShape& model, int gpus_per_node,
                                     bool offload_param);

// Where the pre-flight refuses: the largest --batch below config.batch that it lets through,
// else the most --layers at --batch 1, as one phrase ("--batch 3 fits (the largest that
// does)").
std::string what_would_fit(const RunConfig& config, const HostEnvironment& host,
                           DeviceMemory device);

}  // namespace zob
