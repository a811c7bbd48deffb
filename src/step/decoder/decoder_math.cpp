// The decoder transformer's forward and backward on the Device (decoder_math.hpp). One layer,
// as Hugging Face's LlamaDecoderLayer / Qwen2DecoderLayer computes it (eager attention):
//   xn1 = rmsnorm(x) ; q,k,v = xn1 W^T (+ b) ; Q,K = rope(q,k), K,V repeated to every head
//   P = causal_softmax(Q K^T / sqrt(D)) ; attn = P V ; x_mid = x + attn W_o^T
//   xn2 = rmsnorm(x_mid) ; x' = x_mid + (silu(xn2 W_g^T) * xn2 W_u^T) W_d^T
// The head: xf = rmsnorm(x_n) ; logits = xf W_lm^T ; loss = sum(logits), the upstream
// script's loss with --model (engine(ids).logits.sum()).
// --schedule deepspeed runs RMSNorm, SiLU-and-mul, rotary and GQA's copies as eager PyTorch's
// kernels instead (eager_decoder.hpp); its bf16 roundings differ from the fused kernels' one.
#include "step/decoder/decoder_math.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <stdexcept>

namespace zob::step_detail {
namespace {

// Sub-buffers start on 256-byte boundaries (128 bf16 / 64 fp32 elements).
std::uint64_t padded(std::uint64_t bytes) { return (bytes + 255) / 256 * 256; }

struct Dims {
  std::uint64_t T, h, q, kv, F, probs;
  bool sdpa;  // sdpa_layout: what SDPA saves (K and V unrepeated, no probabilities, no x_mid)
};

Dims dims_of(const RunConfig& c) {
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  const DecoderArch& a = c.model.arch;
  return {u(c.tokens()),           u(c.model.hidden),
          u(a.heads * a.head_dim), u(a.kv_heads * a.head_dim),
          u(a.intermediate),       u(c.batch * a.heads) * u(c.seq) * u(c.seq),
          sdpa_layout(c)};
}

// Byte offsets of one layer's saved activations, in the order of DecoderMath::Saved.
struct SavedOffsets {
  std::uint64_t rstd1, rstd2, xn1, qh, kh, vh, probs, attn, xmid, xn2, gate, up, act, end;
};

SavedOffsets saved_offsets(const Dims& d) {
  SavedOffsets o{};
  std::uint64_t at = 0;
  const auto take = [&](std::uint64_t bytes) {
    const std::uint64_t here = at;
    at += padded(bytes);
    return here;
  };
  o.rstd1 = take(4 * d.T);
  o.rstd2 = take(4 * d.T);
  o.xn1 = take(2 * d.T * d.h);
  o.qh = take(2 * d.T * d.q);
  // SDPA saves K (after rotary, head-major) and V (token-major) unrepeated; the eager
  // attention saves both repeated to every query head, and the probabilities.
  o.kh = take(2 * d.T * (d.sdpa ? d.kv : d.q));
  o.vh = take(2 * d.T * (d.sdpa ? d.kv : d.q));
  o.probs = take(d.sdpa ? 0 : 2 * d.probs);
  o.attn = take(2 * d.T * d.q);
  // x_mid: the fused RMSNorm's backward reads it; the eager one reads its own saved fp32 x.
  o.xmid = take(d.sdpa ? 0 : 2 * d.T * d.h);
  o.xn2 = take(2 * d.T * d.h);
  o.gate = take(2 * d.T * d.F);
  o.up = take(2 * d.T * d.F);
  o.act = take(2 * d.T * d.F);
  o.end = at;
  return o;
}

// Scratch: four [T,q], two [T,kv], the probabilities' gradient, two [T,h], three [T,F];
// with the SDPA layout also what it does not save: the probabilities (recomputed in
// backward), K and V repeated to every query head (repeated again in backward) and x_mid.
struct ScratchOffsets : ScratchFields<std::uint64_t> {
  std::uint64_t end;
};

ScratchOffsets scratch_offsets(const Dims& d) {
  ScratchOffsets o{};
  std::uint64_t at = 0;
  const auto take = [&](std::uint64_t bytes) {
    const std::uint64_t here = at;
    at += padded(bytes);
    return here;
  };
  for (std::uint64_t& t : o.t) t = take(2 * d.T * d.q);
  o.tk = take(2 * d.T * d.kv);
  o.tv = take(2 * d.T * d.kv);
  o.dprobs = take(2 * d.probs);
  o.dtmp = take(2 * d.T * d.h);
  o.dtmp2 = take(2 * d.T * d.h);
  o.dact = take(2 * d.T * d.F);
  o.dgate = take(2 * d.T * d.F);
  o.dup = take(2 * d.T * d.F);
  if (d.sdpa) {
    o.probs = take(2 * d.probs);
    o.krep = take(2 * d.T * d.q);
    o.vrep = take(2 * d.T * d.q);
    o.xmid = take(2 * d.T * d.h);
  }
  o.end = at;
  return o;
}

// The fields [start, next start) of a region laid out at `starts` up to `end`, the empty
// ones left out: the tensors PyTorch would allocate one by one.
std::vector<std::pair<std::uint64_t, std::uint64_t>> fields_of(std::vector<std::uint64_t> starts,
                                                               std::uint64_t end) {
  std::sort(starts.begin(), starts.end());
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const std::uint64_t next = i + 1 < starts.size() ? starts[i + 1] : end;
    if (next > starts[i]) out.emplace_back(starts[i], next - starts[i]);
  }
  return out;
}

}  // namespace

