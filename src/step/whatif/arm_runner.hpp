// Internal to src/step: the stock / overlap step of one rank of N (docs/anatomy.md §3,
// docs/multi-gpu.md). One program for every rank count: N = 1 is the single-GPU step (no
// collectives, the shard is the whole flat array); with N > 1 the rank owns its ShardLayout
// partition of the master, the gradients and the Adam states, all-gathers each module's bf16
// parameters into a two-slot ring before use (on the h2d queue, one module ahead) and
// reduce-scatters each module's bf16 gradients into its fp32 shard before their offload (on
// the d2h queue). Everything is enqueued with events between queues; the host waits only
// where the one-GPU plan does.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "step/arm_harness.hpp"
#include "step/decoder/module_math.hpp"
#include "step/device_buffer.hpp"
#include "step/ranks/partitioned_step.hpp"
#include "step/whatif/overlap.hpp"
#include "zob/clock.hpp"
#include "zob/collectives.hpp"
#include "zob/config.hpp"
#include "zob/device.hpp"
#include "zob/host_memory.hpp"
#include "zob/model.hpp"
#include "zob/result.hpp"
#include "zob/thread_pool.hpp"

namespace zob::step_detail {

// When Adam runs, as the schedule's case chooses: once every gradient has landed (stock), or
// per piece as its gradients land, overlapped with the copy-back (overlap).
enum class AdamOrder { after_all_gradients, overlapped };

class ArmRunner {
 public:
  ArmRunner(const RunConfig& config, Arm arm, Device& dev, AdamOrder order, RankComms comms = {});
  ArmRunner(const ArmRunner&) = delete;
  ArmRunner& operator=(const ArmRunner&) = delete;

  void setup();
  StepSample run_step(int t);  // t: Adam step number, from 1
  const float* master() const { return master_.as<float>(); }
  std::int64_t total() const { return shards_.total; }  // this rank's elements (padding included)
  int threads() const { return pool_->size(); }
  double register_seconds() const {
    return master_.register_seconds() + grads_.register_seconds() + pbf16_.register_seconds();
  }
  const HostBuffer& master_buffer() const { return master_; }
  // Every host buffer of the arm, for the check of what the driver reports registered.
  std::vector<const HostBuffer*> host_buffers() const {
    return {&master_, &grads_, &exp_avg_, &exp_avg_sq_, &pbf16_};
  }
  const ThreadPlacement& placement() const { return placement_; }
  StepLinkTimes link_times() const { return link_; }  // the last step's, for the bound
  // What the host is doing in the step now (the step failure point's phase).
  const Phase& current_phase() const { return phase_; }
  ArmMemoryProbe& memory_probe() { return probe_; }

 private:
  // Host seconds of the phases a step measures on the host clock.
  struct StepTimes {
    // adam: Adam fused with the host cast (no separate cast time)
    double forward = 0, backward = 0, grad_wait = 0, adam = 0, copy_back = 0;
  };

  bool offload() const { return cfg_.loop == Loop::offload_param; }
  int ranks() const { return comm_->size(); }
  bool sharded() const { return ranks() > 1; }
  // Modules come to the device per use: fetched (offload_param) and/or all-gathered (N > 1).
  bool fetching() const { return offload() || sharded(); }
  std::int64_t modules() const { return static_cast<std::int64_t>(layout_.modules.size()); }
  const ModuleSlice& module(std::int64_t j) const {
    return layout_.modules[static_cast<std::size_t>(j)];
  }
  // Module j's part of this rank's arrays (for N = 1 the module itself).
  const ModuleSlice& own(std::int64_t j) const {
    return shard_layout_.modules[static_cast<std::size_t>(j)];
  }
  std::int64_t padded(std::int64_t j) const { return own(j).count * ranks(); }
  std::int64_t fetch_of(std::int64_t j) const {
    return fetch_of_module_[static_cast<std::size_t>(j)];
  }
  double rel(DeviceEvent& e) const { return dev_.elapsed_seconds(*origin_, e); }
  double dur(DeviceEvent& a, DeviceEvent& b) const { return dev_.elapsed_seconds(a, b); }

