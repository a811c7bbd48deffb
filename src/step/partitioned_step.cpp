// ZeRO-3 over several ranks (docs/multi-gpu.md): one rank's arm is the one-GPU step's runner
// (arm_runner.hpp) with the rank's communicators, so one rank is run_arm bit for bit and N
// ranks run the same plan of queues and events with the collectives in it. This file keeps
// what only ranks need: the shard layout, and the aborts that stop the peers on a failure.
//
// Two communicators: `comm` (host memory: the step barrier, the loss, failures) and `data`
// (the device's memory: parameter all-gathers and gradient reduce-scatters; NCCL on CUDA, the
// same shared-memory one on the CPU device).
#include "step/partitioned_step.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fmt/format.h>
#include <memory>
#include <type_traits>
#include <utility>

#include "step/arm_result_fill.hpp"
#include "step/arm_runner.hpp"
#include "step/deepspeed_runner.hpp"
#include "step/step_internal.hpp"
#include "zob/clock.hpp"
#include "zob/adam.hpp"
#include "zob/errors.hpp"
#include "zob/host_memory.hpp"
#include "zob/step.hpp"
#include "zob/thread_pool.hpp"

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

namespace {

// Host first: the peers learn of the failure there; then the device communicator, whose
// kernels might otherwise wait on this rank forever (NCCL).
void abort_both(Collectives& comm, Collectives& data, const std::string& reason) {
  comm.abort(reason);
  if (&data != &comm) data.abort(reason);
}

// A collective already failed (the host communicator knows): stop the device communicator's
// kernels too, which may be waiting on the failed peer (NCCL).
void abort_device_comm(Collectives& comm, Collectives& data, const std::string& reason) {
  if (&data != &comm) data.abort(reason);
}

}  // namespace

ArmResult run_partitioned_arm(const RunConfig& config, Arm arm, Device& device,
                              Collectives& comm, std::vector<float>* final_shard) {
  return run_partitioned_arm(config, arm, device, comm, comm, final_shard);
}

namespace {

// One rank's arm with any runner of the step (ArmRunner for stock / overlap, DeepSpeedRunner
// for deepspeed): setup, the timed steps, the bound, the checksum; a failure aborts the peers.
template <class Runner>
ArmResult run_rank_arm(Runner& runner, const RunConfig& config, Arm arm, Device& device,
                       Collectives& comm, Collectives& data, std::vector<float>* final_shard) {
  const auto t_setup = Clock::now();
  const HostMemoryCounters before = host_memory_counters();
  try {
    runner.setup();
  } catch (const CollectiveError& e) {
    abort_device_comm(comm, data, e.what());
    throw;
  } catch (const std::exception& e) {
    abort_both(comm, data, fmt::format("rank {} failed in setup: {}", comm.rank(), e.what()));
    throw;
  }
  const HostMemoryCounters after = host_memory_counters();

  ArmResult r = step_detail::arm_result_after_setup(
      config, arm, device,
      {.started = t_setup, .before = before, .after = after,
       .adam_threads = runner.threads(),
       .register_s = runner.register_seconds(), .master = &runner.master_buffer()});
  r.placement = runner.placement();
  r.gpus = comm.size();

  std::vector<StepLinkTimes> links;
  step_detail::run_timed_steps(
      r, config, fmt::format("{} rank {}/{}", to_string(arm), comm.rank(), comm.size()),
      [&](int t) {
        try {
          StepSample s = runner.run_step(t);
          if (t > config.warmup) links.push_back(runner.link_times());
          return s;
        } catch (const CollectiveError& e) {
          abort_device_comm(comm, data, e.what());
          throw;
        } catch (const std::exception& e) {
          abort_both(comm, data,
                     fmt::format("rank {} failed in step {}: {}", comm.rank(), t, e.what()));
          throw;
        }
      });
  // This rank's own bound (its shard's Adam, its link); the launcher combines the ranks'.
  r.bound = step_detail::step_bound(r, links, runner.probe_gb_per_s(), runner.total());
  // The checksum is over the rank's ShardLayout shard in every schedule, so the schedules'
  // results compare; the deepspeed runner's partitions are per tensor and are rearranged.
  std::vector<float> shard;
  const float* master = runner.master();
  std::int64_t elems = runner.total();
  if constexpr (std::is_same_v<Runner, step_detail::DeepSpeedRunner>) {
    shard = runner.module_shard_of_master();
    master = shard.data();
    elems = static_cast<std::int64_t>(shard.size());
  }
  step_detail::finish_arm_result(r, device, master, elems);
  if (final_shard != nullptr) final_shard->assign(master, master + elems);
  return r;
}

}  // namespace

ArmResult run_partitioned_arm(const RunConfig& config, Arm arm, Device& device,
                              Collectives& comm, Collectives& data,
                              std::vector<float>* final_shard,
                              const step_detail::DeepSpeedKnobs* knobs) {
  if (config.schedule == Schedule::deepspeed) {
    step_detail::DeepSpeedRunner runner(config, arm, device,
                                        knobs != nullptr ? *knobs : step_detail::DeepSpeedKnobs{},
                                        {&comm, &data});
    return run_rank_arm(runner, config, arm, device, comm, data, final_shard);
  }
  step_detail::ArmRunner runner(config, arm, device, {&comm, &data});
  return run_rank_arm(runner, config, arm, device, comm, data, final_shard);
}

}  // namespace zob
