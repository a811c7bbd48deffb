// Internal to src/step: the device buffer sizes of one arm, shared by run_arm (which
// allocates them) and plan_memory (which reports them), so the two cannot drift apart.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "step/device_buffer.hpp"
#include "zob/config.hpp"
#include "zob/model.hpp"
#include "zob/result.hpp"

namespace zob {
struct ShardLayout;
}

namespace zob::step_detail {

struct DeviceSizes {
  std::uint64_t params = 0;      // copy_back: the whole flat bf16 array, resident
  std::uint64_t param_slot = 0;  // offload_param: one of the two fetch slots (largest module, bf16)
  std::uint64_t grad_slot_bf16 = 0;  // one of the two gradient slots (largest module, bf16)
  std::uint64_t grad_slot_f32 = 0;   // its fp32 staging area for the D2H copy
  std::uint64_t hidden = 0;          // x_0 .. x_n, each [T,h] bf16
  std::uint64_t pre = 0;             // per layer [T,4h] bf16
  std::uint64_t act = 0;             // per layer [T,4h] bf16
  std::uint64_t logits = 0;          // [T,V] bf16, reused as dlogits
  std::uint64_t grad_hidden = 0;     // dY and the dX temporary, each [T,h] bf16
  std::uint64_t grad_ffn = 0;        // dact and dpre, each [T,4h] bf16
  std::uint64_t tokens = 0;          // ids + embedding-grad index (upper bound: T distinct ids)
  std::uint64_t loss = 0;            // one float
  // --schedule deepspeed (deepspeed/deepspeed_memory.hpp): the reduce bucket (bf16,
  // reduce_bucket_size), the persistent tensors' slots and the blocks of modules made only of
  // them, and the most one step allocates at once beyond the fixed buffers (fetched
  // parameters, autograd's gradients, the flushes' temporaries), as the pool rounds them.
  std::uint64_t reduce_bucket = 0;
  std::uint64_t persistent = 0;
  std::uint64_t deepspeed_step = 0;
  // --gpus N > 1 with --offload-param: the rank's shard of one module on its way from the
  // host to the all-gather (largest shard, bf16).
  std::uint64_t shard_stage = 0;
  // --model: the decoder's saved activations and scratch (decoder_math.hpp); pre, act and
  // grad_ffn are the synthetic model's and 0 then.
  std::uint64_t decoder = 0;
  // --schedule deepspeed with N > 1 ranks: DsRankBuffers (deepspeed/deepspeed_runner.hpp).
  std::uint64_t deepspeed_ranks = 0;
  // --schedule deepspeed with --offload-ratio < 1: the device sub-groups' fp32 master,
  // gradient, exp_avg and exp_avg_sq (4 pool blocks of 4 B/param each per sub-group).
  std::uint64_t device_optimizer = 0;
  // --schedule deepspeed: deepspeed_step split into its parts at the walk's peak (named as
  // the dry run prints them); empty for the other schedules.
  std::vector<std::pair<std::string, std::uint64_t>> deepspeed_step_parts;

  // Every nonzero buffer by name, deepspeed_step by its parts where they sum to it; the
  // figures sum to total().
  std::vector<std::pair<std::string, std::uint64_t>> named() const;
  std::uint64_t total() const {
    return params + 2 * param_slot + 2 * (grad_slot_bf16 + grad_slot_f32) + hidden + pre + act +
           logits + 2 * grad_hidden + 2 * grad_ffn + tokens + loss + reduce_bucket + persistent +
           deepspeed_step + shard_stage + decoder + deepspeed_ranks + device_optimizer;
  }
};

// The sizes every step needs (batch, seq, chunk_elems, sub_group_size > 0; steps, warmup
// >= 0); UsageError naming `who` otherwise. The CLI refuses them earlier, with its own words.
void check_step_config(const RunConfig& c, const char* who);

std::int64_t largest_module(const ModelLayout& layout);
// The module a shared tensor is (a tied head's table: the embedding); UsageError if the
// tensor is not a whole module (several ranks gather shared tensors module by module).
std::int64_t shared_owner_module(const ModelLayout& layout, const TensorSlice& t);
// Module j's fetch with several ranks: its shard and its shared tensors' owners' shards (the
// elements staged), and the same gathered from every rank (padding included).
struct RankFetch {
  std::int64_t shard = 0, gathered = 0;
};
RankFetch rank_fetch(const ModelLayout& layout, const ShardLayout& shards, std::int64_t j);
// The buffers of one rank of `ranks` (ShardLayout): its shard of the parameters resident
// (copy_back), the slots sized for a module gathered whole (padding included).
DeviceSizes device_sizes(const RunConfig& config, const ModelLayout& layout, int ranks = 1);
// Elements fetched per step under offload_param: every module (with its shared tensors) in
// forward, every module but the head (still resident from forward) again in backward.
std::int64_t fetched_elements(const ModelLayout& layout);

// The bytes one step moves through host memory, from its phases (StepBound::host_bytes).
std::uint64_t host_memory_bytes(const StepSample& s);
// The lower bound of the arm's step (StepBound, result.hpp) from its timed steps' link and
// compute times, the same-run memory probe and the arm's parameter count; and the physical
// bound from the same parts and the step's host-memory bytes.
StepBound step_bound(const ArmResult& r, const std::vector<StepLinkTimes>& links,
                     double probe_gb_per_s, std::int64_t params);

// run_arm that also hands back the final fp32 master (for the tests' element-wise checks).
ArmResult run_arm_capture(const RunConfig& config, Arm arm, Device& device,
                          std::vector<float>* final_master);
// The same for --schedule deepspeed (deepspeed/deepspeed_step.cpp); `knobs` (DeepSpeed's ZeRO-3
// settings) default to DeepSpeed's defaults, the tests shrink them to reach every rule on a tiny
// model.
struct DeepSpeedKnobs;
ArmResult run_deepspeed_arm(const RunConfig& config, Arm arm, Device& device,
                            std::vector<float>* final_master);
ArmResult run_deepspeed_arm(const RunConfig& config, Arm arm, Device& device,
                            std::vector<float>* final_master, const DeepSpeedKnobs& knobs);

}  // namespace zob::step_detail
