// The eager decoder's Device calls per module (eager_op_counts) and whether a run uses it:
// arithmetic on the RunConfig alone, in a file of its own so that the reports (DRIVERRESULT's
// device_ops_plan, through decoder_plan.cpp) and the fuzz target that builds them link no
// device code.
#include <optional>

#include "step/decoder/eager_decoder.hpp"

namespace zob::step_detail {
namespace {

// RMSNorm's calls, forward and backward (eager_decoder.cpp's two sequences).
constexpr std::int64_t kNormForward = 8, kNormBackward = 16;
// apply_rotary_pos_emb on one projection, forward and backward.
constexpr std::int64_t kRotaryForward = 5, kRotaryBackward = 10;

}  // namespace

EagerOpCounts eager_op_counts(const RunConfig& c) {
  const bool bias = c.model.arch.attention_bias, tied = c.model.arch.tie_embeddings;
  EagerOpCounts n;
  n.embedding_forward = 1;                    // the gather
  n.embedding_backward = 2 + (tied ? 1 : 0);  // zero fill, the scatter-sum, the tied add
  // 2 norms, 7 linears (+3 bias adds), 2 rotaries, GQA's K and V copies, QK^T, softmax, PV,
  // the output's permute, silu and mul, 2 residual adds.
  n.layer_forward = 2 * kNormForward + 7 + (bias ? 3 : 0) + 2 * kRotaryForward + 2 + 3 + 1 + 2 + 2;
  // MLP: 6 gemms, silu's 3, xn2's gradient sum; 2 norms and their residual sums; attention:
  // o_proj's 2 gemms, the permute, 4 batched gemms and softmax, 2 rotaries, K's and V's sums
  // over the repeats, 6 gemms (+3 bias sums), 2 sums of xn1's gradients; with the SDPA
  // layout also its recompute: K's and V's copies, QK^T and the softmax.
  n.layer_backward = 6 + 3 + 1 + 2 * (kNormBackward + 1) + 2 + 1 + 5 + 2 * kRotaryBackward + 2 + 6 +
                     (bias ? 3 : 0) + 2 + (sdpa_layout(c) ? 4 : 0);
  n.head_forward = kNormForward + 1 + 1;    // the norm, lm_head, the loss's sum
  n.head_backward = 1 + 2 + kNormBackward;  // sum's backward (a fill), lm_head's 2, the norm
  return n;
}

bool uses_eager_decoder(const RunConfig& config) {
  return config.decoder != DecoderKernels::fused && eager_decoder_applies(config);
}

bool sdpa_layout(const RunConfig& c) {
  return uses_eager_decoder(c) && c.model.arch.rope_theta > 0;
}

std::uint64_t hidden_states_held(const RunConfig& c) {
  return uses_eager_decoder(c) ? 2 : static_cast<std::uint64_t>(c.model.layers) + 1;
}

}  // namespace zob::step_detail