bool activations_per_layer(const RunConfig& c) { return c.schedule == Schedule::deepspeed; }

DecoderSizes decoder_sizes(const RunConfig& c) {
  const Dims d = dims_of(c);
  DecoderSizes s;
  const bool blocks = activations_per_layer(c);
  const std::uint64_t n = static_cast<std::uint64_t>(c.model.layers);
  s.saved_per_layer = saved_offsets(d).end;
  s.saved_layers = blocks ? 0 : s.saved_per_layer * n;
  s.head_saved = padded(4 * d.T) + padded(2 * d.T * d.h);
  s.scratch = blocks ? 0 : scratch_offsets(d).end;
  if (c.model.arch.tie_embeddings)
    s.tied_grad = 2 * static_cast<std::uint64_t>(c.model.vocab) * d.h;
  const std::uint64_t eager_per_layer = uses_eager_decoder(c) ? eager_saved_bytes_per_layer(c) : 0;
  if (uses_eager_decoder(c)) {
    s.eager = (blocks ? 0 : eager_per_layer * n) + padded(2 * d.T * d.h) + padded(4 * d.T * d.h) +
              (blocks ? eager_tables_bytes(c) : eager_scratch_bytes(c));
  }
  if (blocks) {
    s.layer_block = s.saved_per_layer + eager_per_layer;
    s.module_scratch =
        scratch_offsets(d).end + (uses_eager_decoder(c) ? eager_transient_bytes(c) : 0);
    s.logits_block = 2 * static_cast<std::uint64_t>(c.model.vocab) * d.T;
    const SavedOffsets so = saved_offsets(d);
    std::vector<std::uint64_t> at = {so.rstd1, so.rstd2, so.xn1, so.qh,   so.kh, so.vh, so.probs,
                                     so.attn,  so.xmid,  so.xn2, so.gate, so.up, so.act};
    if (eager_per_layer > 0) {  // EagerSaved: x32_1, x32_2 (fp32), xhat1, xhat2, sg
      const std::uint64_t f32 = padded(4 * d.T * d.h), b16 = padded(2 * d.T * d.h);
      for (std::uint64_t o : {std::uint64_t{0}, f32, 2 * f32, 2 * f32 + b16, 2 * f32 + 2 * b16})
        at.push_back(so.end + o);
    }
    s.layer_fields = fields_of(at, s.layer_block);
    const ScratchOffsets co = scratch_offsets(d);
    std::vector<std::uint64_t> sc;
    co.map([&](std::uint64_t offset) {
      sc.push_back(offset);
      return offset;
    });
    sc.push_back(co.end);  // the eager transient buffers
    s.scratch_fields = fields_of(sc, s.module_scratch);
  }
  return s;
}

