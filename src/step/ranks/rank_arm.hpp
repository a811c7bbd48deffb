// Internal to src/step: one rank's arm with any runner of the step (run_arm_with's
// counterpart for rank comm.rank() of comm.size(), arm_harness.hpp): setup, the timed
// steps, the bound, the checksum; a failure aborts the peers, so none waits on this rank.
//
// Two communicators: `comm` (host memory: the step barrier, the loss, failures) and `data`
// (the device's memory: parameter all-gathers and gradient reduce-scatters; NCCL on CUDA, the
// same shared-memory one on the CPU device).
#pragma once
#include <fmt/format.h>
#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "step/arm_result_fill.hpp"
#include "step/step_internal.hpp"
#include "zob/clock.hpp"
#include "zob/collectives.hpp"
#include "zob/config.hpp"
#include "zob/device.hpp"
#include "zob/host_memory.hpp"
#include "zob/result.hpp"

namespace zob::step_detail {

// Host first: the peers learn of the failure there; then the device communicator, whose
// kernels might otherwise wait on this rank forever (NCCL).
inline void abort_both(Collectives& comm, Collectives& data, const std::string& reason) {
  comm.abort(reason);
  if (&data != &comm) data.abort(reason);
}

// A collective already failed (the host communicator knows): stop the device communicator's
// kernels too, which may be waiting on the failed peer (NCCL).
inline void abort_device_comm(Collectives& comm, Collectives& data, const std::string& reason) {
  if (&data != &comm) data.abort(reason);
}

// Runner: as run_arm_with's, built with the rank's communicators. A runner whose partitions
// are not the ShardLayout shard (the deepspeed runner's are per tensor) offers
// module_shard_of_master(), so that param_checksum compares across schedules.
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

  ArmResult r = arm_result_after_setup(config, arm, device,
                                       {.started = t_setup,
                                        .before = before,
                                        .after = after,
                                        .adam_threads = runner.threads(),
                                        .register_s = runner.register_seconds(),
                                        .master = &runner.master_buffer(),
                                        .buffers = runner.host_buffers()});
  r.placement = runner.placement();
  r.gpus = comm.size();

  std::vector<StepLinkTimes> links;
  run_timed_steps(r, config, fmt::format("{} rank {}/{}", to_string(arm), comm.rank(), comm.size()),
                  runner.current_phase(), [&](int t) {
                    try {
                      StepSample s = runner.run_step(t);
                      if (t > config.warmup) {
                        links.push_back(runner.link_times());
                        runner.memory_probe().pass();
                      }
                      return s;
                    } catch (const CollectiveError& e) {
                      abort_device_comm(comm, data, e.what());
                      throw;
                    } catch (const std::exception& e) {
                      // The peers learn where: the step and what this rank was doing.
                      abort_both(comm, data,
                                 fmt::format("rank {} failed in step {}, phase {}: {}", comm.rank(),
                                             t, to_string(runner.current_phase()), e.what()));
                      throw;
                    }
                  });
  // This rank's own bound (its shard's Adam, its link); the launcher combines the ranks'.
  r.bound = step_bound(r, links, runner.memory_probe().gb_per_s(), runner.total());
  r.bound.probe_passes = runner.memory_probe().passes();
  if constexpr (requires { runner.device_ops(); }) r.device_ops = runner.device_ops();
  std::vector<float> shard;
  const float* master = runner.master();
  std::int64_t elems = runner.total();
  if constexpr (requires { runner.module_shard_of_master(); }) {
    shard = runner.module_shard_of_master();
    master = shard.data();
    elems = static_cast<std::int64_t>(shard.size());
  }
  finish_arm_result(r, device, master, elems);
  if constexpr (requires { runner.pool_peaks(); }) set_pool_peaks(r, runner.pool_peaks());
  if (final_shard != nullptr) final_shard->assign(master, master + elems);
  return r;
}

}  // namespace zob::step_detail
