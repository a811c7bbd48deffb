// Internal to src/step and its tests: ZeRO-3 partitioning over the ranks of a Collectives.
#pragma once
#include <cstdint>
#include <vector>

#include "zob/collectives.hpp"
#include "zob/config.hpp"
#include "zob/device.hpp"
#include "zob/model.hpp"
#include "zob/result.hpp"

namespace zob {

namespace step_detail {
struct DeepSpeedKnobs;
}

// Every module's flat array is split into `ranks` contiguous equal shards of
// shard[m] = ceil(count / ranks) elements (the last padded with zeros). A rank's host state is
// its shards of all modules back to back: module m's shard at offset[m], total elements.
struct ShardLayout {
  int ranks = 1;
  std::vector<std::int64_t> shard;
  std::vector<std::int64_t> offset;
  std::int64_t total = 0;
  static ShardLayout build(const ModelLayout& layout, int ranks);
};

// One arm as rank comm.rank() of comm.size(), both loops, every schedule: the one-GPU step's
// plan (arm_runner.hpp; deepspeed_runner.hpp for --schedule deepspeed, with DeepSpeed's
// per-tensor partitions and coalesced collectives) with the collectives enqueued in it. Rank r
// trains on its own micro-batch (token ids from seed + r); per module the bf16 parameters are
// all-gathered before forward and again before backward, the gradients reduce-scattered (fp32 sum
// in rank order) after the module's backward; the rank offloads, updates (CPU Adam) and copies back
// (or casts) only its shard. Each sample's loss is the sum over ranks; param_checksum is the
// checksum of this rank's final master shard (padding included), which for one rank is the whole
// master and equals run_arm's bit for bit. final_shard, if given, receives that shard. `comm`
// carries host memory (the step barrier, the loss, failures); `data` the device's memory (parameter
// all-gathers, gradient reduce-scatters). The first form is for a device whose memory is host
// memory (the CPU device): one communicator does both.
// (Defined with the schedules' table, schedules.cpp: the rank goes to its schedule's case.)
ArmResult run_partitioned_arm(const RunConfig& config, Arm arm, Device& device, Collectives& comm,
                              std::vector<float>* final_shard = nullptr);
// `knobs` (--schedule deepspeed only): DeepSpeed's ZeRO-3 settings, its defaults if null (the
// tests shrink them to reach every rule on a tiny model).
ArmResult run_partitioned_arm(const RunConfig& config, Arm arm, Device& device, Collectives& comm,
                              Collectives& data, std::vector<float>* final_shard = nullptr,
                              const step_detail::DeepSpeedKnobs* knobs = nullptr);

namespace step_detail {
// The layout of a rank's arrays: module j's shard at its ShardLayout offset (N = 1: the
// model's own layout).
ModelLayout shard_layout_of(const ModelLayout& layout, const ShardLayout& shards);
}  // namespace step_detail

}  // namespace zob