DecoderMath::DecoderMath(Device& dev, const RunConfig& c, bf16* hidden_stack, bf16* logits,
                         float* loss, bf16* dy, const std::int32_t* ids,
                         const EmbeddingGradIndex& index, CachingPoolDevice* pool)
    : dev_(&dev),
      hidden_(hidden_stack),
      logits_(logits),
      loss_(loss),
      dy_(dy),
      ids_(ids),
      index_(index),
      pool_(pool) {
  if (activations_per_layer(c) && pool_ == nullptr) {
    throw std::logic_error("decoder: per-layer activations without a caching pool");
  }
  if (!activations_per_layer(c)) pool_ = nullptr;
  const DecoderArch& a = c.model.arch;
  B_ = c.batch;
  S_ = c.seq;
  T_ = c.tokens();
  h_ = c.model.hidden;
  V_ = c.model.vocab;
  n_ = c.model.layers;
  F_ = a.intermediate;
  H_ = a.heads;
  K_ = a.kv_heads;
  D_ = a.head_dim;
  q_ = H_ * D_;
  kv_ = K_ * D_;
  bias_ = a.attention_bias;
  tied_ = a.tie_embeddings;
  theta_ = a.rope_theta;
  eps_ = static_cast<float>(a.rms_norm_eps);
  sdpa_ = sdpa_layout(c);
  hidden_held_ = static_cast<std::int64_t>(hidden_states_held(c));
  set_layer_offsets();
  place_buffers(dev, c);
}

// The layer's tensors in ModelLayout's order (model.cpp, build_decoder_layout).
void DecoderMath::set_layer_offsets() {
  std::int64_t at = 0;
  const auto take = [&](std::int64_t n) {
    const std::int64_t here = at;
    at += n;
    return here;
  };
  off_.q_w = take(q_ * h_);
  off_.q_b = bias_ ? take(q_) : -1;
  off_.k_w = take(kv_ * h_);
  off_.k_b = bias_ ? take(kv_) : -1;
  off_.v_w = take(kv_ * h_);
  off_.v_b = bias_ ? take(kv_) : -1;
  off_.o_w = take(h_ * q_);
  off_.gate = take(F_ * h_);
  off_.up = take(F_ * h_);
  off_.down = take(h_ * F_);
  off_.ln1 = take(h_);
  off_.ln2 = take(h_);
}

// Allocates the saved activations, the head's, the scratch and the tied gradient, and points
// saved_at_ / sc_ / xf_ / rstd_f_ into them (or, per-layer blocks, into its offsets).
void DecoderMath::place_buffers(Device& dev, const RunConfig& c) {
  const DecoderSizes s = decoder_sizes(c);
  saved_ = DeviceBuffer(dev, s.saved_layers);
  head_saved_ = DeviceBuffer(dev, s.head_saved);
  scratch_ = DeviceBuffer(dev, s.scratch);
  module_scratch_ = s.module_scratch;
  logits_bytes_ = s.logits_block;
  tied_grad_ = DeviceBuffer(dev, s.tied_grad);
  const Dims d = dims_of(c);
  const SavedOffsets so = saved_offsets(d);
  saved_stride_ = so.end;
  const std::uint64_t at[13] = {so.xn1, so.qh,   so.kh, so.vh,  so.probs, so.attn, so.xmid,
                                so.xn2, so.gate, so.up, so.act, so.rstd1, so.rstd2};
  std::copy(std::begin(at), std::end(at), std::begin(saved_at_));
  const auto b = [](char* base, std::uint64_t off) { return reinterpret_cast<bf16*>(base + off); };
  if (pool_ != nullptr) layer_blocks_.assign(static_cast<std::size_t>(n_), {});
  layer_fields_ = s.layer_fields;
  scratch_fields_ = s.scratch_fields;
  const ScratchOffsets co = scratch_offsets(d);
  sc_at_ = co;  // the offsets, without the end
  scratch_bytes_ = co.end;
  if (pool_ == nullptr) bind_scratch([&](std::uint64_t o) { return scratch_.as<char>() + o; });
  rstd_f_ = head_saved_.as<float>();
  xf_ = b(head_saved_.as<char>(), padded(4 * d.T));
  eager_ = uses_eager_decoder(c);
  if (eager_) {
    eager_stride_ = eager_saved_bytes_per_layer(c);
    const std::uint64_t layers =
        pool_ != nullptr ? 0 : eager_stride_ * static_cast<std::uint64_t>(n_);
    eager_saved_ = DeviceBuffer(dev, layers + padded(2 * d.T * d.h) + padded(4 * d.T * d.h));
    xhat_f_ = b(eager_saved_.as<char>(), layers);
    x32_f_ = reinterpret_cast<float*>(eager_saved_.as<char>() + layers + padded(2 * d.T * d.h));
    if (pool_ != nullptr) {  // the transient part comes with each module's scratch block
      eager_scratch_ = DeviceBuffer(dev, eager_tables_bytes(c));
      eager_math_ = EagerDecoder(dev, c, nullptr, eager_scratch_.as<void>());
    } else {
      eager_scratch_ = DeviceBuffer(dev, eager_scratch_bytes(c));
      eager_math_ = EagerDecoder(dev, c, eager_scratch_.as<void>());
    }
  }
}

