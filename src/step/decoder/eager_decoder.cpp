// The decoder's modules as eager PyTorch launches them (eager_decoder.hpp). Each Device call
// below is one kernel of the eager trace (eager-kernels.md's per-op tables), in its order,
// with its shapes and dtypes; the comments name the aten op or autograd node it stands for.
#include "step/decoder/eager_decoder.hpp"

#include <cmath>
#include <initializer_list>
#include <vector>

#include "zob/step.hpp"

namespace zob::step_detail {
namespace {

using Op = ElementwiseOp;

std::uint64_t padded(std::uint64_t bytes) { return (bytes + 255) / 256 * 256; }

// A view of `sizes` with `strides` (elements), right-aligned into the six dimensions.
TensorView view(const void* p, DType t, std::initializer_list<std::int64_t> sizes,
                std::initializer_list<std::int64_t> strides) {
  TensorView v;
  v.data = p;
  v.dtype = t;
  int d = kViewDims - static_cast<int>(sizes.size());
  auto st = strides.begin();
  for (std::int64_t s : sizes) {
    v.size[d] = s;
    v.stride[d] = *st++;
    ++d;
  }
  return v;
}

// Row-major contiguous [sizes].
TensorView dense(const void* p, DType t, std::initializer_list<std::int64_t> sizes) {
  std::vector<std::int64_t> strides(sizes.size());
  std::int64_t step = 1;
  for (std::size_t i = sizes.size(); i-- > 0;) {
    strides[i] = step;
    step *= *(sizes.begin() + i);
  }
  TensorView v;
  v.data = p;
  v.dtype = t;
  int d = kViewDims - static_cast<int>(sizes.size());
  std::size_t i = 0;
  for (std::int64_t s : sizes) {
    v.size[d] = s;
    v.stride[d++] = strides[i++];
  }
  return v;
}

struct Shape {
  std::int64_t T, h, q, kv, F, S, D;
};

Shape shape_of(const RunConfig& c) {
  const DecoderArch& a = c.model.arch;
  return {c.tokens(), c.model.hidden, a.heads * a.head_dim, a.kv_heads * a.head_dim, a.intermediate,
          c.seq,      a.head_dim};
}

}  // namespace

std::uint64_t eager_transient_bytes(const RunConfig& c) {
  const Shape s = shape_of(c);
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  return 4 * padded(4 * u(s.T * s.h)) + 2 * padded(2 * u(s.T * s.h)) + 4 * padded(4 * u(s.T)) +
         4 * padded(2 * u(s.T * s.q)) + padded(2 * u(s.T * s.kv));
}

std::uint64_t eager_tables_bytes(const RunConfig& c) {
  const Shape s = shape_of(c);
  return padded(4 * static_cast<std::uint64_t>(s.S * s.D));
}

std::uint64_t eager_scratch_bytes(const RunConfig& c) {
  return eager_transient_bytes(c) + eager_tables_bytes(c);
}

std::uint64_t eager_saved_bytes_per_layer(const RunConfig& c) {
  const Shape s = shape_of(c);
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  return 2 * padded(4 * u(s.T * s.h)) + 2 * padded(2 * u(s.T * s.h)) + padded(2 * u(s.T * s.F));
}

EagerDecoder::EagerDecoder(Device& dev, const RunConfig& c, void* scratch)
    : EagerDecoder(dev, c, scratch, static_cast<char*>(scratch) + eager_transient_bytes(c)) {}

EagerDecoder::EagerDecoder(Device& dev, const RunConfig& c, void* transient, void* tables_at)
    : dev_(&dev) {
  const Shape s = shape_of(c);
  B_ = c.batch;
  S_ = c.seq;
  H_ = c.model.arch.heads;
  K_ = c.model.arch.kv_heads;
  D_ = s.D;
  T_ = s.T;
  h_ = s.h;
  q_ = s.q;
  kv_ = s.kv;
  if (transient != nullptr) place_transient(transient);
  auto* tables = static_cast<bf16*>(tables_at);
  // LlamaRotaryEmbedding: inv_freq = 1 / theta^(2d/D) and the angle s * inv_freq in fp32,
  // cat(freqs, freqs), cos and sin, to(bf16).
  const std::int64_t half = D_ / 2;
  std::vector<bf16> table(static_cast<std::size_t>(2 * S_ * D_));
  for (std::int64_t d = 0; d < half; ++d) {
    const auto inv_freq =
        static_cast<float>(1.0 / std::pow(c.model.arch.rope_theta,
                                          static_cast<double>(2 * d) / static_cast<double>(D_)));
    for (std::int64_t p = 0; p < S_; ++p) {
      const float angle = static_cast<float>(p) * inv_freq;
      const bf16 cv = f32_to_bf16(std::cos(angle)), sv = f32_to_bf16(std::sin(angle));
      for (const std::int64_t col : {d, d + half}) {
        table[static_cast<std::size_t>(p * D_ + col)] = cv;
        table[static_cast<std::size_t>((S_ + p) * D_ + col)] = sv;
      }
    }
  }
  dev.copy_to_device(Queue::h2d, tables, table.data(), 2 * table.size());
  dev.synchronize();  // the host table dies here
  cos_ = tables;
  sin_ = cos_ + S_ * D_;
}

void EagerDecoder::place_transient(void* transient) {
  char* at = static_cast<char*>(transient);
  const auto take = [&](std::uint64_t bytes) {
    char* here = at;
    at += padded(bytes);
    return here;
  };
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  for (float*& p : f32_) p = reinterpret_cast<float*>(take(4 * u(T_ * h_)));
  for (bf16*& p : bf_) p = reinterpret_cast<bf16*>(take(2 * u(T_ * h_)));
  for (float*& p : rows_) p = reinterpret_cast<float*>(take(4 * u(T_)));
  for (bf16*& p : rot_) p = reinterpret_cast<bf16*>(take(2 * u(T_ * q_)));
  kv_small_ = reinterpret_cast<bf16*>(take(2 * u(T_ * kv_)));
}

void EagerDecoder::rmsnorm_forward(const bf16* x, const bf16* w, bf16* y, const NormSaved& saved,
                                   std::int64_t rows, std::int64_t cols, float eps) const {
  Device& dev = *dev_;
  float* rstd = saved.rstd;
  bf16* xhat = saved.xhat;
  const TensorView x32 = dense(saved.x32, DType::f32, {rows, cols});
  const TensorView tmp32 = dense(f32_[1], DType::f32, {rows, cols});
  const TensorView var = dense(rows_[0], DType::f32, {rows, 1});
  const TensorView r = dense(rstd, DType::f32, {rows, 1});
  const TensorView none;
  dev.elementwise(Op::copy, x32, dense(x, DType::bf16, {rows, cols}), none, 0);  // to(fp32)
  dev.elementwise(Op::square, tmp32, x32, none, 0);                              // pow(2)
  dev.reduce_last(var, tmp32, 1.0f / static_cast<float>(cols));                  // mean(-1)
  dev.elementwise(Op::add_scalar, r, var, none, eps);                            // + eps
  dev.elementwise(Op::rsqrt, r, r, none, 0);                                     // rsqrt
  dev.elementwise(Op::mul, tmp32, x32, view(rstd, DType::f32, {rows, cols}, {1, 0}), 0);
  const TensorView xh = dense(xhat, DType::bf16, {rows, cols});
  dev.elementwise(Op::copy, xh, tmp32, none, 0);  // to(bf16)
  dev.elementwise(Op::mul, dense(y, DType::bf16, {rows, cols}),
                  view(w, DType::bf16, {rows, cols}, {0, 1}), xh, 0);  // weight *
}

void EagerDecoder::rmsnorm_backward(const bf16* dy, const bf16* w, const NormSaved& saved, bf16* dx,
                                    bf16* dw, std::int64_t rows, std::int64_t cols) const {
  const float* rstd = saved.rstd;
  const bf16* xhat = saved.xhat;
  Device& dev = *dev_;
  const auto f32 = [&](int i) { return dense(f32_[i], DType::f32, {rows, cols}); };
  const auto row = [&](const float* p) { return dense(p, DType::f32, {rows, 1}); };
  const auto row_bcast = [&](const float* p) { return view(p, DType::f32, {rows, cols}, {1, 0}); };
  const TensorView gy = dense(dy, DType::bf16, {rows, cols}), none;
  const TensorView x32 = dense(saved.x32, DType::f32, {rows, cols});  // pow's and mul's input
  const TensorView g_xhat = dense(bf_[0], DType::bf16, {rows, cols});
  const TensorView gw_rows = dense(bf_[1], DType::bf16, {rows, cols});
  // MulBackward0 of weight * xhat: both gradients, then the weight's sum over rows (with the
  // memset eager's reduction launches before it).
  dev.elementwise(Op::mul, g_xhat, gy, view(w, DType::bf16, {rows, cols}, {0, 1}), 0);
  dev.elementwise(Op::mul, gw_rows, gy, dense(xhat, DType::bf16, {rows, cols}), 0);
  dev.fill_zero(Queue::compute, dw, static_cast<std::size_t>(cols) * 2);
  dev.reduce_last(view(dw, DType::bf16, {cols, 1}, {1, 0}),
                  view(bf_[1], DType::bf16, {cols, rows}, {1, cols}), 1.0f);
  dev.elementwise(Op::copy, f32(0), g_xhat, none, 0);            // ToCopyBackward0
  dev.elementwise(Op::mul, f32(1), f32(0), row_bcast(rstd), 0);  // MulBackward0: d x32
  dev.elementwise(Op::mul, f32(2), f32(0), x32, 0);              //   and d rstd's rows
  dev.reduce_last(row(rows_[0]), f32(2), 1.0f);                  //   summed
  dev.elementwise(Op::cube, row(rows_[1]), row(rstd), none, 0);  // RsqrtBackward0
  dev.elementwise(Op::mul_scalar, row(rows_[2]), row(rows_[0]), none, -0.5f);
  dev.elementwise(Op::mul, row(rows_[3]), row(rows_[2]), row(rows_[1]), 0);
  dev.elementwise(Op::mul_scalar, f32(2), row_bcast(rows_[3]), none,  // MeanBackward1
                  1.0f / static_cast<float>(cols));
  dev.elementwise(Op::mul_scalar, f32(3), x32, none, 2.0f);  // PowBackward0: 2 * x
  dev.elementwise(Op::mul, f32(2), f32(2), f32(3), 0);       //   times the gradient
  dev.elementwise(Op::add, f32(1), f32(1), f32(2), 0);       //   + the mul's: x's gradient
  dev.elementwise(Op::copy, dense(dx, DType::bf16, {rows, cols}), f32(1), none, 0);  // to(bf16)'s
}

void EagerDecoder::silu_forward(const bf16* gate, bf16* sg, std::int64_t n) const {
  dev_->elementwise(Op::silu, dense(sg, DType::bf16, {n}), dense(gate, DType::bf16, {n}),
                    TensorView{}, 0);
}

void EagerDecoder::gated_mul_forward(const bf16* sg, const bf16* up, bf16* act,
                                     std::int64_t n) const {
  dev_->elementwise(Op::mul, dense(act, DType::bf16, {n}), dense(sg, DType::bf16, {n}),
                    dense(up, DType::bf16, {n}), 0);
}

void EagerDecoder::silu_mul_backward(const bf16* dact, const bf16* gate, const bf16* up,
                                     const bf16* sg, bf16* dgate, bf16* dup, std::int64_t n) const {
  const TensorView d = dense(dact, DType::bf16, {n}), dg = dense(dgate, DType::bf16, {n});
  dev_->elementwise(Op::mul, dg, d, dense(up, DType::bf16, {n}), 0);  // d silu(gate)
  dev_->elementwise(Op::mul, dense(dup, DType::bf16, {n}), d, dense(sg, DType::bf16, {n}), 0);
  dev_->elementwise(Op::silu_backward, dg, dg, dense(gate, DType::bf16, {n}), 0);
}

void EagerDecoder::rotary_forward(const bf16* x, bf16* out, std::int64_t heads) const {
  Device& dev = *dev_;
  const std::int64_t B = B_, S = S_, D = D_, half = D_ / 2, tok = heads * D_;
  const auto head_major = [&](const bf16* p, std::int64_t last) {
    return dense(p, DType::bf16, {B, heads, S, last});
  };
  // x [B, S, heads, D] as transpose(1, 2): [B, heads, S, D]; its halves by slicing.
  const auto xv = [&](std::int64_t from, std::int64_t last) {
    return view(x + from, DType::bf16, {B, heads, S, last}, {S * tok, D, tok, 1});
  };
  const auto table = [&](const bf16* p) {
    return view(p, DType::bf16, {B, heads, S, D}, {0, 0, D, 1});
  };
  const TensorView none;
  dev.elementwise(Op::mul, head_major(rot_[0], D), xv(0, D), table(cos_), 0);    // x * cos
  dev.elementwise(Op::neg, head_major(rot_[1], half), xv(half, half), none, 0);  // -x2
  dev.elementwise(Op::cat_last, head_major(rot_[2], D), head_major(rot_[1], half), xv(0, half),
                  0);  // cat
  dev.elementwise(Op::mul, head_major(rot_[1], D), head_major(rot_[2], D), table(sin_), 0);
  dev.elementwise(Op::add, head_major(out, D), head_major(rot_[0], D), head_major(rot_[1], D), 0);
}

void EagerDecoder::rotary_backward(const bf16* g, bf16* out, std::int64_t heads) const {
  Device& dev = *dev_;
  const std::int64_t B = B_, S = S_, D = D_, half = D_ / 2, tok = heads * D_;
  const std::int64_t n = B * heads * S * D;
  const auto hm = [&](const bf16* p, std::int64_t last) {
    return dense(p, DType::bf16, {B, heads, S, last});
  };
  // A half of a head-major [B, heads, S, D] tensor.
  const auto half_of = [&](const bf16* p, std::int64_t from) {
    return view(p + from, DType::bf16, {B, heads, S, half}, {heads * S * D, S * D, D, 1});
  };
  const auto table = [&](const bf16* p) {
    return view(p, DType::bf16, {B, heads, S, D}, {0, 0, D, 1});
  };
  const TensorView none, gv = hm(g, D);
  dev.elementwise(Op::mul, hm(rot_[0], D), gv, table(cos_), 0);  // MulBackward0 (x * cos)
  dev.elementwise(Op::mul, hm(rot_[1], D), gv, table(sin_), 0);  // MulBackward0 (rh * sin)
  dev.elementwise(Op::neg, hm(rot_[2], half), half_of(rot_[1], 0), none, 0);  // NegBackward0
  dev.fill(rot_[3], 0.0f, n);  // SliceBackward0 of x2 = x[..., half:]
  dev.elementwise(Op::copy, half_of(rot_[3], half), hm(rot_[2], half), none, 0);
  dev.fill(rot_[2], 0.0f, n);  // SliceBackward0 of x1 = x[..., :half]
  dev.elementwise(Op::copy, half_of(rot_[2], 0), half_of(rot_[1], half), none, 0);
  dev.elementwise(Op::add, hm(rot_[2], D), hm(rot_[2], D), hm(rot_[3], D), 0);  // x's slices
  dev.elementwise(Op::add, hm(rot_[0], D), hm(rot_[0], D), hm(rot_[2], D), 0);  // + x * cos's
  // ViewBackward0: transpose(1, 2)'s gradient made contiguous, token-major.
  dev.elementwise(Op::copy, view(out, DType::bf16, {B, heads, S, D}, {S * tok, D, tok, 1}),
                  hm(rot_[0], D), none, 0);
}

void EagerDecoder::repeat_kv(const bf16* kv, bf16* out, bool token_major) const {
  const std::int64_t B = B_, K = K_, rep = H_ / K_, S = S_, D = D_;
  const TensorView src =
      token_major ? view(kv, DType::bf16, {B, K, rep, S, D}, {S * K * D, D, 0, K * D, 1})
                  : view(kv, DType::bf16, {B, K, rep, S, D}, {K * S * D, S * D, 0, D, 1});
  dev_->elementwise(Op::copy, dense(out, DType::bf16, {B, K, rep, S, D}), src, TensorView{}, 0);
}

void EagerDecoder::sum_repeats(const bf16* g, bf16* out, bool token_major) const {
  const std::int64_t B = B_, K = K_, rep = H_ / K_, S = S_, D = D_;
  const TensorView dst = token_major
                             ? view(out, DType::bf16, {B, K, S, D, 1}, {S * K * D, D, K * D, 1, 0})
                             : view(out, DType::bf16, {B, K, S, D, 1}, {K * S * D, S * D, D, 1, 0});
  dev_->reduce_last(
      dst, view(g, DType::bf16, {B, K, S, D, rep}, {K * rep * S * D, rep * S * D, D, 1, S * D}),
      1.0f);
}

}  // namespace zob::step_detail
