// --schedule deepspeed: DeepSpeed 0.19.8's ZeRO-3 operations, sizes, queues and waits
// (deepspeed_plan.hpp says what is reproduced, docs/schedules.md what is not), run by the
// DeepSpeedRunner (deepspeed_runner.hpp). What it plans differs from the common step's:
// DeepSpeed's device memory (deepspeed_memory.hpp), a pinned bf16 gradient partition on the
// host and, under offload_param, the per-parameter bf16 partitions DeepSpeed pins.
#include <algorithm>

#include "step/arm_harness.hpp"
#include "step/caching_pool.hpp"
#include "step/decoder/decoder_math.hpp"
#include "step/deepspeed/deepspeed_memory.hpp"
#include "step/deepspeed/deepspeed_runner.hpp"
#include "step/ranks/rank_arm.hpp"
#include "step/schedule_case.hpp"

namespace zob::step_detail {

namespace {

class DeepSpeedCase final : public ScheduleCase {
 public:
  Schedule id() const override { return Schedule::deepspeed; }

  // DeepSpeed's device memory (deepspeed_memory.hpp): parameters from fetch to release
  // (resident in the copy_back loop on one rank), the reduce bucket, the persistent tensors,
  // and the most one step allocates at once, walked as the runner allocates.
  void plan_device(const RunConfig& c, const ModelLayout& layout, int ranks,
                   DeviceSizes& s) const override {
    const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
    const DeepSpeedKnobs knobs;
    const DeepSpeedPlan plan = build_deepspeed_plan(layout, c.loop, knobs);
    const DsPartitions parts = DsPartitions::build(plan, ranks, 0);  // rank 0: the largest
    const bool blocks = c.loop == Loop::offload_param || ranks > 1;
    s.params = blocks ? 0 : 2 * u(layout.total);
    s.param_slot = s.grad_slot_bf16 = s.grad_slot_f32 = 0;
    s.reduce_bucket = CachingPoolDevice::fresh_block_size(2 * u(ds_bucket_elems(plan, knobs)));
    if (blocks) s.persistent = ds_persistent_bytes(plan, layout);
    DsDecoderBlocks decoder;
    if (c.model.decoder()) {
      const DecoderSizes d = decoder_sizes(c);
      for (const auto& f : d.layer_fields) decoder.layer_fields.push_back(f.second);
      for (const auto& f : d.scratch_fields) decoder.scratch_fields.push_back(f.second);
      decoder.logits = d.logits_block;
    }
    const DsStepMemory walk = ds_step_memory(plan, layout, ranks, parts.rank_elems(plan), decoder);
    s.deepspeed_step = walk.peak;
    for (std::size_t p = 0; p < kDsStepParts; ++p) {
      if (walk.at_peak[p] > 0) {
        s.deepspeed_step_parts.emplace_back(ds_step_part_name(static_cast<DsStepPart>(p)),
                                            walk.at_peak[p]);
      }
    }
    // --offload-ratio < 1: the device sub-groups' optimizer state, and torch's AdamW sqrt
    // temporary (the sub-group's size, one at a time) after backward has freed its blocks.
    const DsSubGroups groups = ds_sub_groups(plan, parts, c);
    std::uint64_t largest_device_group = 0;
    for (std::size_t g = 0; g < groups.on_device; ++g) {
      const std::uint64_t bytes = 4 * u(groups.groups[g].end - groups.groups[g].begin);
      s.device_optimizer += 4 * CachingPoolDevice::fresh_block_size(bytes);
      largest_device_group = std::max(largest_device_group, bytes);
    }
    if (largest_device_group > 0) {
      s.deepspeed_step =
          std::max(s.deepspeed_step, CachingPoolDevice::fresh_block_size(largest_device_group));
    }
    if (ranks > 1) s.deepspeed_ranks = ds_rank_buffers(plan, parts).total();
    // No copy-back temporary on the device: PyTorch's blocking copy_ casts on the CPU
    // (DeepSpeedRunner::copy_back_sub_group).
  }