// Layer i's eager tensors: x32_1 and x32_2 [T,h] fp32, xhat1 and xhat2 [T,h], sg [T,F], at
// i * the per-layer bytes (eager_saved_bytes_per_layer).
DecoderMath::EagerSaved DecoderMath::eager_saved(std::int64_t layer) const {
  const std::uint64_t th = static_cast<std::uint64_t>(T_ * h_);
  const std::uint64_t f32 = padded(4 * th), b16 = padded(2 * th);
  const auto at = [&](std::uint64_t o) {
    return pool_ != nullptr
               ? layer_at(layer, saved_stride_ + o)
               : eager_saved_.as<char>() + static_cast<std::uint64_t>(layer) * eager_stride_ + o;
  };
  return {reinterpret_cast<float*>(at(0)), reinterpret_cast<float*>(at(f32)),
          reinterpret_cast<bf16*>(at(2 * f32)), reinterpret_cast<bf16*>(at(2 * f32 + b16)),
          reinterpret_cast<bf16*>(at(2 * f32 + 2 * b16))};
}

void DecoderMath::norm_forward(const bf16* x, const bf16* w, bf16* y, float* rstd,
                               const EagerDecoder::NormSaved& eager) const {
  if (eager_) {
    eager_math_.rmsnorm_forward(x, w, y, {eager.x32, rstd, eager.xhat}, T_, h_, eps_);
  } else {
    dev_->rmsnorm_forward(x, w, y, rstd, T_, h_, eps_);
  }
}

void DecoderMath::norm_backward(const bf16* dy, const bf16* x, const bf16* w, const float* rstd,
                                const EagerDecoder::NormSaved& eager, bf16* dx, bf16* dw) const {
  if (eager_) {
    eager_math_.rmsnorm_backward(dy, w, eager, dx, dw, T_, h_);
  } else {
    dev_->rmsnorm_backward(dy, x, w, rstd, dx, dw, T_, h_);
  }
}

// Token-major q, k, v -> the head-major Q, K, V attention reads (rotary on Q and K; K and V
// repeated to every query head). The SDPA layout keeps K unrepeated (v is already its saved
// a.vh) and repeats both into the scratch.
void DecoderMath::heads_forward(const bf16* q, const bf16* k, const bf16* v, const Saved& a) const {
  const std::int64_t rep = H_ / K_;
  if (sdpa_) {
    eager_math_.rotary_forward(q, a.qh, H_);
    eager_math_.rotary_forward(k, a.kh, K_);
    eager_math_.repeat_kv(a.kh, a.khr, false);
    eager_math_.repeat_kv(v, a.vhr, true);
    return;
  }
  dev_->to_heads(q, a.qh, B_, S_, H_, D_, 1, theta_);
  dev_->to_heads(k, a.kh, B_, S_, K_, D_, rep, theta_);
  dev_->to_heads(v, a.vh, B_, S_, K_, D_, rep, 0.0);
}

// The adjoint of heads_forward: head-major gradients -> token-major dq, dk, dv.
void DecoderMath::heads_backward(const bf16* dqh, const bf16* dkh, const bf16* dvh, bf16* dq,
                                 bf16* dk, bf16* dv) const {
  const std::int64_t rep = H_ / K_;
  if (sdpa_) {
    eager_math_.rotary_backward(dqh, dq, H_);
    eager_math_.sum_repeats(dkh, eager_math_.kv_scratch(), false);
    eager_math_.rotary_backward(eager_math_.kv_scratch(), dk, K_);
    eager_math_.sum_repeats(dvh, dv, true);
    return;
  }
  dev_->from_heads(dqh, dq, B_, S_, H_, D_, 1, theta_);
  dev_->from_heads(dkh, dk, B_, S_, K_, D_, rep, theta_);
  dev_->from_heads(dvh, dv, B_, S_, K_, D_, rep, 0.0);
}

