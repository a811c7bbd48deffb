// The one table of schedule cases (schedule_case.hpp): a new schedule is its case's file and
// one line here. And the step's entry points, which hand an arm (or a rank's arm) to its
// schedule's case: zob/step.hpp's run_arm and run_rank_arm, partitioned_step.hpp's
// run_partitioned_arm.
#include <stdexcept>
#include <string>

#include "step/ranks/partitioned_step.hpp"
#include "step/schedule_case.hpp"
#include "zob/step.hpp"

namespace zob::step_detail {

// Each defined in its case's file (schedule_NAME.cpp).
const ScheduleCase& stock_schedule();
const ScheduleCase& overlap_schedule();
const ScheduleCase& deepspeed_schedule();

std::span<const ScheduleCase* const> schedule_cases() {
  // Built on first use: the cases are function-local statics of their files.
  static const ScheduleCase* const kScheduleCases[] = {
      &stock_schedule(),
      &overlap_schedule(),
      &deepspeed_schedule(),
  };
  return kScheduleCases;
}

const ScheduleCase& schedule_case(Schedule schedule) {
  for (const ScheduleCase* c : schedule_cases()) {
    if (c->id() == schedule) return *c;
  }
  throw std::logic_error("no case for schedule " + std::to_string(static_cast<int>(schedule)));
}

ArmResult run_arm_capture(const RunConfig& config, Arm arm, Device& device,
                          std::vector<float>* final_master) {
  return schedule_case(config.schedule).run(config, arm, device, final_master);
}

}  // namespace zob::step_detail

namespace zob {

ArmResult run_arm(const RunConfig& config, Arm arm, Device& device) {
  return step_detail::run_arm_capture(config, arm, device, nullptr);
}

ArmResult run_partitioned_arm(const RunConfig& config, Arm arm, Device& device, Collectives& comm,
                              std::vector<float>* final_shard) {
  return run_partitioned_arm(config, arm, device, comm, comm, final_shard);
}

ArmResult run_partitioned_arm(const RunConfig& config, Arm arm, Device& device, Collectives& comm,
                              Collectives& data, std::vector<float>* final_shard,
                              const step_detail::DeepSpeedKnobs* knobs) {
  return step_detail::schedule_case(config.schedule)
      .run_rank(config, arm, device, comm, data, final_shard, knobs);
}

// The launchers see only zob/step.hpp; the partitioned step stays internal to src/step.
ArmResult run_rank_arm(const RunConfig& config, Arm arm, Device& device, Collectives& comm,
                       Collectives& data) {
  return run_partitioned_arm(config, arm, device, comm, data);
}

std::uint64_t step_detail::ScheduleCase::rank_params(const RunConfig&, const ModelLayout& layout,
                                                     int ranks) const {
  return static_cast<std::uint64_t>(ShardLayout::build(layout, ranks).total);
}

std::int64_t rank_shard_elems(const ModelShape& model, int ranks) {
  return ShardLayout::build(ModelLayout::build(model), ranks).total;
}

}  // namespace zob
