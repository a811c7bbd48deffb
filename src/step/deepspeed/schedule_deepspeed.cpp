// --schedule deepspeed: DeepSpeed 0.19.8's ZeRO-3 operations, sizes, queues and waits
// (deepspeed_plan.hpp says what is reproduced, docs/schedules.md what is not), run by the
// DeepSpeedRunner (deepspeed_runner.hpp). What it plans differs from the common step's: every
// parameter resident, gradients held on the device until their bucket flush, a pinned bf16
// gradient partition on the host.
#include <algorithm>

#include "step/arm_harness.hpp"
#include "step/deepspeed/deepspeed_runner.hpp"
#include "step/ranks/rank_arm.hpp"
#include "step/schedule_case.hpp"

namespace zob::step_detail {

namespace {

class DeepSpeedCase final : public ScheduleCase {
 public:
  Schedule id() const override { return Schedule::deepspeed; }

  // Every parameter resident (DeepSpeed keeps what it reuses within 1e9 elements; the
  // executor keeps all), gradients held until their bucket flush, no fetch or grad slots.
  void plan_device(const RunConfig& c, const ModelLayout& layout, int ranks,
                   DeviceSizes& s) const override {
    const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
    const std::uint64_t P = u(layout.total);
    std::uint64_t largest_tensor = 0;
    for (const auto& m : layout.modules) {
      for (const auto& t : m.tensors) largest_tensor = std::max(largest_tensor, u(t.count()));
    }
    s.params = 2 * P;
    s.param_slot = s.grad_slot_bf16 = s.grad_slot_f32 = 0;
    s.grad_store = 2 * P;
    s.flush_temp_bf16 = 2 * largest_tensor;
    s.flush_temp_f32 = 4 * largest_tensor;
    if (ranks > 1) {  // DeepSpeed's per-tensor partitions, not the ShardLayout
      const DeepSpeedPlan plan = build_deepspeed_plan(layout, c.loop);
      const DsPartitions parts = DsPartitions::build(plan, ranks, 0);
      s.deepspeed_ranks = ds_rank_buffers(plan, parts).total();
      if (c.loop == Loop::copy_back) s.copy_temp = 4 * std::min(u(c.chunk_elems), u(parts.total));
    }
  }

  void plan_host(const RunConfig& c, std::uint64_t P, MemoryPlan& plan) const override {
    plan.host_pinned_bytes += 2 * P;      // DeepSpeed's pinned bf16 gradient partition
    if (c.loop == Loop::offload_param) {  // its fp32 master is plain memory there
      plan.host_pinned_bytes -= 4 * P;
      plan.host_pageable_bytes += 4 * P;
    }
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
