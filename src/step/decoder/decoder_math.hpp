// Internal to src/step: the decoder transformer's (--model) device state and each module's
// forward and backward as a fixed sequence of Device calls, behind ModuleMath (module_math.hpp)
// so the steps and schedules drive it like the synthetic model. docs/models.md describes the
// math; include/zob/device.hpp the kernels.
#pragma once
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "step/caching_pool.hpp"
#include "step/decoder/eager_decoder.hpp"
#include "step/device_buffer.hpp"
#include "step/module_weights.hpp"
#include "zob/config.hpp"
#include "zob/device.hpp"
#include "zob/model.hpp"

namespace zob::step_detail {

// Device bytes of the decoder's activations (what backward reads, per layer) and its scratch.
// The hidden-state stack x_0..x_n and the logits are DeviceSizes::hidden / logits.
// Under --schedule deepspeed (activations_per_layer) a layer's saved activations are one block
// of its caching pool, taken in the layer's forward and given back after its backward, as eager
// PyTorch frees what autograd saved: layer_block bytes, which saved_layers and eager then leave
// out (deepspeed_memory.hpp's walk counts them).
struct DecoderSizes {
  std::uint64_t saved_per_layer = 0;  // xn1, Q/K/V heads, probs, attn, x_mid, xn2, gate, up,
                                      // act (bf16) and the two rstd rows (fp32)
  std::uint64_t saved_layers = 0;     // saved_per_layer * layers; 0 with per-layer blocks
  std::uint64_t layer_block = 0;      // per-layer blocks: saved_per_layer + the eager ones
  std::uint64_t head_saved = 0;       // the final norm's output and rstd
  std::uint64_t scratch = 0;          // forward / backward temporaries of one layer
  std::uint64_t tied_grad = 0;        // tied lm_head: its gradient until the embedding's
  // --schedule deepspeed's eager decoder (eager_decoder.hpp): what it saves beyond the above
  // (every layer's unless in per-layer blocks, and the head's) and its scratch; 0 for the
  // other schedules.
  std::uint64_t eager = 0;
  // Per-module pool blocks (activations_per_layer), which total() leaves out: a layer's or the
  // head's forward and backward temporaries (the scratch, and the eager decoder's transient
  // ones; `scratch` and `eager` are without them then), from the module's first kernel until
  // its gradients are complete; the head's logits, from its forward until its gradients are.
  std::uint64_t module_scratch = 0;
  std::uint64_t logits_block = 0;
  // The same blocks as PyTorch allocates them, tensor by tensor: each of a layer's saved
  // tensors (summing to layer_block) and each of a module's temporaries (summing to
  // module_scratch; the eager decoder's transient buffers one block), in byte offsets of the
  // module's region: {offset, bytes}, ascending, none empty.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> layer_fields, scratch_fields;
  std::uint64_t total() const { return saved_layers + head_saved + scratch + tied_grad + eager; }
};
DecoderSizes decoder_sizes(const RunConfig& config);
// Whether a layer's saved activations live in a pool block of their own (--schedule deepspeed).
bool activations_per_layer(const RunConfig& config);

// A module's temporaries, one member each: their pointers (DecoderMath::Scratch) and their byte
// offsets in the fixed layout (decoder_math.cpp), so binding one to the other goes by name.
template <class T>
struct ScratchFields {
  T t[4], tk, tv, dprobs, dtmp, dtmp2, dact, dgate, dup;
  T probs, krep, vrep, xmid;  // the SDPA layout's (nullptr-sized otherwise)

  // Every member through f, in declaration order (a braced list evaluates left to right): the
  // one place that names them all, so the offsets, the pointers bound to them and the list of
  // pool blocks cannot drift apart. Designated, so a member out of place fails to compile.
  template <class F>
  auto map(F&& f) const -> ScratchFields<decltype(f(tk))> {
    return {.t = {f(t[0]), f(t[1]), f(t[2]), f(t[3])},
            .tk = f(tk),
            .tv = f(tv),
            .dprobs = f(dprobs),
            .dtmp = f(dtmp),
            .dtmp2 = f(dtmp2),
            .dact = f(dact),
            .dgate = f(dgate),
            .dup = f(dup),
            .probs = f(probs),
            .krep = f(krep),
            .vrep = f(vrep),
            .xmid = f(xmid)};
  }
};

class DecoderMath {
 public:
  // Allocates the buffers of decoder_sizes; `ids` and `index` live in the caller's buffers.
  // `pool`: where the per-layer blocks come from (required when activations_per_layer).
  DecoderMath(Device& dev, const RunConfig& config, bf16* hidden_stack, bf16* logits, float* loss,
              bf16* dy, const std::int32_t* ids, const EmbeddingGradIndex& index,
              CachingPoolDevice* pool = nullptr);
  ~DecoderMath();
  DecoderMath(const DecoderMath&) = delete;
  DecoderMath& operator=(const DecoderMath&) = delete;

  // As ModuleMath's; `shared` is the embedding table when the head is tied (required then).
  void forward(std::int64_t j, const ModuleWeights& w, const bf16* shared) const;
  void backward(std::int64_t j, const ModuleWeights& w, const ModuleGrads& g,
                const std::function<void()>& grads_done, const bf16* shared) const;

