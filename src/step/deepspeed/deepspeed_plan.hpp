// Internal to src/step: the operations of one ZeRO-3 CPU-offload step as DeepSpeed 0.19.8 runs
// them on one rank (docs/schedules.md "deepspeed"), computed from the model's tensor list
// alone. Pure bookkeeping: no device, no memory. The executor (deepspeed_step.cpp) replays the
// plan on the Device; the unit tests check its copy counts against DeepSpeed's profile.
//
// What it reproduces of DeepSpeed (deepspeed/runtime/zero/partitioned_param_coordinator.py and
// stage3.py of 0.19.8):
//  - the module trace: every leaf module with parameters (the embedding, each block's fc1 and
//    fc2, the head) in forward order, then in reverse for backward;
//  - parameter persistence: tensors of <= 1e5 elements (stage3_param_persistence_threshold)
//    stay on the device; they are released at the start of the optimizer step and gathered
//    again, one blocking H2D copy each, after it (_post_step);
//  - fetch: a module's tensors that are not on the device are copied host -> device, one copy
//    per tensor, on the all-gather stream; the host then synchronises that stream (one wait
//    per distinct fetch handle still in flight); prefetch of the next tensors of the trace up
//    to stage3_prefetch_bucket_size (5e7) elements, bounded by stage3_max_live_parameters;
//  - release after use, unless the tensor is used again within stage3_max_reuse_distance (1e9)
//    elements of the trace, or a prefetch already claimed its next use;
//  - gradients: each tensor's gradient joins the reduce bucket (reduce_bucket_size 5e8
//    elements); when the next one would overflow it, and at the end of backward, the bucket is
//    flushed, in ds_id order: per tensor D2H bf16 into the pinned bf16 gradient partition, H2D back
//    into a device temporary, its fp32 cast for the norm, its fp32 cast and D2H into the pinned
//    fp32 gradient of the optimizer; at most 2 flushes in flight (max_param_reduce_events);
//  - the step: the global norm's scalar reads and writes, then per sub-group the CPU gradient
//    scaling pass, CPU Adam, and the master -> bf16 cast on the host (offload_param) or the
//    copy-back (copy_back loop).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "zob/config.hpp"
#include "zob/model.hpp"

namespace zob::step_detail {

// DeepSpeed's ZeRO-3 defaults (deepspeed/runtime/zero/config.py): the upstream script's
// ds_config sets none of them.
struct DeepSpeedKnobs {
  std::int64_t prefetch_bucket = 50'000'000;        // stage3_prefetch_bucket_size
  std::int64_t max_live = 1'000'000'000;            // stage3_max_live_parameters
  std::int64_t max_reuse_distance = 1'000'000'000;  // stage3_max_reuse_distance
  std::int64_t persistence_threshold = 100'000;     // stage3_param_persistence_threshold
  std::int64_t reduce_bucket = 500'000'000;         // reduce_bucket_size
  int max_reduce_events = 2;                        // max_param_reduce_events
};

struct DsTensor {
  std::string name;
  std::int64_t offset = 0, count = 0;  // in the flat parameter array
  std::int64_t module = 0;             // the tool's module (embedding, layerN, head)
  bool persistent = false;
};

// A leaf module's use in the trace: what is fetched before it runs, whether the host waits
// for the fetch stream, what is prefetched after the wait, and (backward) the gradient hooks.
struct DsVisit {
  std::int64_t module = 0;  // the tool's module whose compute this leaf belongs to
  bool forward = true;
  std::vector<int> tensors;   // the leaf's own tensors (ascending id)
  std::vector<int> fetch;     // tensor ids copied H2D before the module runs (one handle)
  int waits = 0;              // stream synchronisations (distinct in-flight handles)
  std::vector<int> prefetch;  // tensor ids copied H2D after the wait (one handle)
  std::vector<int> released;  // tensor ids freed on the device after the module ran
  // Backward only: the tensors whose gradients become ready, in hook order; flush_before[i]
  // is true where the bucket is flushed before grads[i] joins it.
  std::vector<int> grads;
  std::vector<bool> flush_before;
};

struct DsFlush {
  std::vector<int> tensors;  // in bucket order
};

// One module's copies over the link in a step, as the plan states them (module_copies). Per
// rank: with N ranks each rank copies its partition of every tensor the plan names, so the
// counts are the same on every rank (the collectives and the device-side copies around them
// are not in them).
struct DsModuleCopies {
  // H2D parameter fetches (offload_param; none in copy_back): the fetch and prefetch copies of
  // the module's visits in forward and in backward.
  std::int64_t fetch_forward = 0, fetch_backward = 0;
  // The bucket flushes the module's gradient hooks issue (the previous bucket's tensors, not
  // the module's own), and for the epilogue module also the end-of-backward flush of the rest
  // of the bucket: per flushed tensor two D2H copies (bf16, fp32) and one H2D (bf16 back).
  std::int64_t grad_d2h = 0, grad_h2d = 0;
};

// The global gradient norm (complete_grad_norm_calculation_for_cpu_offload and its checks) in
// the profile: a float64 scalar read (8 B), two 4 B scalar writes from pageable memory, two
// 4 B reads; every one a host synchronisation.
inline constexpr int kNormReads = 3;
inline constexpr int kNormWrites = 2;

struct DeepSpeedPlan {
  std::vector<DsTensor> tensors;
  std::vector<DsVisit> visits;   // forward then backward
  std::vector<DsFlush> flushes;  // in the order they happen; the last is the epilogue's
  std::vector<int> persistent;   // gathered after the optimizer step (offload_param loop)
  bool offload_param = false;

  // Copies per step and direction, and their bytes (the unit tests' anatomy check).
  struct Count {
    std::int64_t copies = 0;
    std::uint64_t bytes = 0;
  };
  Count h2d() const;
  Count d2h() const;
  int host_waits() const;  // fetch-stream synchronisations in forward + backward
  std::int64_t fetched_elements() const;
  // The module whose gradient hooks ran last in backward (the embedding): the epilogue's flush
  // of the rest of the bucket, which no hook issues, is counted with its hooks' copies.
  std::int64_t epilogue_module() const { return visits.back().module; }
  // Per module (index: the tool's module), its copies in forward and backward. They sum to
  // h2d() less the persistent gathers after the step and the norm's scalar writes, and to
  // d2h() less the norm's scalar reads.
  std::vector<DsModuleCopies> module_copies(std::int64_t modules) const;
};

DeepSpeedPlan build_deepspeed_plan(const ModelLayout& layout, Loop loop,
                                   const DeepSpeedKnobs& knobs = {});

}  // namespace zob::step_detail