DecoderMath::~DecoderMath() {
  std::vector<void*> blocks = scratch_blocks_;
  for (const std::vector<void*>& layer : layer_blocks_)
    blocks.insert(blocks.end(), layer.begin(), layer.end());
  blocks.push_back(logits_block_);
  for (void* block : blocks) {
    if (block != nullptr) pool_->deallocate(block);  // the arm is over: nothing runs any more
  }
}

namespace {

// Where `offset` of a region lies when each of its fields is a block of its own: the field
// that starts last at or before it (a member of no size shares its successor's address);
// nullptr past the last field (a member the layout leaves empty there).
char* field_at(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& fields,
               const std::vector<void*>& blocks, std::uint64_t offset) {
  for (std::size_t i = fields.size(); i-- > 0;) {
    if (fields[i].first > offset) continue;
    if (offset >= fields[i].first + fields[i].second) return nullptr;
    if (blocks[i] == nullptr)
      throw std::logic_error("decoder: a module's activations read outside their blocks' life");
    return static_cast<char*>(blocks[i]) + (offset - fields[i].first);
  }
  return nullptr;
}

void take_fields(CachingPoolDevice& pool,
                 const std::vector<std::pair<std::uint64_t, std::uint64_t>>& fields,
                 std::vector<void*>& blocks) {
  blocks.resize(fields.size(), nullptr);
  for (std::size_t i = 0; i < fields.size(); ++i) {
    if (blocks[i] == nullptr) blocks[i] = pool.allocate(static_cast<std::size_t>(fields[i].second));
  }
}

// Given back once the module's math is enqueued: reusable when the compute queue (and every
// other, caching_pool.hpp) has passed them.
void give_fields(CachingPoolDevice& pool, std::vector<void*>& blocks) {
  for (void*& b : blocks) {
    if (b != nullptr) pool.deallocate_after(b, Queue::compute);
    b = nullptr;
  }
}

}  // namespace

char* DecoderMath::layer_at(std::int64_t layer, std::uint64_t offset) const {
  if (pool_ == nullptr)
    return saved_.as<char>() + static_cast<std::uint64_t>(layer) * saved_stride_ + offset;
  return field_at(layer_fields_, layer_blocks_[static_cast<std::size_t>(layer)], offset);
}

// A layer's saved tensors, one block each as autograd saves them: taken before the layer's
// forward, given back after its backward; blocks left by a step that failed half-way are reused.
void DecoderMath::take_layer_block(std::int64_t layer) const {
  if (pool_ != nullptr)
    take_fields(*pool_, layer_fields_, layer_blocks_[static_cast<std::size_t>(layer)]);
}

void DecoderMath::give_layer_block(std::int64_t layer) const {
  if (pool_ != nullptr) give_fields(*pool_, layer_blocks_[static_cast<std::size_t>(layer)]);
}

void DecoderMath::bind_scratch(const std::function<char*(std::uint64_t)>& at) const {
  const auto p = [&](std::uint64_t offset) { return reinterpret_cast<bf16*>(at(offset)); };
  sc_ = sc_at_.map(p);
  if (eager_) eager_math_.place_transient(at(scratch_bytes_));
}

// The module's temporaries, as PyTorch allocates them, a block per tensor: from its first
// kernel to the end of its math (backward: before its gradients' hooks run). Blocks left by a
// step that failed half-way are reused.
void DecoderMath::take_scratch() const {
  if (pool_ == nullptr) return;
  take_fields(*pool_, scratch_fields_, scratch_blocks_);
  bind_scratch([&](std::uint64_t o) { return field_at(scratch_fields_, scratch_blocks_, o); });
}

void DecoderMath::give_scratch() const {
  if (pool_ != nullptr) give_fields(*pool_, scratch_blocks_);
}

void DecoderMath::give_logits() const {
  if (pool_ == nullptr || logits_block_ == nullptr) return;
  pool_->deallocate_after(logits_block_, Queue::compute);
  logits_block_ = nullptr;
}

// The head's logits (and, in its backward, their gradient): a block from the head's forward
// until its gradients are complete; the caller's buffer without the pool.
bf16* DecoderMath::logits() const {
  if (pool_ == nullptr) return logits_;
  if (logits_block_ == nullptr) logits_block_ = pool_->allocate(logits_bytes_);
  return static_cast<bf16*>(logits_block_);
}

