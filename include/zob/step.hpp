// One arm of the benchmark: allocate the offload state in the arm's kind of host memory,
// run warmup + timed ZeRO-3 CPU-offload steps on a device, return the measurements.
// Knows nothing of processes; the driver calls it inside a child.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "zob/collectives.hpp"
#include "zob/config.hpp"
#include "zob/device.hpp"
#include "zob/phase.hpp"
#include "zob/result.hpp"

namespace zob {

// Runs config.warmup + config.steps steps of config.loop. Progress goes to stderr. Throws
// DeviceError / UsageError; every host buffer is released on every path.
ArmResult run_arm(const RunConfig& config, Arm arm, Device& device);

// Runs the arm as rank comm.rank() of comm.size() (--gpus N, ZeRO-3 over the ranks: each
// rank owns 1/N of every module; docs/multi-gpu.md), both loops, every schedule. `comm`
// carries host memory (the step barrier, the loss, failures); `data` the device's memory
// (parameter all-gathers, gradient reduce-scatters), the same communicator where device memory
// is host memory (the CPU device). param_checksum is this rank's shard's. Throws as run_arm,
// and CollectiveError when a peer fails.
ArmResult run_rank_arm(const RunConfig& config, Arm arm, Device& device, Collectives& comm,
                       Collectives& data);

// Where an arm's steps stopped when one of them threw (a device lost at step k, a peer gone):
// the step loop records it as the exception passes and rethrows it unchanged, so the error
// keeps its type and the process that ran the arm (one arm per process) can say where it
// happened. nullopt when no step of this process threw (a failure in setup).
struct StepFailurePoint {
  int step = 0;   // from 1, warmup steps counted, within its round
  int steps = 0;  // warmup + timed steps of the round
  bool timed = false;
  Phase phase = Phase::forward;  // what the host was doing (an asynchronous device may report
                                 // a fault at the next wait, so a later phase than the fault's)
};
std::optional<StepFailurePoint> step_failure_point();
// "step 3 of 3 (timed), phase backward"
std::string describe(const StepFailurePoint& at);

// Elements of one rank's shard of the model's parameters with `ranks` ranks (every module
// split into equal shards, the last padded): the host state one rank holds.
std::int64_t rank_shard_elems(const ModelShape& model, int ranks);

// An ArmResult naming the workload (arm, device, model, params, batch, seq, tokens_per_step,
// steps, warmup, loop, schedule; registration "none"): where every arm's result starts,
// completed or failed before it produced anything.
ArmResult workload_result(const RunConfig& config, Arm arm, const DeviceInfo& device);

// One host buffer an arm allocates: what the dry run lists and the pre-flight counts.
struct PlannedHostBuffer {
  std::string name;             // as the arm names it ("fp32 master", "Adam exp_avg", ...)
  std::uint64_t bytes = 0;      // as requested (the arm maps whole pages)
  bool pinned = false;          // locked/registered (or runtime-pinned on the hostalloc arm)
  bool read_after_init = true;  // false: DeepSpeed pins it at partition time and never reads it
};

// Bytes the arm needs, for the pre-flight check and the step's byte-count tests. With --gpus N
// every figure but host_node_bytes is one rank's (one process, one device): the largest rank's.
struct MemoryPlan {
  int ranks = 1;                                // processes on this node (--gpus)
  std::vector<PlannedHostBuffer> host_buffers;  // one rank's, in the order the arm allocates
  std::uint64_t host_pinned_bytes = 0;          // locked/registered per rank (the pinned buffers)
  std::uint64_t host_pageable_bytes = 0;        // per rank: the buffers that are not pinned
  // The hostalloc arm's runtime-pinned bytes per rank: each pinned buffer rounded up to a power
  // of two, as PyTorch's caching host allocator (DeepSpeed's default pin backend) rounds it.
  std::uint64_t hostalloc_pinned_bytes = 0;
  std::uint64_t device_bytes = 0;  // one rank's device high-water mark (its pool's allocated peak)
  // What device_bytes is made of, by name, in bytes (summing to it): the fixed buffers, then
  // under --schedule deepspeed what the step holds at its peak (fetched parameters, module
  // gradients, saved activations, the flush's temporaries, ...).
  std::vector<std::pair<std::string, std::uint64_t>> device_parts;
  // --schedule deepspeed with --model: one decoder layer's saved activations, a block of the
  // caching pool from the layer's forward to its backward (0 where they are fixed buffers).
  std::uint64_t layer_activation_bytes = 0;
  // --schedule deepspeed: DeepSpeed's optimizer sub-groups of one rank, and how many of them
  // offload_optimizer.ratio keeps on the device (0 and 0 for the other schedules).
  std::int64_t optimizer_sub_groups = 0, device_sub_groups = 0;
  std::uint64_t host_bytes() const { return host_pinned_bytes + host_pageable_bytes; }
  std::uint64_t host_node_bytes() const { return host_bytes() * static_cast<std::uint64_t>(ranks); }
};
// `config.gpus` ranks; `ranks_on_node` (0: all of them) for the pre-flight of a multi-node run.
MemoryPlan plan_memory(const RunConfig& config, int ranks_on_node = 0);

// Bytes each phase moves per step (host<->device), for GB/s and the tests; the stock and
// overlap schedules' (deepspeed's own: deepspeed_plan.hpp).
struct StepTraffic {
  std::uint64_t grad_offload_d2h = 0;  // 4 B/param
  std::uint64_t copy_back_h2d = 0;     // 2 B/param of bf16 (copy_back loop)
  std::uint64_t param_fetch_h2d = 0;   // 2 B/param per fetch (offload_param loop)
  std::uint64_t adam_bytes = 0;        // 30 B/param: Adam fused with the cast to bf16
};
StepTraffic step_traffic(const RunConfig& config);

// --schedule deepspeed with --model: the Device calls one module of each kind makes per step,
// [forward, backward] (the decoder as eager PyTorch launches it,
// src/step/decoder/eager_decoder.hpp); what DRIVERRESULT's device_ops_plan states and each arm's
// device_ops counts. nullopt for the other schedules and the synthetic model.
struct PlannedDeviceOps {
  std::int64_t embedding[2] = {}, layer[2] = {}, head[2] = {};
};
std::optional<PlannedDeviceOps> planned_device_ops(const RunConfig& config);
// The kernels a --model decoder's modules launch in this run, --decoder resolved: "eager"
// (eager PyTorch's sequence: --schedule deepspeed) or "fused"; nullptr for the synthetic model.
const char* decoder_kernels_used(const RunConfig& config);

}  // namespace zob
