// Internal to src/step: each --schedule is a case behind this one interface (nvbandwidth's
// Testcase is the model): what it plans beyond the common step's buffers, and how it runs one
// arm, alone or as one rank of N. The cases are registered in the one table of schedules.cpp;
// adding a schedule is its case's file and a line there, plus its name and words in
// zob/config.hpp (Schedule, schedule_description: the vocabulary the CLI and the report speak
// without the step). Every case's bound is step_bound over its runner's link times.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "step/step_internal.hpp"
#include "zob/collectives.hpp"
#include "zob/config.hpp"
#include "zob/device.hpp"
#include "zob/model.hpp"
#include "zob/result.hpp"
#include "zob/step.hpp"

namespace zob::step_detail {

struct DeepSpeedKnobs;

class ScheduleCase {
 public:
  virtual ~ScheduleCase() = default;
  virtual Schedule id() const = 0;
  const char* name() const { return to_string(id()); }
  const char* description() const { return schedule_description(id()); }
  // What it plans: the device buffers of one rank of `ranks` (device_sizes has filled in the
  // common step's) and the host memory of the arm (plan_memory has filled in the common one).
  virtual void plan_device(const RunConfig& config, const ModelLayout& layout, int ranks,
                           DeviceSizes& sizes) const = 0;
  // `buffers`: the common host state of one rank of `params` parameters, which the case changes
  // into the buffers its arm allocates.
  virtual void plan_host(const RunConfig& config, std::uint64_t params,
                         std::vector<PlannedHostBuffer>& buffers) const = 0;
  // The optimizer's sub-groups of one rank and how many of them stay on the device
  // (MemoryPlan::optimizer_sub_groups / device_sub_groups); 0 and 0 where the case has none.
  virtual void plan_sub_groups(const RunConfig&, std::int64_t& groups,
                               std::int64_t& on_device) const {
    groups = on_device = 0;
  }
  // The parameters one rank of `ranks` holds on the host (padding included): ShardLayout's.
  virtual std::uint64_t rank_params(const RunConfig& config, const ModelLayout& layout,
                                    int ranks) const;
  // How it runs: one arm on one rank (final_master, if given, receives the fp32 master).
  virtual ArmResult run(const RunConfig& config, Arm arm, Device& device,
                        std::vector<float>* final_master) const = 0;
  // One arm as rank comm.rank() of comm.size() (run_partitioned_arm, ranks/partitioned_step.hpp).
  // `knobs`: DeepSpeed's ZeRO-3 settings for the case that replays it (null: its defaults).
  virtual ArmResult run_rank(const RunConfig& config, Arm arm, Device& device, Collectives& comm,
                             Collectives& data, std::vector<float>* final_shard,
                             const DeepSpeedKnobs* knobs) const = 0;
};

// stock and overlap in the copy-back loop: Adam fused with the cast writes a pinned host bf16
// copy of the parameters (2 B/param, as --offload-param has) that is copied straight into the
// device's parameters.
inline void plan_bf16_copy_back_host(const RunConfig& c, std::uint64_t P,
                                     std::vector<PlannedHostBuffer>& buffers) {
  if (c.loop == Loop::copy_back) buffers.push_back({"bf16 parameters", 2 * P, true, true});
}

// The case of `schedule`, from the table; every Schedule has one (a unit test checks).
const ScheduleCase& schedule_case(Schedule schedule);
std::span<const ScheduleCase* const> schedule_cases();

}  // namespace zob::step_detail