DecoderMath::Saved DecoderMath::saved(std::int64_t layer) const {
  const auto b = [&](int i) { return reinterpret_cast<bf16*>(layer_at(layer, saved_at_[i])); };
  const auto f = [&](int i) { return reinterpret_cast<float*>(layer_at(layer, saved_at_[i])); };
  Saved a{b(0), b(1), b(2), b(3), b(4), b(5), b(6), b(7), b(8), b(9), b(10), f(11), f(12)};
  a.khr = a.kh;
  a.vhr = a.vh;
  if (sdpa_) {
    a.probs = sc_.probs;
    a.xmid = sc_.xmid;
    a.khr = sc_.krep;
    a.vhr = sc_.vrep;
  }
  return a;
}

void DecoderMath::linear(const bf16* x, const bf16* w, bf16* y, std::int64_t rows, std::int64_t in,
                         std::int64_t out) const {
  dev_->gemm({false, true, rows, out, in, x, in, w, in, y, out});
}

void DecoderMath::forward(std::int64_t j, const ModuleWeights& w, const bf16* shared) const {
  if (j == 0) {
    dev_->embedding_forward(ids_, w + 0, x(0), T_, h_);
  } else if (j == n_ + 1) {
    if (tied_ && shared == nullptr) {
      throw std::logic_error("decoder head: tied lm_head without the embedding table");
    }
    take_scratch();
    head_forward(w, tied_ ? shared : w + h_);
    give_scratch();
  } else {
    take_layer_block(j - 1);
    take_scratch();
    layer_forward(j - 1, w);
    give_scratch();
  }
}

void DecoderMath::backward(std::int64_t j, const ModuleWeights& w, const ModuleGrads& g,
                           const std::function<void()>& grads_done, const bf16* shared) const {
  if (j == n_ + 1) {
    if (tied_ && shared == nullptr) {
      throw std::logic_error("decoder head: tied lm_head without the embedding table");
    }
    take_scratch();
    head_backward(w, g, grads_done, tied_ ? shared : w + h_);
  } else if (j == 0) {
    // The lookup's gradient, plus the tied lm_head's (computed first, in the head's backward).
    dev_->fill_zero(Queue::compute, g + 0, static_cast<std::size_t>(V_ * h_) * 2);
    dev_->embedding_backward(index_, dy_, g + 0, h_);
    if (tied_) dev_->residual_add(g + 0, tied_grad_.as<bf16>(), V_ * h_);
    if (grads_done) grads_done();
  } else {
    take_scratch();
    layer_backward(j - 1, w, g, grads_done);
    give_layer_block(j - 1);
  }
}

void DecoderMath::head_forward(const ModuleWeights& w, const bf16* table) const {
  norm_forward(x(n_), w + 0, xf_, rstd_f_, {x32_f_, rstd_f_, xhat_f_});
  bf16* out = logits();
  linear(xf_, table, out, T_, h_, V_);
  dev_->sum(out, T_ * V_, loss_);
}

void DecoderMath::head_backward(const ModuleWeights& w, const ModuleGrads& g,
                                const std::function<void()>& grads_done, const bf16* table) const {
  bf16* dlogits = logits();            // dead once the loss is summed
  dev_->fill(dlogits, 1.0f, T_ * V_);  // d(sum)/d(logit) = 1
  bf16* g_lm = tied_ ? tied_grad_.as<bf16>() : g + h_;
  dev_->gemm({true, false, V_, h_, T_, dlogits, V_, xf_, h_, g_lm, h_});
  dev_->gemm({false, false, T_, h_, V_, dlogits, V_, table, h_, sc_.dtmp, h_});
  norm_backward(sc_.dtmp, x(n_), w + 0, rstd_f_, {x32_f_, rstd_f_, xhat_f_}, dy_, g + 0);
  give_scratch();
  give_logits();
  if (grads_done) grads_done();
}