  void make_pool();
  void allocate_host();
  void initial_master();
  void allocate_device();
  void create_events();
  void make_overlap_schedule();
  const bf16* weights(std::int64_t module) const;
  const bf16* shared_weights(std::int64_t module) const;
  double forward(StepSample& s);
  double backward(StepSample& s);
  void optimizer_overlap(int t, Clock::time_point t0, StepSample& s, StepTimes& times);
  void optimizer_stock(int t, Clock::time_point t0, StepSample& s, StepTimes& times);
  void report_compute(StepSample& s, const StepTimes& times);
  void report_fetches(StepSample& s);
  void report_copy_back(StepSample& s, const StepTimes& times);
  void issue_fetch(std::int64_t module, StepSample& s);
  void gather_module(std::int64_t module, const bf16* shard, bf16* dst);
  void offload_grads(std::int64_t j, bf16* g, float* g32);
  void copy_back(const SubGroup& sg);

  const RunConfig& cfg_;
  Arm arm_;
  AdamOrder order_;
  Device& dev_;
  SingleRankCollectives single_;
  Collectives* comm_;  // host memory
  Collectives* data_;  // device memory
  ModelLayout layout_;
  ShardLayout shards_;
  ModelLayout shard_layout_;  // this rank's arrays: module j at shards_.offset[j]
  std::vector<SubGroup> sub_groups_;
  std::int64_t pieces_ = 0;
  std::unique_ptr<ThreadPool> pool_;
  ThreadPlacement placement_;
  std::unique_ptr<OverlapSchedule> overlap_;  // --schedule overlap
  StepLinkTimes link_;
  Phase phase_ = Phase::forward;  // set through PhaseScope
  ArmMemoryProbe probe_;          // the bound's host-memory rate (arm_harness.hpp)

  HostBuffer master_, grads_, exp_avg_, exp_avg_sq_, pbf16_;

  DeviceBuffer params_, shard_stage_;
  DeviceBuffer param_slot_[2], grad_slot_[2], grad_f32_[2];
  ModuleMath math_;  // activations, token ids and the module kernels

  // Events, created once and re-recorded every step (each step ends with all queues idle).
  std::unique_ptr<DeviceEvent> origin_;
  Events task_start_, task_end_;  // compute: forward module j at j, backward at M + j
  // Per module, on d2h: start, the fp32 gradient ready (cast or reduce-scatter), copied out.
  Events grad_ready_, hook_done_, d2h_start_, d2h_copy_start_, d2h_end_;
  // Per fetch, on h2d: start, the shard on the device (H2D done), the module gathered.
  Events fetch_start_, fetch_gather_, fetch_end_;
  Events cb_copy_start_, cb_copy_end_;  // per copy-back piece
  // --schedule overlap: module j's gradient copies cut at the pieces (landing_parts), their
  // ends on d2h in landing order, and where each begins. Empty otherwise (one copy a module).
  std::vector<std::vector<LandingPart>> landing_parts_;
  Events part_end_;
  std::vector<std::int64_t> part_begin_;

  // Per-step schedule state.
  DeviceEvent* slot_released_[2] = {nullptr, nullptr};   // param slot: last compute that read it
  DeviceEvent* grad_slot_free_[2] = {nullptr, nullptr};  // grad slot: last D2H that read it
  std::vector<std::int64_t> fetch_of_module_;            // fetch index holding module j
  std::vector<std::int64_t> fetch_module_;               // module of fetch f
  std::int64_t fetches_ = 0;
  std::int64_t parts_landed_ = 0;  // landing parts copied so far (overlap)
  std::int64_t grad_slots_used_ = 0;
  double fetch_host_s_ = 0;
  float loss_host_ = 0;
  DrainQueuesOnExit drain_{dev_};  // last: destroyed first
};

}  // namespace zob::step_detail
