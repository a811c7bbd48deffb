// zob/step.hpp's rank entry points over the partitioned step, which stays internal to
// src/step (partitioned_step.hpp): the launchers see only the public header.
#include "step/partitioned_step.hpp"
#include "zob/step.hpp"

namespace zob {

ArmResult run_rank_arm(const RunConfig& config, Arm arm, Device& device, Collectives& comm,
                       Collectives& data) {
  return run_partitioned_arm(config, arm, device, comm, data);
}

std::int64_t rank_shard_elems(const ModelShape& model, int ranks) {
  return ShardLayout::build(ModelLayout::build(model), ranks).total;
}

}  // namespace zob