void DecoderMath::layer_forward(std::int64_t layer, const ModuleWeights& w) const {
  Device& dev = *dev_;
  const Saved a = saved(layer);
  const EagerSaved e = eager_ ? eager_saved(layer) : EagerSaved{};
  const std::int64_t BH = B_ * H_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D_));
  norm_forward(x(layer), w + off_.ln1, a.xn1, a.rstd1, {e.x32_1, a.rstd1, e.xhat1});
  bf16 *q = sc_.t[0], *k = sc_.tk, *v = sdpa_ ? a.vh : sc_.tv;  // SDPA saves v_proj's output
  linear(a.xn1, w + off_.q_w, q, T_, h_, q_);
  linear(a.xn1, w + off_.k_w, k, T_, h_, kv_);
  linear(a.xn1, w + off_.v_w, v, T_, h_, kv_);
  if (bias_) {
    dev.bias_add(q, w + off_.q_b, T_, q_);
    dev.bias_add(k, w + off_.k_b, T_, kv_);
    dev.bias_add(v, w + off_.v_b, T_, kv_);
  }
  heads_forward(q, k, v, a);
  // scores = Q K^T per (batch, head), then the causal softmax in place.
  dev.gemm_strided_batched({false, true, S_, S_, D_, a.qh, D_, a.khr, D_, a.probs, S_}, BH, S_ * D_,
                           S_ * D_, S_ * S_);
  dev.causal_softmax_forward(a.probs, a.probs, BH, S_, scale);
  bf16* heads_out = sc_.t[0];  // q is dead once in head-major form
  dev.gemm_strided_batched({false, false, S_, D_, S_, a.probs, S_, a.vhr, D_, heads_out, D_}, BH,
                           S_ * S_, S_ * D_, S_ * D_);
  dev.from_heads(heads_out, a.attn, B_, S_, H_, D_, 1, 0.0);
  linear(a.attn, w + off_.o_w, a.xmid, T_, q_, h_);
  dev.residual_add(a.xmid, x(layer), T_ * h_);  // bf16(a + b) is symmetric: x + o_proj
  norm_forward(a.xmid, w + off_.ln2, a.xn2, a.rstd2, {e.x32_2, a.rstd2, e.xhat2});
  linear(a.xn2, w + off_.gate, a.gate, T_, h_, F_);
  if (eager_) eager_math_.silu_forward(a.gate, e.sg, T_ * F_);  // before up_proj, as eager
  linear(a.xn2, w + off_.up, a.up, T_, h_, F_);
  if (eager_) {
    eager_math_.gated_mul_forward(e.sg, a.up, a.act, T_ * F_);
  } else {
    dev.silu_mul_forward(a.gate, a.up, a.act, T_ * F_);
  }
  linear(a.act, w + off_.down, x(layer + 1), T_, F_, h_);
  dev.residual_add(x(layer + 1), a.xmid, T_ * h_);
}

void DecoderMath::layer_backward(std::int64_t layer, const ModuleWeights& w, const ModuleGrads& g,
                                 const std::function<void()>& grads_done) const {
  Device& dev = *dev_;
  const Saved a = saved(layer);
  const EagerSaved e = eager_ ? eager_saved(layer) : EagerSaved{};
  // MLP: dy is d x_{i+1}, also d down's output.
  dev.gemm({false, false, T_, F_, h_, dy_, h_, w + off_.down, F_, sc_.dact, F_});
  dev.gemm({true, false, h_, F_, T_, dy_, h_, a.act, F_, g + off_.down, F_});
  if (eager_) {
    eager_math_.silu_mul_backward(sc_.dact, a.gate, a.up, e.sg, sc_.dgate, sc_.dup, T_ * F_);
  } else {
    dev.silu_mul_backward(sc_.dact, a.gate, a.up, sc_.dgate, sc_.dup, T_ * F_);
  }
  dev.gemm({true, false, F_, h_, T_, sc_.dgate, F_, a.xn2, h_, g + off_.gate, h_});
  dev.gemm({true, false, F_, h_, T_, sc_.dup, F_, a.xn2, h_, g + off_.up, h_});
  dev.gemm({false, false, T_, h_, F_, sc_.dgate, F_, w + off_.gate, h_, sc_.dtmp, h_});
  dev.gemm({false, false, T_, h_, F_, sc_.dup, F_, w + off_.up, h_, sc_.dtmp2, h_});
  dev.residual_add(sc_.dtmp, sc_.dtmp2, T_ * h_);
  norm_backward(sc_.dtmp, a.xmid, w + off_.ln2, a.rstd2, {e.x32_2, a.rstd2, e.xhat2}, sc_.dtmp2,
                g + off_.ln2);
  dev.residual_add(dy_, sc_.dtmp2, T_ * h_);  // dy is now d x_mid
  attention_backward(a, w, g);
  norm_backward(sc_.dtmp, x(layer), w + off_.ln1, a.rstd1, {e.x32_1, a.rstd1, e.xhat1}, sc_.dtmp2,
                g + off_.ln1);
  dev.residual_add(dy_, sc_.dtmp2, T_ * h_);  // dy is now d x_i
  give_scratch();  // before the hooks, whose flush allocates: the temporaries are dead
  if (grads_done) grads_done();
}

