// Internal to src/step: the executor of --schedule deepspeed (deepspeed_plan.hpp says what
// it reproduces of DeepSpeed 0.19.8). One rank of N: N = 1 is the one-GPU schedule
// (deepspeed_step.cpp); with N > 1 the rank holds DeepSpeed's per-tensor partitions
// (DsPartitions) and its fetches and bucket flushes gain the coalesced all-gather and
// reduce-scatter DeepSpeed issues around them (deepspeed_ranks.cpp).
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "step/arm_harness.hpp"
#include "step/caching_pool.hpp"
#include "step/decoder/module_math.hpp"
#include "step/deepspeed/counting_device.hpp"
#include "step/deepspeed/deepspeed_memory.hpp"
#include "step/deepspeed/deepspeed_plan.hpp"
#include "step/device_buffer.hpp"
#include "step/module_weights.hpp"
#include "step/step_internal.hpp"
#include "zob/clock.hpp"
#include "zob/collectives.hpp"
#include "zob/host_memory.hpp"
#include "zob/model.hpp"
#include "zob/thread_pool.hpp"

namespace zob::step_detail {

// DeepSpeed's partitioning over N ranks (partition_parameters.py): every tensor on its own,
// rank r holding elements [r * part, (r + 1) * part) of it, part = ceil(count / N) (the
// ds_tensor's ds_numel; the last ranks' tails are padding). A rank's host arrays are its
// partitions back to back in tensor order; for N = 1 that is the flat array itself.
struct DsPartitions {
  int ranks = 1, rank = 0;
  std::vector<std::int64_t> part;    // per tensor id
  std::vector<std::int64_t> offset;  // per tensor id: in this rank's arrays
  std::int64_t total = 0;            // this rank's elements, padding included
  static DsPartitions build(const DeepSpeedPlan& plan, int ranks, int rank);
  // The elements of tensor t's partition on rank r that are not padding.
  std::int64_t real(const DsTensor& t, int id, int r) const;
  std::int64_t handle_elems(const std::vector<int>& ids) const;  // sum of part over ids
  // Per tensor id: the elements of this rank's partition that are not padding.
  std::vector<std::int64_t> rank_elems(const DeepSpeedPlan& plan) const;
};

// DeepSpeed's optimizer sub-groups of this rank's arrays (stage3.py _create_fp16_sub_groups,
// deepspeed_optimizer.cpp): whole tensors, each sub-group closed at >= sub_group_size elements;
// the first `on_device` of them stay on the device (offload_optimizer.ratio < 1), the CPU's
// part begins at cpu_begin; copy-back pieces (the copy_back loop) count the CPU's sub-groups.
struct DsSubGroups {
  std::vector<SubGroup> groups;
  std::size_t on_device = 0;
  std::int64_t cpu_begin = 0;
  std::int64_t pieces = 0;
};
DsSubGroups ds_sub_groups(const DeepSpeedPlan& plan, const DsPartitions& parts, const RunConfig& c);
// stage3.py's subgroup_to_device: sub-group i is the device's when i < int((1 - ratio) * groups).
std::size_t ds_device_sub_groups(std::size_t groups, double ratio);

// The device buffers N > 1 adds to the one-rank schedule's, in bytes.
struct DsRankBuffers {
  std::uint64_t partitions = 0;   // copy_back: the rank's bf16 partitions
  std::uint64_t gather_flat = 0;  // the largest fetch handle's flat buffer, N slots
  std::uint64_t bucket_in = 0;    // the largest bucket interleaved, N slots (bf16)
  std::uint64_t bucket_out = 0;   // this rank's fp32 sum of it
  std::size_t handles = 0;        // gather handles per step: fetches, prefetches, persistent
  std::size_t gathers = 0;        // all-gathers per step (one per persistent tensor)
  std::uint64_t total() const { return partitions + gather_flat + bucket_in + bucket_out; }
};
DsRankBuffers ds_rank_buffers(const DeepSpeedPlan& plan, const DsPartitions& parts);

// A device copy bracketed by two events, for its device time and its trace span.
struct TimedCopies {
  Events start, end;
  std::vector<std::string> names;
  std::vector<const char*> tracks;
  std::size_t used = 0;
};

// Host seconds per phase within one step.
struct HostTimes {
  double forward = 0, backward = 0, fetch_wait = 0, flush = 0, grad_wait = 0, norm = 0;
  double scale = 0, adam = 0, cast = 0, copy_back = 0, gather = 0, device_adam = 0;
};

class DeepSpeedRunner {
 public:
  DeepSpeedRunner(const RunConfig& config, Arm arm, Device& dev, const DeepSpeedKnobs& knobs,
                  RankComms comms = {});