 private:
  // Element offsets of a layer's tensors in its module (weights and gradients alike);
  // biases are -1 when the model has none.
  struct LayerOffsets {
    std::int64_t q_w, q_b, k_w, k_b, v_w, v_b, o_w, gate, up, down, ln1, ln2;
  };
  // One layer's saved activations.
  // With the SDPA layout kh is head-major [B,K,S,D] and vh token-major [T,kv] (unrepeated),
  // and probs, xmid, khr and vhr point into the scratch; otherwise khr = kh and vhr = vh,
  // repeated to every query head.
  struct Saved {
    bf16 *xn1, *qh, *kh, *vh, *probs, *attn, *xmid, *xn2, *gate, *up, *act;
    float *rstd1, *rstd2;
    bf16 *khr = nullptr, *vhr = nullptr;  // K and V as the batched gemms read them
  };
  // The eager decoder's saved tensors of one layer: RMSNorm's fp32 x and bf16 x*rstd, silu's
  // output.
  struct EagerSaved {
    float *x32_1, *x32_2;
    bf16 *xhat1, *xhat2, *sg;
  };
  // Scratch of one layer's forward and backward (see scratch_offsets in decoder_math.cpp).
  using Scratch = ScratchFields<bf16*>;
  void set_layer_offsets();
  void place_buffers(Device& dev, const RunConfig& config);
  // Layer i's saved activations (and after them its eager ones): its pool block, or its slice
  // of saved_ / eager_saved_.
  char* layer_at(std::int64_t layer, std::uint64_t offset) const;
  void take_layer_block(std::int64_t layer) const;
  void give_layer_block(std::int64_t layer) const;
  // The per-module blocks of DecoderSizes (no-ops without the pool): the scratch block, which
  // sc_ and the eager decoder's transient buffers point into while it is held, and the logits.
  void take_scratch() const;
  void give_scratch() const;
  void bind_scratch(const std::function<char*(std::uint64_t)>& at) const;
  bf16* logits() const;
  void give_logits() const;
  Saved saved(std::int64_t layer) const;
  bf16* x(std::int64_t i) const { return hidden_ + (i % hidden_held_) * T_ * h_; }
  void layer_forward(std::int64_t layer, const ModuleWeights& w) const;
  void layer_backward(std::int64_t layer, const ModuleWeights& w, const ModuleGrads& g,
                      const std::function<void()>& grads_done) const;
  void attention_backward(const Saved& a, const ModuleWeights& w, const ModuleGrads& g) const;
  // The SDPA layout's backward: K and V repeated again and the probabilities recomputed.
  void recompute_attention(const Saved& a) const;
  // The parts whose kernels differ between the fused decoder and the eager one (eager_).
  EagerSaved eager_saved(std::int64_t layer) const;
  // `eager`: the eager decoder's saved tensors of this norm (rstd included); unused when fused.
  void norm_forward(const bf16* x, const bf16* w, bf16* y, float* rstd,
                    const EagerDecoder::NormSaved& eager) const;
  void norm_backward(const bf16* dy, const bf16* x, const bf16* w, const float* rstd,
                     const EagerDecoder::NormSaved& eager, bf16* dx, bf16* dw) const;
  void heads_forward(const bf16* q, const bf16* k, const bf16* v, const Saved& a) const;
  void heads_backward(const bf16* dqh, const bf16* dkh, const bf16* dvh, bf16* dq, bf16* dk,
                      bf16* dv) const;
  void head_forward(const ModuleWeights& w, const bf16* table) const;
  void head_backward(const ModuleWeights& w, const ModuleGrads& g,
                     const std::function<void()>& grads_done, const bf16* table) const;
  // C = op(A) * op(B) through Device::gemm, the three shapes of a linear layer.
  void linear(const bf16* x, const bf16* w, bf16* y, std::int64_t rows, std::int64_t in,
              std::int64_t out) const;

  Device* dev_;
  std::int64_t B_, S_, T_, h_, V_, n_, F_, H_, K_, D_, q_, kv_;
  bool bias_, tied_;
  bool sdpa_ = false;             // sdpa_layout
  std::int64_t hidden_held_ = 1;  // hidden_states_held
  double theta_;
  float eps_;
  LayerOffsets off_{};
  bf16* hidden_;
  bf16* logits_;
  float* loss_;
  bf16* dy_;
  const std::int32_t* ids_;
  EmbeddingGradIndex index_;
  DeviceBuffer saved_, head_saved_, scratch_, tied_grad_;
  // Byte offsets in a layer's activations of Saved's members, in their order.
  std::uint64_t saved_at_[13] = {};
  std::uint64_t saved_stride_ = 0;
  std::uint64_t eager_stride_ = 0;  // eager_saved_bytes_per_layer
  CachingPoolDevice* pool_ = nullptr;
  // Per layer, one pool block per field of layer_fields_; empty without the pool.
  mutable std::vector<std::vector<void*>> layer_blocks_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> layer_fields_, scratch_fields_;
  mutable Scratch sc_{};
  ScratchFields<std::uint64_t> sc_at_{};  // byte offsets of Scratch's members
  std::uint64_t scratch_bytes_ = 0;       // DecoderSizes::scratch of the fixed layout
  std::uint64_t module_scratch_ = 0, logits_bytes_ = 0;  // DecoderSizes' per-module blocks
  mutable std::vector<void*> scratch_blocks_;  // one per field of scratch_fields_ while held
  mutable void* logits_block_ = nullptr;
  bf16* xf_ = nullptr;       // the final norm's output [T,h]
  float* rstd_f_ = nullptr;  // and its rstd [T]
  bool eager_ = false;       // --schedule deepspeed: eager PyTorch's kernels (eager_decoder.hpp)
  DeviceBuffer eager_saved_, eager_scratch_;
  mutable EagerDecoder eager_math_;
  bf16* xhat_f_ = nullptr;  // eager: the final norm's x*rstd
  float* x32_f_ = nullptr;  // and its fp32 x
};

}  // namespace zob::step_detail
