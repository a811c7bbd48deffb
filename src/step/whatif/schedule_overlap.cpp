// --schedule overlap: Adam per piece as its gradients land, the copy-back of piece i under the
// Adam of piece i+1 (overlap.hpp). The what-if of overlapping the optimizer with the copies.
// Its Adam is fused with the cast to bf16 and the copy-back copies those bf16
// (plan_bf16_copy_back).
#include "step/arm_harness.hpp"
#include "step/ranks/rank_arm.hpp"
#include "step/schedule_case.hpp"
#include "step/whatif/arm_runner.hpp"

namespace zob::step_detail {

namespace {

class OverlapCase final : public ScheduleCase {
 public:
  Schedule id() const override { return Schedule::overlap; }
  // The common plan's device sizes are this schedule's (the bf16 copy-back writes straight into
  // the device's parameters: no device temporary).
  void plan_device(const RunConfig&, const ModelLayout&, int, DeviceSizes&) const override {}
  void plan_host(const RunConfig& c, std::uint64_t P,
                 std::vector<PlannedHostBuffer>& buffers) const override {
    plan_bf16_copy_back_host(c, P, buffers);
  }
  ArmResult run(const RunConfig& config, Arm arm, Device& device,
                std::vector<float>* final_master) const override {
    return run_arm_with<ArmRunner>(config, arm, device, final_master, AdamOrder::overlapped);
  }
  ArmResult run_rank(const RunConfig& config, Arm arm, Device& device, Collectives& comm,
                     Collectives& data, std::vector<float>* final_shard,
                     const DeepSpeedKnobs*) const override {
    ArmRunner runner(config, arm, device, AdamOrder::overlapped, {&comm, &data});
    return run_rank_arm(runner, config, arm, device, comm, data, final_shard);
  }
};

}  // namespace

const ScheduleCase& overlap_schedule() {
  static const OverlapCase c;
  return c;
}

}  // namespace zob::step_detail