  void setup();
  // --model: each module's device operations in the last step beside the plan's (empty for
  // the synthetic model).
  const std::vector<ModuleDeviceOps>& device_ops() const { return device_ops_; }
  StepSample run_step(int t);
  // This rank's fp32 master, its device sub-groups' part read back (offload_optimizer.ratio < 1).
  const float* master();
  std::int64_t total() const { return parts_.total; }  // this rank's elements
  // The final master as the stock schedule's ranks hold it (their ShardLayout shard), so
  // param_checksum compares across schedules: for N = 1 the master itself; for N > 1 every
  // rank's partitions are exchanged over the host communicator (a collective, after the steps).
  std::vector<float> module_shard_of_master();
  int threads() const { return pool_->size(); }
  double register_seconds() const {
    return master_.register_seconds() + grads_.register_seconds() + grads_bf16_.register_seconds() +
           pbf16_.register_seconds() + partitions_.register_seconds();
  }
  // The buffer whose registration stands for the arm's: the fp32 gradients, pinned in every
  // loop (the master is plain memory under offload_param); with every sub-group on the device
  // (ratio 0), the bf16 gradient partition.
  const HostBuffer& master_buffer() const {
    return grads_.data() != nullptr ? grads_ : grads_bf16_;
  }
  // Every host buffer of the arm, for the check of what the driver reports registered.
  std::vector<const HostBuffer*> host_buffers() const {
    return {&master_, &grads_, &grads_bf16_, &exp_avg_, &exp_avg_sq_, &pbf16_, &partitions_};
  }
  const ThreadPlacement& placement() const { return placement_; }
  StepLinkTimes link_times() const { return link_; }
  // What the host is doing in the step now (the step failure point's phase).
  const Phase& current_phase() const { return phase_; }
  ArmMemoryProbe& memory_probe() { return probe_; }
  // The caching pool's high-water marks: allocated (DeepSpeed's figure) and reserved.
  PoolPeaks pool_peaks() const { return {mem_.memory_peak(), mem_.reserved_peak()}; }

 private:
  bool offload() const { return plan_.offload_param; }
  int ranks() const { return comm_->size(); }
  bool sharded() const { return ranks() > 1; }
  std::int64_t modules() const { return static_cast<std::int64_t>(layout_.modules.size()); }
  const DsTensor& tensor(int id) const { return plan_.tensors[static_cast<std::size_t>(id)]; }

