// Internal to src/step: the device memory of --schedule deepspeed as DeepSpeed 0.19.8 holds it
// (issue 36, docs/deepspeed.md "Memory"):
//  - a parameter occupies the device from its fetch to its release (the coordinator's
//    decisions of deepspeed_plan.hpp), one pool block per tensor as DeepSpeed allocates each
//    gathered parameter; the module math reads them through ModuleWeights
//    (module_weights.hpp). The persistent tensors (<= 1e5 elements) live in their own
//    resident slots, where the math reads them. A tensor released in a module's visits is
//    freed after the module's math (DeepSpeed: after its leaf ran), which the walk follows;
//  - the copy_back loop on one rank keeps the flat bf16 array resident (offload_optimizer
//    alone: DeepSpeed's fetched parameter is a view of its partition);
//  - gradients: autograd's gradients of a module, one block per tensor, each freed once its
//    hook copied it into the reduce bucket (reduce_bucket_size elements of bf16, allocated
//    once): a flush in the middle of a module's hooks finds the earlier ones freed; each flush
//    allocates what stage3.py's __reduce_and_partition_ipg_grads and partition_grads allocate: the
//    coalesced copy of the bucket (one rank), and per tensor its bf16 copy back from the pinned
//    partition, the float64 view of _constant_buffered_norm2 (at most 2.5e8 elements), its
//    float64 norm (kept until the step's norm) and its fp32 cast.
// Every allocation goes through the caching pool (caching_pool.hpp). ds_step_memory walks one
// step's allocations in the runner's order, for the plan.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "step/deepspeed/deepspeed_plan.hpp"
#include "zob/model.hpp"

namespace zob::step_detail {

// Which tensors hold a block of fetched parameters (one block per tensor, as DeepSpeed
// allocates each gathered parameter). Persistent tensors never count: a module made only of
// them (a tied head's final norm) is `resident`: its block is allocated once.
class DsResidency {
 public:
  DsResidency(const DeepSpeedPlan& plan, std::int64_t modules);
  // Tensors fetched: those that were not live (their blocks must be allocated now).
  std::vector<int> make_live(const std::vector<int>& ids);
  // Tensors released: those that were live (their blocks may be freed now).
  std::vector<int> release(const std::vector<int>& ids);
  // The end of backward (release_and_reset_all): every live tensor.
  std::vector<int> release_all();
  bool resident(std::int64_t m) const { return fetched_[static_cast<std::size_t>(m)] == 0; }
  // The tensor's bytes are on the device now (fetched and not released; persistent: always).
  bool live(int id) const;

 private:
  const DeepSpeedPlan* plan_;
  std::vector<int> fetched_;  // per module: its tensors that are fetched (not persistent)
  std::vector<bool> tensor_live_;
};

// The persistent tensors' resident bytes: one slot array for those of fetched modules, and
// the block of each module made only of persistent tensors, as the pool rounds them.
std::uint64_t ds_persistent_bytes(const DeepSpeedPlan& plan, const ModelLayout& layout);
// The elements of the reduce bucket: reduce_bucket_size, or the largest tensor where the knobs
// make it smaller (tests only: DeepSpeed's bucket must hold any one gradient).
std::int64_t ds_bucket_elems(const DeepSpeedPlan& plan, const DeepSpeedKnobs& knobs);
// The fp64 view of _constant_buffered_norm2 for a gradient of n elements.
std::int64_t ds_norm_view_elems(std::int64_t n);

// One step's device allocations beyond the arm's fixed buffers, walked in the runner's order
// with the pool's rounding: the most allocated at once (bytes). `partition_elems[id]`: the
// elements of tensor id's partition on this rank (one rank: the tensor). `decoder`: a --model
// decoder's pool blocks (DecoderSizes; all 0 for the synthetic model, whose activations are
// fixed buffers): a layer's saved activations, taken in its forward and given back after its
// backward; each layer's and the head's scratch, held through the module's math (backward:
// until its gradients are complete, before the hooks); the head's logits, from its forward to
// the end of its backward's math.
struct DsDecoderBlocks {
  // a block per saved tensor and per temporary (DecoderSizes::layer_fields, scratch_fields: the
  // sizes), and the logits' block
  std::vector<std::uint64_t> layer_fields, scratch_fields;
  std::uint64_t logits = 0;
};
// What the walk's peak is made of, as the pool rounds each block (the dry run names them).
enum class DsStepPart {
  parameters,        // fetched parameters' blocks
  gradients,         // autograd's gradients of a module, until its hooks copied them
  activations,       // the layers' saved activations
  scratch,           // a module's scratch (and the eager decoder's transient buffers)
  logits,            // the head's logits
  bucket_copy,       // the flush's coalesced copy of the bucket (one rank)
  partition_copies,  // a flushed tensor's bf16 copy back from the pinned partition
  norm_views,        // _constant_buffered_norm2's float64 view
  norms,             // the float64 norms kept until the step's norm
  fp32_casts,        // a flushed tensor's fp32 cast
  count
};
constexpr std::size_t kDsStepParts = static_cast<std::size_t>(DsStepPart::count);
const char* ds_step_part_name(DsStepPart p);
struct DsStepMemory {
  std::uint64_t peak = 0;
  std::array<std::uint64_t, kDsStepParts> at_peak{};  // sums to peak
};
DsStepMemory ds_step_memory(const DeepSpeedPlan& plan, const ModelLayout& layout, int ranks,
                            const std::vector<std::int64_t>& partition_elems,
                            const DsDecoderBlocks& decoder = {});

}  // namespace zob::step_detail
