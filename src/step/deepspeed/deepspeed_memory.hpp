// Internal to src/step: the device memory of --schedule deepspeed as DeepSpeed 0.19.8 holds it
// (issue 36, docs/deepspeed.md "Memory"):
//  - a parameter occupies the device from its fetch to its release (the coordinator's
//    decisions of deepspeed_plan.hpp). The tool's module math reads a module's tensors from one
//    contiguous slice, so a module's fetched tensors share one block, allocated at the first of
//    them and freed with the last (DeepSpeed: one allocation per tensor; the bytes differ by
//    at most 511 per tensor). The persistent tensors (<= 1e5 elements) live in their own
//    resident slots and are copied into a block when it is allocated (a device copy DeepSpeed
//    does not make: the price of the contiguous slice; microseconds per module);
//  - the copy_back loop on one rank keeps the flat bf16 array resident (offload_optimizer
//    alone: DeepSpeed's fetched parameter is a view of its partition);
//  - gradients: autograd's per-module gradients, copied by the hooks into the reduce bucket
//    (reduce_bucket_size elements of bf16, allocated once) and freed; each flush allocates
//    what stage3.py's __reduce_and_partition_ipg_grads and partition_grads allocate: the
//    coalesced copy of the bucket (one rank), and per tensor its bf16 copy back from the pinned
//    partition, the float64 view of _constant_buffered_norm2 (at most 2.5e8 elements), its
//    float64 norm (kept until the step's norm) and its fp32 cast.
// Every allocation goes through the caching pool (caching_pool.hpp). ds_step_memory walks one
// step's allocations in the runner's order, for the plan.
#pragma once
#include <cstdint>
#include <vector>

#include "step/deepspeed/deepspeed_plan.hpp"
#include "zob/model.hpp"

namespace zob::step_detail {

// Which modules hold a block of fetched parameters. Persistent tensors never count: a module
// made only of them (a tied head's final norm) is `resident`: its block is allocated once.
class DsResidency {
 public:
  DsResidency(const DeepSpeedPlan& plan, std::int64_t modules);
  // Tensors fetched: the modules whose block must be allocated now (in order of first use).
  std::vector<std::int64_t> make_live(const std::vector<int>& ids);
  // Tensors released: the modules whose block may be freed now.
  std::vector<std::int64_t> release(const std::vector<int>& ids);
  // The end of backward (release_and_reset_all): every block but the resident ones.
  std::vector<std::int64_t> release_all();
  bool resident(std::int64_t m) const { return fetched_[static_cast<std::size_t>(m)] == 0; }
  // The tensor's bytes are on the device now (fetched and not released; persistent: always).
  bool live(int id) const;
  int live_count(std::int64_t m) const { return live_[static_cast<std::size_t>(m)]; }

 private:
  const DeepSpeedPlan* plan_;
  std::vector<int> fetched_;  // per module: its tensors that are fetched (not persistent)
  std::vector<int> live_;     // per module: of those, live now
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
  std::uint64_t layer_block = 0, module_scratch = 0, logits = 0;
};
struct DsStepMemory {
  std::uint64_t peak = 0;
};
DsStepMemory ds_step_memory(const DeepSpeedPlan& plan, const ModelLayout& layout, int ranks,
                            const std::vector<std::int64_t>& partition_elems,
                            const DsDecoderBlocks& decoder = {});

}  // namespace zob::step_detail