  // As DeepSpeedRunner::allocate_host (deepspeed_step.cpp) allocates them: the fp32 arrays
  // over the CPU's sub-groups only (--offload-ratio), the bf16 ones over every element.
  void plan_host(const RunConfig& c, std::uint64_t P,
                 std::vector<PlannedHostBuffer>& buffers) const override {
    const std::uint64_t cpu = cpu_elems(c, P);
    for (PlannedHostBuffer& b : buffers) {  // its fp32 master is plain memory in both loops
      if (b.name == "fp32 master") b.pinned = false;
      const bool fp32 = b.name == "fp32 master" || b.name == "fp32 gradients" ||
                        b.name == "Adam exp_avg" || b.name == "Adam exp_avg_sq";
      if (fp32) b.bytes = 4 * cpu;
    }
    buffers.insert(buffers.begin() + 2, {"bf16 gradient partition", 2 * P, true, true});
    std::erase_if(buffers, [](const PlannedHostBuffer& b) { return b.bytes == 0; });
    if (c.loop == Loop::offload_param) {
      buffers.push_back({"bf16 per-parameter partitions", 2 * P, true, false});
      // The device sub-groups' reassign: a blocking fp32 D2H into a fresh pageable temporary.
      const std::uint64_t staged = largest_device_group(c);
      if (staged > 0) buffers.push_back({"fp32 reassign temporary", staged, false, true});
    } else {
      // The CPU sub-groups' copy back: the bf16 cast into a fresh pageable temporary, one
      // sub-group at a time.
      const std::uint64_t staged = largest_cpu_group(c) / 2;
      if (staged > 0) buffers.push_back({"bf16 copy-back temporary", staged, false, true});
    }
  }

  void plan_sub_groups(const RunConfig& c, std::int64_t& groups,
                       std::int64_t& on_device) const override {
    const DsSubGroups g = sub_groups(c);
    groups = static_cast<std::int64_t>(g.groups.size());
    on_device = static_cast<std::int64_t>(g.on_device);
  }

  // Rank 0's sub-groups (the largest rank) for config c.
  static DsSubGroups sub_groups(const RunConfig& c) {
    const ModelLayout layout = ModelLayout::build(c.model);
    const DeepSpeedPlan plan = build_deepspeed_plan(layout, c.loop, DeepSpeedKnobs{});
    return ds_sub_groups(plan, DsPartitions::build(plan, std::max(c.gpus, 1), 0), c);
  }
  static std::uint64_t cpu_elems(const RunConfig& c, std::uint64_t P) {
    return P - static_cast<std::uint64_t>(sub_groups(c).cpu_begin);
  }
  // The fp32 bytes of the largest sub-group on the device / on the CPU.
  static std::uint64_t largest_device_group(const RunConfig& c) {
    const DsSubGroups g = sub_groups(c);
    return largest_group(g, 0, g.on_device);
  }
  static std::uint64_t largest_cpu_group(const RunConfig& c) {
    const DsSubGroups g = sub_groups(c);
    return largest_group(g, g.on_device, g.groups.size());
  }
  static std::uint64_t largest_group(const DsSubGroups& g, std::size_t from, std::size_t to) {
    std::uint64_t bytes = 0;
    for (std::size_t i = from; i < to; ++i)
      bytes = std::max(bytes, 4 * static_cast<std::uint64_t>(g.groups[i].end - g.groups[i].begin));
    return bytes;
  }

  std::uint64_t rank_params(const RunConfig& c, const ModelLayout& layout,
                            int ranks) const override {
    const DeepSpeedPlan plan = build_deepspeed_plan(layout, c.loop, DeepSpeedKnobs{});
    return static_cast<std::uint64_t>(DsPartitions::build(plan, ranks, 0).total);
  }

  ArmResult run(const RunConfig& config, Arm arm, Device& device,
                std::vector<float>* final_master) const override {
    return run_deepspeed_arm(config, arm, device, final_master);
  }

  ArmResult run_rank(const RunConfig& config, Arm arm, Device& device, Collectives& comm,
                     Collectives& data, std::vector<float>* final_shard,
                     const DeepSpeedKnobs* knobs) const override {
    DeepSpeedRunner runner(config, arm, device, knobs != nullptr ? *knobs : DeepSpeedKnobs{},
                           {&comm, &data});
    return run_rank_arm(runner, config, arm, device, comm, data, final_shard);
  }
};

}  // namespace

const ScheduleCase& deepspeed_schedule() {
  static const DeepSpeedCase c;
  return c;
}

}  // namespace zob::step_detail