  void make_pool();
  void allocate_host();
  void allocate_device();
  void create_events();
  // Every fetch, gather and gradient copy over the link goes through here (through
  // link_counting_ under --model); the norm's scalars and copy_back's pieces do not.
  void copy(TimedCopies& c, Queue q, const char* track, const std::string& name, bool to_device,
            void* dst, const void* src, std::size_t bytes);
  void fetch(const std::vector<int>& ids);
  std::size_t run_visits(std::size_t v, bool forward);
  void forward();
  void backward();
  // Runs module j's forward or backward math, counting its Device operations (--model).
  void counted_math(std::int64_t j, bool forward, const std::function<void()>& run);
  // --model: device_ops_ with the plan's statements, one entry per module, and the counting
  // device copy() goes through.
  void init_device_ops();
  CountingDevice::Counts link_counts() const {
    return link_counting_ ? link_counting_->counts() : CountingDevice::Counts{};
  }
  // --model: the link copies issued through link_counting_ since `since`, added to module j's
  // fetches (H2D) in one direction or to its gradient copies (D2H and H2D).
  enum class CopyUse { fetch_forward, fetch_backward, gradients };
  void count_link_copies(std::int64_t j, CopyUse use, const CountingDevice::Counts& since);
  void gradient_hooks(std::int64_t module);
  // Device memory (deepspeed_memory.hpp): tensor id's bf16 parameters (its own block, its
  // resident slot if persistent, or the resident flat array), module j's tensors as its math
  // reads them, a persistent tensor's resident slot, and tensor id's gradient in the reduce
  // bucket (after its hook).
  bf16* param_of(int id) const;
  ModuleWeights module_params(std::int64_t j) const;
  ModuleGrads allocate_grads(std::int64_t j);  // module j's gradients, a block per tensor
  bf16* persistent_slot(int id) const;
  bf16* bucket_of(int id) const {
    return bucket_.as<bf16>() + bucket_at_[static_cast<std::size_t>(id)];
  }
  const bf16* shared_weights(std::int64_t j) const {
    const int id = shared_id_[static_cast<std::size_t>(j)];
    return id < 0 ? nullptr : param_of(id);
  }
  void allocate_param_blocks();
  // Tensors fetched on queue q: a block allocated for each that holds none.
  void make_live(const std::vector<int>& ids, Queue q);
  void free_idle_blocks();  // to_free_'s tensors not live again (last use: compute)
  void add_to_bucket(int id, const bf16* grad);
  void flush(const DsFlush& f);
  void read_norm();
  void optimizer(int t, StepSample& s, Clock::time_point t0);
  void host_optimizer(std::size_t gi, int t, StepSample& s, Clock::time_point t0);
  void device_optimizer(std::size_t gi, int t, StepSample& s, Clock::time_point t0);
  // offload_optimizer.ratio < 1 (deepspeed_optimizer.cpp): the device sub-groups' state, its
  // initial master, the fp32 gradient slot of element `at` of this rank's arrays.
  void allocate_device_optimizer();
  void init_device_masters();
  void initial_rank_range(std::int64_t lo, std::int64_t hi, float* dst) const;
  float* device_grad_at(std::int64_t at);
  // The copy_back loop's resident bf16 parameters (N > 1: this rank's partitions).
  bf16* device_params() const { return sharded() ? part_dev_.as<bf16>() : params_.as<bf16>(); }
  std::int64_t cpu_elems() const { return parts_.total - groups_.cpu_begin; }
  std::int64_t device_elems() const { return groups_.cpu_begin; }
  void gather_persistent();
  void report(StepSample& s);
  void report_collectives(StepSample& s);
  void copy_back_sub_group(const SubGroup& sg);
  // The elements a step copies host -> device under offload_param (N > 1: partitions).
  std::int64_t fetched_partition_elements() const;

  // N > 1 (deepspeed_ranks.cpp): all_gather_coalesced and its handle's wait for the tensors
  // `ids` on queue q; the bucket flush's reduce_scatter_coalesced and partition_grads.
  void allocate_rank_buffers();
  void gather_handle(const std::vector<int>& ids, Queue q, const char* what);
  void gather_persistent_ranks();
  void flush_ranks(const DsFlush& f);
  void flush_tensor_copies(int id, const bf16* grad_bf16, const float* grad_f32);

  const RunConfig& cfg_;
  Arm arm_;
  Device& dev_;
  // Every device allocation of the arm (declared before what it allocates): PyTorch's caching
  // pool, capped by --device-memory.
  CachingPoolDevice mem_;
  SingleRankCollectives single_;
  Collectives* comm_;  // host memory: the step barrier, the loss, the final checksum view
  Collectives* data_;  // device memory: the all-gathers and reduce-scatters
  ModelLayout layout_;
  DeepSpeedPlan plan_;
  DeepSpeedKnobs knobs_;
  DsPartitions parts_;
  DsSubGroups groups_;
  struct DeviceSubGroup {
    DeviceBuffer master, grad, exp_avg, exp_avg_sq;  // fp32
  };
  std::vector<DeviceSubGroup> device_opt_;
  Events device_adam_start_, device_adam_end_, reassign_done_;
  std::vector<float> full_master_;  // master(): host and device parts together
  std::unique_ptr<ThreadPool> pool_;
  ThreadPlacement placement_;
  std::vector<std::vector<int>> grads_of_module_;  // backward hook order, per module
  std::vector<std::vector<bool>> flush_of_module_;