// From dy = d x_mid to d xn1 in sc_.dtmp, with the gradients of q/k/v/o (and their biases).
void DecoderMath::attention_backward(const Saved& a, const ModuleWeights& w,
                                     const ModuleGrads& g) const {
  Device& dev = *dev_;
  const std::int64_t BH = B_ * H_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D_));
  bf16 *d_attn = sc_.t[0], *d_heads_out = sc_.t[1], *dvh = sc_.t[2], *dkh = sc_.t[3];
  dev.gemm({false, false, T_, q_, h_, dy_, h_, w + off_.o_w, q_, d_attn, q_});
  dev.gemm({true, false, h_, q_, T_, dy_, h_, a.attn, q_, g + off_.o_w, q_});
  dev.to_heads(d_attn, d_heads_out, B_, S_, H_, D_, 1, 0.0);
  if (sdpa_) recompute_attention(a);
  // dP = dO V^T, dV = P^T dO, then the softmax's backward in place.
  dev.gemm_strided_batched({false, true, S_, S_, D_, d_heads_out, D_, a.vhr, D_, sc_.dprobs, S_},
                           BH, S_ * D_, S_ * D_, S_ * S_);
  dev.gemm_strided_batched({true, false, S_, D_, S_, a.probs, S_, d_heads_out, D_, dvh, D_}, BH,
                           S_ * S_, S_ * D_, S_ * D_);
  dev.causal_softmax_backward(a.probs, sc_.dprobs, sc_.dprobs, BH, S_, scale);
  bf16* dqh = sc_.t[0];  // d_attn is dead
  dev.gemm_strided_batched({false, false, S_, D_, S_, sc_.dprobs, S_, a.khr, D_, dqh, D_}, BH,
                           S_ * S_, S_ * D_, S_ * D_);
  dev.gemm_strided_batched({true, false, S_, D_, S_, sc_.dprobs, S_, a.qh, D_, dkh, D_}, BH,
                           S_ * S_, S_ * D_, S_ * D_);
  bf16 *dq = sc_.t[1], *dk = sc_.tk, *dv = sc_.tv;
  heads_backward(dqh, dkh, dvh, dq, dk, dv);
  dev.gemm({true, false, q_, h_, T_, dq, q_, a.xn1, h_, g + off_.q_w, h_});
  dev.gemm({true, false, kv_, h_, T_, dk, kv_, a.xn1, h_, g + off_.k_w, h_});
  dev.gemm({true, false, kv_, h_, T_, dv, kv_, a.xn1, h_, g + off_.v_w, h_});
  if (bias_) {
    dev.column_sum(dq, g + off_.q_b, T_, q_);
    dev.column_sum(dk, g + off_.k_b, T_, kv_);
    dev.column_sum(dv, g + off_.v_b, T_, kv_);
  }
  dev.gemm({false, false, T_, h_, q_, dq, q_, w + off_.q_w, h_, sc_.dtmp, h_});
  dev.gemm({false, false, T_, h_, kv_, dk, kv_, w + off_.k_w, h_, sc_.dtmp2, h_});
  dev.residual_add(sc_.dtmp, sc_.dtmp2, T_ * h_);
  dev.gemm({false, false, T_, h_, kv_, dv, kv_, w + off_.v_w, h_, sc_.dtmp2, h_});
  dev.residual_add(sc_.dtmp, sc_.dtmp2, T_ * h_);
}

// The same K, V and probabilities as the layer's forward made (the same kernels on the same
// inputs), where SDPA's backward recomputes its own from Q, K and the log-sum-exp.
void DecoderMath::recompute_attention(const Saved& a) const {
  const std::int64_t BH = B_ * H_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D_));
  eager_math_.repeat_kv(a.kh, a.khr, false);
  eager_math_.repeat_kv(a.vh, a.vhr, true);
  dev_->gemm_strided_batched({false, true, S_, S_, D_, a.qh, D_, a.khr, D_, a.probs, S_}, BH,
                             S_ * D_, S_ * D_, S_ * S_);
  dev_->causal_softmax_forward(a.probs, a.probs, BH, S_, scale);
}

}  // namespace zob::step_detail
