// Internal to src/step: the decoder's modules as eager PyTorch runs transformers' Llama / Qwen2
// code, one Device call per kernel eager launches, with its shapes and dtypes (the deepspeed
// schedule's decoder; stock and overlap keep decoder_math's fused kernels). What each sequence
// reproduces is written beside it; the counts per module are eager_op_counts', which the plan
// states and the tests check against a count of the Device calls.
// Measured reference: results/h200/2026-12-02-deepspeed-account/eager-kernels.md.
#pragma once
#include <cstdint>

#include "zob/config.hpp"
#include "zob/device.hpp"

namespace zob::step_detail {

// Device calls per module of the eager decoder, forward and backward: what deepspeed's plan
// states (DRIVERRESULT "eager_ops") and the CPU-device tests count.
struct EagerOpCounts {
  std::int64_t embedding_forward = 0, embedding_backward = 0;
  std::int64_t layer_forward = 0, layer_backward = 0;
  std::int64_t head_forward = 0, head_backward = 0;
};
EagerOpCounts eager_op_counts(const RunConfig& config);

// Whether the run's decoder is this one: --schedule deepspeed with --model, unless --decoder
// fused (--decoder eager elsewhere is refused by the config checks).
bool uses_eager_decoder(const RunConfig& config);
// Whether a layer saves what PyTorch's scaled_dot_product_attention saves (the eager decoder
// with rotary, as transformers' default "sdpa" attention): Q, K and V unrepeated and the output,
// not the probabilities, which its backward recomputes (SDPA's kernels do so from the log-sum-exp
// they keep; the tool recomputes the softmax whole and keeps no log-sum-exp: 0.2 MB per
// Llama-3.2-3B layer at b4 s512). Measured: results/h200/2026-12-04-deepspeed-memory's
// saved-activations.jsonl.
bool sdpa_layout(const RunConfig& config);
// How many [T,h] hidden states the decoder holds: x_0..x_n, or two under the eager decoder,
// whose backward reads what autograd saved (RMSNorm's fp32 x) instead of a layer's input, so
// x_i dies when layer i's forward ends, as in PyTorch.
std::uint64_t hidden_states_held(const RunConfig& config);

// Device bytes of the eager decoder's scratch (the fp32 intermediates of RMSNorm, the rotary
// temporaries and tables) and of what it saves per layer beyond decoder_math's (RMSNorm's fp32
// x and bf16 x*rstd twice, SiLU's output).
std::uint64_t eager_scratch_bytes(const RunConfig& config);
// Its two parts: the intermediates one module's forward or backward uses and leaves dead
// (transient), and the rotary tables, uploaded once.
std::uint64_t eager_transient_bytes(const RunConfig& config);
std::uint64_t eager_tables_bytes(const RunConfig& config);
std::uint64_t eager_saved_bytes_per_layer(const RunConfig& config);

class EagerDecoder {
 public:
  EagerDecoder() = default;
  // Places its buffers in `scratch` (eager_scratch_bytes of device memory, the caller's) and
  // uploads the rotary tables there (bf16 cos / sin [seq, head_dim], as LlamaRotaryEmbedding
  // returns them); returns with the device idle.
  EagerDecoder(Device& dev, const RunConfig& config, void* scratch);
  // The same with the two parts apart: `tables` (eager_tables_bytes) for the arm, `transient`
  // (eager_transient_bytes) placed now, or later and per module (nullptr: place_transient
  // before any kernel), as PyTorch allocates such temporaries per operation.
  EagerDecoder(Device& dev, const RunConfig& config, void* transient, void* tables);
  void place_transient(void* transient);

  // LlamaRMSNorm: to(fp32), pow(2), mean(-1), + eps, rsqrt, *, to(bf16), weight *. Saves
  // what autograd saves for the backward: x32 = x as fp32 and rstd [rows] (fp32), xhat =
  // bf16(x * rstd) [rows, cols].
  struct NormSaved {
    float* x32;
    float* rstd;
    bf16* xhat;
  };
  void rmsnorm_forward(const bf16* x, const bf16* w, bf16* y, const NormSaved& saved,
                       std::int64_t rows, std::int64_t cols, float eps) const;
  // Its autograd nodes: MulBackward0 (weight), ToCopyBackward0, MulBackward0, RsqrtBackward0,
  // MeanBackward1, PowBackward0 with the accumulation of x's two gradients, ToCopyBackward0.
  void rmsnorm_backward(const bf16* dy, const bf16* w, const NormSaved& saved, bf16* dx, bf16* dw,
                        std::int64_t rows, std::int64_t cols) const;
  // act_fn(gate_proj(x)) * up_proj(x): silu right after gate_proj (its output `sg` saved),
  // the mul after up_proj, as eager launches them.
  void silu_forward(const bf16* gate, bf16* sg, std::int64_t n) const;
  void gated_mul_forward(const bf16* sg, const bf16* up, bf16* act, std::int64_t n) const;
  // MulBackward0 (two muls), SiluBackward0.
  void silu_mul_backward(const bf16* dact, const bf16* gate, const bf16* up, const bf16* sg,
                         bf16* dgate, bf16* dup, std::int64_t n) const;
  // apply_rotary_pos_emb on the token-major projection x [batch, seq, heads, head_dim] seen
  // as [batch, heads, seq, head_dim]: x*cos, neg, cat, *sin, add -> head-major out.
  void rotary_forward(const bf16* x, bf16* out, std::int64_t heads) const;
  // Its backward from head-major g to token-major out: the two muls, NegBackward0, the two
  // SliceBackward0 (fill, copy each, add), the add of q's gradients, the transpose's copy.
  void rotary_backward(const bf16* g, bf16* out, std::int64_t heads) const;
  // GQA: head-major [batch, kv_heads, seq, head_dim] (or token-major when `token_major`)
  // repeated to every query head, one copy kernel.
  void repeat_kv(const bf16* kv, bf16* out, bool token_major) const;
  // The adjoint: the sum over each kv head's repeats, into head-major or token-major out.
  void sum_repeats(const bf16* g, bf16* out, bool token_major) const;
  // Head-major scratch of [batch, heads, seq, head_dim] for a kv projection.
  bf16* kv_scratch() const { return kv_small_; }

 private:
  Device* dev_ = nullptr;
  std::int64_t B_ = 0, S_ = 0, H_ = 0, K_ = 0, D_ = 0, T_ = 0, h_ = 0, q_ = 0, kv_ = 0;
  float* f32_[4] = {};   // [T, hidden] fp32 intermediates
  bf16* bf_[2] = {};     // [T, hidden] bf16 intermediates
  float* rows_[4] = {};  // [T] fp32
  bf16* rot_[4] = {};    // [T, heads*head_dim] rotary temporaries
  bf16* kv_small_ = nullptr;
  const bf16* cos_ = nullptr;
  const bf16* sin_ = nullptr;
};

}  // namespace zob::step_detail