  // master_, grads_, exp_avg_ and exp_avg_sq_ hold the CPU's sub-groups only: element `at` of
  // this rank's arrays is at `at - groups_.cpu_begin` (empty when every sub-group is the device's).
  HostBuffer master_, grads_, grads_bf16_, exp_avg_, exp_avg_sq_, pbf16_;
  // offload_param: the per-parameter bf16 partitions partition_parameters.py pins at partition
  // time (ds_tensor); the flat buffer (pbf16_) takes over and they are never read again, but
  // they stay locked and, in the registered arm, registered (2 B/param: DeepSpeed's 10 B/param
  // locked, results/h200/2026-12-02-deepspeed-account).
  HostBuffer partitions_;
  DeviceBuffer params_, norm_scalar_;
  // Parameters in blocks (offload_param, or N > 1): which tensors hold one; the blocks (freed
  // with the pool on a throw); the persistent tensors' slots; per module the shared tensor's
  // id and its tensors.
  bool param_blocks_ = false;
  DsResidency residency_;
  std::vector<void*>
      resident_block_;               // per module: the block of one made only of persistent tensors
  std::vector<void*> tensor_block_;  // per tensor: its block while fetched
  std::vector<std::vector<int>> tensors_of_module_;
  DeviceBuffer persistent_;
  std::vector<std::int64_t> persistent_at_;
  std::vector<int> shared_id_;
  std::vector<int> to_free_;   // tensors released in the visits: freed after the module's math
  std::vector<bool> fetched_;  // per tensor: copied into its current block
  // per tensor: autograd's gradient, a block from the module's backward to its hook's copy
  // into the bucket
  std::vector<void*> grad_block_;
  // Gradients: the reduce bucket, each tensor's offset in it, how full it is; the flush's
  // float64 norms, freed at the step's norm.
  DeviceBuffer bucket_;
  std::vector<std::int64_t> bucket_at_;
  std::int64_t bucket_fill_ = 0;
  std::int64_t bucket_epoch_ = 0;              // flushes so far (all steps)
  std::vector<std::int64_t> bucket_epoch_of_;  // per tensor: the bucket its gradient joined
  void check_bucket(const DsFlush& f) const;
  std::vector<void*> norm_scalars_;
  // --model: the module math's Device calls go through counting_ (declared first: math_'s
  // buffers release through it), each module's counts into device_ops_.
  std::unique_ptr<CountingDevice> counting_;
  // --model: copy()'s Device calls, so that each module's fetches and gradient copies are
  // counted apart from its math.
  std::unique_ptr<CountingDevice> link_counting_;
  std::vector<ModuleDeviceOps> device_ops_;
  ModuleMath math_;

  std::unique_ptr<DeviceEvent> origin_, norm_read_;
  Events task_start_, task_end_, grad_ready_, hook_done_, flush_start_, flush_end_;
  Events cb_copy_start_, cb_copy_end_;  // the copy_back loop: each CPU sub-group's H2D
  TimedCopies fetches_, flush_copies_;
  // N > 1: the rank's bf16 partitions on the device (copy_back loop), the flat buffer of one
  // all-gather, a bucket's interleaved gradients and this rank's fp32 sum of them.
  DeviceBuffer part_dev_, gather_flat_, bucket_in_, bucket_out_;
  TimedCopies gathers_, scatters_;  // the collectives, for their device time
  Events handle_done_;              // a gather handle's tensors in place (one per handle)
  std::size_t handles_used_ = 0;    // this step's
  std::uint64_t gather_bytes_ = 0, scatter_bytes_ = 0;  // this step's, from the peers / to them
  DeviceEvent* last_fetch_ = nullptr;       // the all-gather stream's last copy this step
  std::deque<DeviceEvent*> reduce_events_;  // flushes in flight
  std::size_t next_flush_ = 0;
  HostTimes host_;
  float loss_host_ = 0, norm_host_ = 0;
  StepLinkTimes link_;
  Phase phase_ = Phase::forward;   // set through PhaseScope
  ArmMemoryProbe probe_;           // the bound's host-memory rate (arm_harness.hpp)
  DrainQueuesOnExit drain_{dev_};  // last: destroyed first
};

}  // namespace zob::step_detail
