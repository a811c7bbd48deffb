// Internal to src/step: what every arm runner (the what-if ArmRunner of whatif/, the
// DeepSpeedRunner of deepspeed/) does alike: take a rank's communicators: split the parameters into
// sub-groups and copy-back pieces, build the Adam thread pool on its placement, and turn a
// runner's steps into an ArmResult.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "step/arm_result_fill.hpp"
#include "step/step_internal.hpp"
#include "zob/collectives.hpp"
#include "zob/config.hpp"
#include "zob/cpu_affinity.hpp"
#include "zob/device.hpp"
#include "zob/host_memory.hpp"
#include "zob/result.hpp"
#include "zob/thread_pool.hpp"

namespace zob::step_detail {

// The communicators of a rank: `host` over host memory (the step barrier, the loss, the
// Adam placement), `data` over the device's memory (all-gathers, reduce-scatters). Null: the
// single-rank identity.
struct RankComms {
  Collectives* host = nullptr;
  Collectives* data = nullptr;
};

// Every queue idle before device or host memory goes away (registered memory above all): a
// throw in the middle of a step leaves work in flight. A runner declares it as its last
// member, so it is destroyed first, before the buffers.
class DrainQueuesOnExit {
 public:
  explicit DrainQueuesOnExit(Device& dev) : dev_(dev) {}
  ~DrainQueuesOnExit() {
    try {
      dev_.synchronize();
    } catch (...) {  // the error that brought us here is the one worth reporting
    }
  }
  DrainQueuesOnExit(const DrainQueuesOnExit&) = delete;
  DrainQueuesOnExit& operator=(const DrainQueuesOnExit&) = delete;

 private:
  Device& dev_;
};

struct SubGroup {
  std::int64_t begin = 0, end = 0;
  std::int64_t first_piece = 0;  // index of its first copy-back piece
};

// Checks the sizes run_arm needs (UsageError otherwise) and splits [0, params) into
// sub_group_size sub-groups; *pieces receives the number of copy-back pieces in all.
std::vector<SubGroup> split_sub_groups(const RunConfig& c, std::int64_t params,
                                       std::int64_t* pieces);

// The Adam pool of one arm on its CPU placement (progress line on stderr). Built before the
// host buffers: zeroing them faults their pages in from the pool's threads, so with a NUMA
// placement they land on the device's node.
std::unique_ptr<ThreadPool> make_arm_pool(const RunConfig& c, Arm arm, const Device& dev,
                                          ThreadPlacement* placement);

// The Adam pool of one rank of comm.size(): make_arm_pool's for one rank; N ranks of one host
// split its CPUs (place_rank_adam_threads, a collective: every rank must call it).
std::unique_ptr<ThreadPool> make_rank_pool(const RunConfig& c, Arm arm, const Device& dev,
                                           Collectives& comm, ThreadPlacement* placement);

// The loss of a step: the sum over ranks of their local losses, in rank order (one rank: its).
float group_loss(Collectives& comm, float local_loss);

// The same-run memory probe of an arm's bound (docs/schedules.md "Bounds"): Adam's shape over
// the arm's own optimizer buffers (at most 2^28 elements: see arm_harness.cpp), which it leaves
// bitwise as they were. start() takes 5 passes after a warm-up, before the steps; pass() one
// more, after each timed step, outside its time. The ranks of comm probe together (a barrier
// before each pass), so the bound can take the host's bandwidth as the sum of theirs. gb_per_s() is
// the median of every pass: the H200 host's bandwidth drifts by ~20 % within minutes, so a rate
// read only before the steps can miss the one they ran at
// (results/h200/2026-12-03-physical-bound-2).
class ArmMemoryProbe {
 public:
  void start(float* master, const float* grads, float* exp_avg, float* exp_avg_sq,
             std::int64_t params, ThreadPool& pool, Collectives& comm);
  void pass();
  double gb_per_s() const;  // 0 with no CPU optimizer elements (offload_optimizer.ratio 0)
  // The elements the CPU's Adam updates each step (start's params): the bound's Adam pass.
  std::int64_t params() const { return params_; }
  int passes() const { return static_cast<int>(pass_s_.size()); }

 private:
  float* p_ = nullptr;
  const float* g_ = nullptr;
  float* m_ = nullptr;
  float* v_ = nullptr;
  std::int64_t n_ = 0, params_ = 0;
  ThreadPool* pool_ = nullptr;
  Collectives* comm_ = nullptr;
  std::vector<double> pass_s_;
};

// Builds a Runner(config, arm, device, extra...) (setup() first), runs warmup + steps steps and
// fills the ArmResult. Runner has setup(), run_step(t), master(), total(), threads(),
// register_seconds(), master_buffer(), placement(), link_times() (the last step's),
// memory_probe().
template <class Runner, class... Extra>
ArmResult run_arm_with(const RunConfig& config, Arm arm, Device& device,
                       std::vector<float>* final_master, const Extra&... extra) {
  const auto t_setup = std::chrono::steady_clock::now();
  reset_host_memory_peaks();
  const HostMemoryCounters before = host_memory_counters();
  Runner runner(config, arm, device, extra...);
  runner.setup();
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
  r.host_mapped_bytes = after.peak_mapped_bytes - before.mapped_bytes;  // a step may add (below)

  std::vector<StepLinkTimes> links;
  run_timed_steps(r, config, to_string(arm), runner.current_phase(), [&](int t) {
    StepSample s = runner.run_step(t);
    if (t > config.warmup) {
      links.push_back(runner.link_times());
      runner.memory_probe().pass();
    }
    return s;
  });
  r.bound = step_bound(r, links, runner.memory_probe().gb_per_s(), runner.memory_probe().params());
  r.bound.probe_passes = runner.memory_probe().passes();
  // The most the arm mapped at once: its buffers and the temporaries a step allocates and frees
  // (the deepspeed schedule's copy-back and reassign temporaries), as the plan counts them.
  r.host_mapped_bytes = host_memory_counters().peak_mapped_bytes - before.mapped_bytes;
  if constexpr (requires { runner.device_ops(); }) r.device_ops = runner.device_ops();
  finish_arm_result(r, device, runner.master(), runner.total());
  if constexpr (requires { runner.pool_peaks(); }) set_pool_peaks(r, runner.pool_peaks());
  if (final_master != nullptr)
    final_master->assign(runner.master(), runner.master() + runner.total());
  return r;
}

}  // namespace zob::step_detail
