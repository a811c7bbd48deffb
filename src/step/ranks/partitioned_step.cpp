// ZeRO-3 over several ranks (docs/multi-gpu.md): one rank's arm is the one-GPU step's runner
// (arm_runner.hpp) with the rank's communicators, so one rank is run_arm bit for bit and N
// ranks run the same plan of queues and events with the collectives in it. This file keeps
// the shard layout; the entry point (schedules.cpp) hands the rank to its schedule's case.
#include "step/ranks/partitioned_step.hpp"

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

namespace step_detail {

ModelLayout shard_layout_of(const ModelLayout& layout, const ShardLayout& shards) {
  ModelLayout s = layout;
  for (std::size_t m = 0; m < s.modules.size(); ++m) {
    s.modules[m].offset = shards.offset[m];
    s.modules[m].count = shards.shard[m];
  }
  s.total = shards.total;
  return s;
}

}  // namespace step_detail
}  // namespace zob
