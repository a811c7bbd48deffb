// ZeRO-3 over several ranks (docs/multi-gpu.md): one rank's arm is the one-GPU step's runner
// (arm_runner.hpp) with the rank's communicators, so one rank is run_arm bit for bit and N
// ranks run the same plan of queues and events with the collectives in it. This file keeps
// the shard layout and the entry point; the schedule's case runs the rank (rank_arm.hpp).
#include "step/partitioned_step.hpp"

#include "step/schedule_case.hpp"

namespace zob {

ShardLayout ShardLayout::build(const ModelLayout& layout, int ranks) {
  ShardLayout s;
  s.ranks = ranks;
  for (const ModuleSlice& m : layout.modules) {
    const std::int64_t per = (m.count + ranks - 1) / ranks;
    s.shard.push_back(per);
    s.offset.push_back(s.total);
    s.total += per;
  }
  return s;
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

}  // namespace zob
