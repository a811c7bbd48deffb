// --schedule stock: the algorithm's operations and nothing else (docs/anatomy.md §3): every
// gradient lands, then per sub-group CPU Adam fused with the cast to bf16 and its way back to
// the device. The what-if without a framework's choices.
#include "step/arm_harness.hpp"
#include "step/ranks/rank_arm.hpp"
#include "step/schedule_case.hpp"
#include "step/whatif/arm_runner.hpp"

namespace zob::step_detail {

namespace {

class StockCase final : public ScheduleCase {
 public:
  Schedule id() const override { return Schedule::stock; }
  // The common plan's device sizes are this schedule's (the bf16 copy-back writes straight into
  // the device's parameters: no device temporary).
  void plan_device(const RunConfig&, const ModelLayout&, int, DeviceSizes&) const override {}
  void plan_host(const RunConfig& c, std::uint64_t P,
                 std::vector<PlannedHostBuffer>& buffers) const override {
    plan_bf16_copy_back_host(c, P, buffers);
  }
  ArmResult run(const RunConfig& config, Arm arm, Device& device,
                std::vector<float>* final_master) const override {
    return run_arm_with<ArmRunner>(config, arm, device, final_master,
                                   AdamOrder::after_all_gradients);
  }
  ArmResult run_rank(const RunConfig& config, Arm arm, Device& device, Collectives& comm,
                     Collectives& data, std::vector<float>* final_shard,
                     const DeepSpeedKnobs*) const override {
    ArmRunner runner(config, arm, device, AdamOrder::after_all_gradients, {&comm, &data});
    return run_rank_arm(runner, config, arm, device, comm, data, final_shard);
  }
};

}  // namespace

const ScheduleCase& stock_schedule() {
  static const StockCase c;
  return c;
}

}  // namespace zob::step_detail
