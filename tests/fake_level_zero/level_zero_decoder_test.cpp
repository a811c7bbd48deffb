// The decoder-transformer operations (--model) of the xpu backend through the real loader and
// the fake driver, against the CPU reference (cpu_decoder_kernels.hpp) on fresh random data.
// With FAKE_ZE_KERNELS=pocl (the default) the plugin's SPIR-V runs on PoCL; with =cpu the
// fake's launch checks run the reference (level_zero.fake_driver.decoder_cpu). Tolerances:
//   to_heads / from_heads, rmsnorm's dweight: bit-exact (the same fp32 operations in the same
//     order; the rotary cos / sin are the host's own doubles, cast once);
//   rmsnorm y / dx, softmax: 1 bf16 ulp (the row sum is a tree here, sequential there), or the
//     effect of that other order where the output cancels; silu_mul: 1 bf16 ulp (OpenCL's exp);
//   gemm_strided_batched: gemm's (one bf16 ulp plus 1e-3);
//   elementwise / reduce_last (the eager decomposition's generic kernels, cpu_tensor_ops.hpp):
//     bit-exact, except the ops with exp or sqrt (silu, silu_backward, rsqrt): 1 bf16 ulp.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "backends/cpu/cpu_decoder_kernels.hpp"
#include "backends/cpu/cpu_tensor_ops.hpp"
#include "test_support.hpp"

namespace zob {
namespace {

using test::Buffer;
using test::count_far;
using test::kBf16Ulp;

std::size_t sz(std::int64_t n) { return static_cast<std::size_t>(n); }
float f(bf16 v) { return bf16_to_f32(v); }

// Elements farther than one bf16 ulp (relative) and than floor(i) from the reference.
std::size_t count_far_floor(const std::vector<bf16>& got, const std::vector<bf16>& want,
                            const std::function<double(std::size_t)>& floor) {
  if (got.size() != want.size()) return got.size() + want.size();
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = f(got[i]), w = f(want[i]), diff = std::fabs(g - w);
    if (!(diff <= kBf16Ulp * std::fabs(w)) && !(diff <= floor(i))) ++bad;
  }
  return bad;
}

class LevelZeroDecoder : public ::testing::Test {
 protected:
  LevelZeroDevice dev{0};
  std::mt19937 rng{std::random_device{}()};
};

TEST_F(LevelZeroDecoder, GemmStridedBatchedAttentionShapes) {
  struct Case {
    bool ta, tb;
    std::int64_t m, n, k, count;
    bool shared_a;
  };
  // S = Q K^T, O = P V, dV = P^T dO, a TT case, and a shared (stride 0) A; seq 77 > one block.
  for (const Case c :
       {Case{false, true, 77, 77, 40, 5, false}, Case{false, false, 77, 40, 77, 3, false},
        Case{true, false, 77, 40, 77, 3, false}, Case{true, true, 33, 19, 65, 2, false},
        Case{false, true, 50, 70, 24, 3, true}}) {
    const std::int64_t a_rows = c.ta ? c.k : c.m, a_cols = c.ta ? c.m : c.k;
    const std::int64_t b_rows = c.tb ? c.n : c.k, b_cols = c.tb ? c.k : c.n;
    const std::int64_t sa = c.shared_a ? 0 : a_rows * a_cols + 16, sb = b_rows * b_cols + 24,
                       sc = c.m * c.n + 8;  // gaps between the entries must survive
    auto a = test::random_bf16(sz(c.shared_a ? a_rows * a_cols : sa * c.count), rng);
    auto b = test::random_bf16(sz(sb * c.count), rng);
    auto out = test::random_bf16(sz(sc * c.count), rng);
    Buffer<bf16> da(dev, a), db(dev, b), dc(dev, out);
    GemmArgs g{c.ta, c.tb, c.m, c.n, c.k, da.get(), a_cols, db.get(), b_cols, dc.get(), c.n};
    dev.gemm_strided_batched(g, c.count, sa, sb, sc);
    g.a = a.data();
    g.b = b.data();
    g.c = out.data();
    cpu::gemm_strided_batched(g, c.count, sa, sb, sc, nullptr);
    EXPECT_EQ(count_far(dc.read(), out, kBf16Ulp, 1e-3f), 0u)
        << "ta " << c.ta << " tb " << c.tb << " m " << c.m << " n " << c.n << " k " << c.k;
  }
}

TEST_F(LevelZeroDecoder, RmsNormForwardAndBackward) {
  for (const std::int64_t cols : {std::int64_t{1000}, std::int64_t{77}, std::int64_t{300}}) {
    const std::int64_t rows = 19;
    const float eps = 1e-5f;
    auto x = test::random_bf16(sz(rows * cols), rng),
         w = test::random_bf16(sz(cols), rng, 0.5f, 1.5f);
    auto dy = test::random_bf16(sz(rows * cols), rng);
    std::vector<bf16> y(x.size()), dx(x.size()), dw(w.size());
    std::vector<float> rstd(sz(rows));
    cpu::rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), rows, cols, eps, nullptr);
    cpu::rmsnorm_backward(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), rows,
                          cols, nullptr);
    Buffer<bf16> dxx(dev, x), dww(dev, w), dyy(dev, sz(rows * cols)), ddy(dev, dy),
        ddx(dev, sz(rows * cols)), ddw(dev, sz(cols));
    Buffer<float> drstd(dev, sz(rows));
    dev.rmsnorm_forward(dxx.get(), dww.get(), dyy.get(), drstd.get(), rows, cols, eps);
    const auto got_rstd = drstd.read();
    // Both sums of cols positive terms are within cols * 2^-24 (relative) of the exact one.
    for (std::int64_t r = 0; r < rows; ++r)
      EXPECT_NEAR(got_rstd[sz(r)], rstd[sz(r)], rstd[sz(r)] * std::ldexp(cols + 16.0, -24))
          << "rstd row " << r;
    EXPECT_EQ(count_far(dyy.read(), y, kBf16Ulp, 0.f), 0u) << "rmsnorm y, cols " << cols;

    Buffer<float> cpu_rstd(dev, rstd);  // backward from the reference's rstd
    dev.rmsnorm_backward(ddy.get(), dxx.get(), dww.get(), cpu_rstd.get(), ddx.get(), ddw.get(),
                         rows, cols);
    std::vector<double> row_mag(sz(rows), 0.0);
    for (std::size_t i = 0; i < x.size(); ++i)
      row_mag[i / sz(cols)] +=
          std::fabs(f(dy[i]) * f(w[i % sz(cols)]) * f(x[i]) * rstd[i / sz(cols)]);
    EXPECT_EQ(count_far_floor(ddx.read(), dx,
                              [&](std::size_t i) {
                                const double rs = rstd[i / sz(cols)];
                                // dot / cols, summed in two orders: each within 2^-24 sum|g xhat|
                                // of exact.
                                return rs * std::fabs(f(x[i]) * rs) * row_mag[i / sz(cols)] *
                                       0x1p-23;
                              }),
              0u)
        << "rmsnorm dx, cols " << cols;
    EXPECT_TRUE(test::same_bits(ddw.read(), dw))
        << "rmsnorm dweight (rows in order), cols " << cols;
  }
}

TEST_F(LevelZeroDecoder, HeadsPermuteRopeAndGqaRepeat) {
  struct Case {
    std::int64_t batch, seq, heads, head_dim, repeat;
    double theta;
  };
  for (const Case c : {Case{2, 37, 3, 64, 1, 10000.0}, Case{2, 37, 3, 64, 4, 10000.0},
                       Case{1, 300, 2, 40, 3, 1000000.0}, Case{3, 19, 5, 6, 2, 10000.0},
                       Case{2, 37, 3, 64, 1, 0.0}, Case{2, 29, 4, 24, 3, 0.0}}) {
    const std::int64_t elems = c.batch * c.seq * c.heads * c.head_dim;
    auto x = test::random_bf16(sz(elems), rng), g = test::random_bf16(sz(elems * c.repeat), rng);
    std::vector<bf16> out(sz(elems * c.repeat)), back(sz(elems));
    cpu::to_heads(x.data(), out.data(), c.batch, c.seq, c.heads, c.head_dim, c.repeat, c.theta,
                  nullptr);
    cpu::from_heads(g.data(), back.data(), c.batch, c.seq, c.heads, c.head_dim, c.repeat, c.theta,
                    nullptr);
    Buffer<bf16> dx(dev, x), dout(dev, out.size()), dg(dev, g), dback(dev, back.size());
    dev.to_heads(dx.get(), dout.get(), c.batch, c.seq, c.heads, c.head_dim, c.repeat, c.theta);
    dev.from_heads(dg.get(), dback.get(), c.batch, c.seq, c.heads, c.head_dim, c.repeat, c.theta);
    EXPECT_TRUE(test::same_bits(dout.read(), out))
        << "to_heads repeat " << c.repeat << " theta " << c.theta;
    EXPECT_TRUE(test::same_bits(dback.read(), back))
        << "from_heads repeat " << c.repeat << " theta " << c.theta;
  }
}

TEST_F(LevelZeroDecoder, CausalSoftmaxForwardBackwardInPlace) {
  for (const std::int64_t seq : {std::int64_t{1}, std::int64_t{77}, std::int64_t{300}}) {
    const std::int64_t n = 3;
    const float scale = 1.0f / std::sqrt(40.0f);
    auto s = test::random_bf16(sz(n * seq * seq), rng, -8.f, 8.f),
         dp = test::random_bf16(s.size(), rng);
    std::vector<bf16> p(s.size()), ds(s.size());
    cpu::causal_softmax_forward(s.data(), p.data(), n, seq, scale, nullptr);
    cpu::causal_softmax_backward(p.data(), dp.data(), ds.data(), n, seq, scale, nullptr);
    Buffer<bf16> dsc(dev, s), dpc(dev, p), ddp(dev, dp);
    dev.causal_softmax_forward(dsc.get(), dsc.get(), n, seq, scale);  // in place
    const auto got_p = dsc.read();
    EXPECT_EQ(count_far(got_p, p, kBf16Ulp, 0.f), 0u) << "softmax probs, seq " << seq;
    std::size_t masked_nonzero = 0;
    for (std::size_t i = 0; i < got_p.size(); ++i)
      masked_nonzero += (i % sz(seq)) > (i / sz(seq)) % sz(seq) && got_p[i].bits != 0;
    EXPECT_EQ(masked_nonzero, 0u) << "masked columns must be +0";

    dev.causal_softmax_backward(dpc.get(), ddp.get(), ddp.get(), n, seq, scale);  // in place
    std::vector<double> row_mag(sz(n * seq), 0.0);
    for (std::size_t i = 0; i < p.size(); ++i)
      row_mag[i / sz(seq)] += std::fabs(f(p[i]) * f(dp[i]));
    EXPECT_EQ(count_far_floor(ddp.read(), ds,
                              [&](std::size_t i) {
                                // dot over <= seq terms, in two orders: within seq 2^-24 sum|p dp|
                                // each.
                                return scale * f(p[i]) * row_mag[i / sz(seq)] *
                                       static_cast<double>(seq) * 0x1p-23;
                              }),
              0u)
        << "softmax dscores, seq " << seq;
  }
}

TEST_F(LevelZeroDecoder, SiluMulForwardAndBackward) {
  for (const std::int64_t n : {std::int64_t{4099}, std::int64_t{7}}) {  // vector tails
    auto gate = test::random_bf16(sz(n), rng, -6.f, 6.f), up = test::random_bf16(sz(n), rng),
         dout = test::random_bf16(sz(n), rng);
    std::vector<bf16> out(sz(n)), dgate(sz(n)), dup(sz(n));
    cpu::silu_mul_forward(gate.data(), up.data(), out.data(), n, nullptr);
    cpu::silu_mul_backward(dout.data(), gate.data(), up.data(), dgate.data(), dup.data(), n,
                           nullptr);
    Buffer<bf16> dgt(dev, gate), dupp(dev, up), ddout(dev, dout), dres(dev, sz(n)), ddg(dev, sz(n)),
        ddu(dev, sz(n));
    dev.silu_mul_forward(dgt.get(), dupp.get(), dres.get(), n);
    dev.silu_mul_backward(ddout.get(), dgt.get(), dupp.get(), ddg.get(), ddu.get(), n);
    EXPECT_EQ(count_far(dres.read(), out, kBf16Ulp, 0.f), 0u) << "silu_mul out";
    EXPECT_EQ(count_far(ddu.read(), dup, kBf16Ulp, 0.f), 0u) << "silu_mul dup";
    // 1 + x (1 - s) cancels near x = -1.28: another exp moves it by ~|x| 2^-23.
    EXPECT_EQ(count_far_floor(ddg.read(), dgate,
                              [&](std::size_t i) {
                                return std::fabs(f(dout[i]) * f(up[i])) *
                                       (1.0 + std::fabs(f(gate[i]))) * 1e-6;
                              }),
              0u)
        << "silu_mul dgate";
  }
}

// A view of `sizes` / `strides` right-aligned into the six dimensions.
TensorView tview(const void* p, DType t, std::vector<std::int64_t> sizes,
                 std::vector<std::int64_t> strides) {
  TensorView v;
  v.data = p;
  v.dtype = t;
  const std::size_t first = static_cast<std::size_t>(kViewDims) - sizes.size();
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    v.size[first + d] = sizes[d];
    v.stride[first + d] = strides[d];
  }
  return v;
}

// Every op on the shapes the eager decoder gives it: a transposed bf16 input, a row-broadcast
// fp32 operand, a column broadcast, mixed dtypes, a half-row slice, cat_last; reduce_last over
// contiguous rows (a mean) and over a strided axis (GQA's repeats), into a strided output.
TEST_F(LevelZeroDecoder, TensorOpsMatchTheCpuReference) {
  const std::int64_t B = 2, H = 3, S = 5, D = 8, n = B * H * S * D;
  const auto x = test::random_bf16(sz(n), rng), y = test::random_bf16(sz(n), rng);
  std::vector<float> rows(sz(B * H * S));
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = 0.25f + 0.01f * static_cast<float>(i);
  Buffer<bf16> dx(dev, x), dy(dev, y);
  Buffer<float> drows(dev, rows);
  // x token-major [B, S, H, D] read as [B, H, S, D]; y head-major.
  const std::vector<std::int64_t> hm{B, H, S, D}, hm_st{H * S * D, S * D, D, 1};
  const std::vector<std::int64_t> tm_st{S * H * D, D, H * D, 1};
  for (int code = 0; code <= static_cast<int>(ElementwiseOp::cat_last); ++code) {
    const auto op = static_cast<ElementwiseOp>(code);
    SCOPED_TRACE("op " + std::to_string(code));
    const bool exp_or_sqrt = op == ElementwiseOp::silu || op == ElementwiseOp::silu_backward ||
                             op == ElementwiseOp::rsqrt;
    TensorView a = tview(nullptr, DType::bf16, hm, tm_st),
               b = tview(nullptr, DType::f32, hm, {S, 0, 1, 0});
    if (op == ElementwiseOp::cat_last) {  // [.., D/2] of y, then x's first half, transposed
      a = tview(nullptr, DType::bf16, {B, H, S, D / 2}, hm_st);
      b = tview(nullptr, DType::bf16, {B, H, S, D / 2}, tm_st);
    } else if (op == ElementwiseOp::rsqrt) {
      a = tview(nullptr, DType::f32, hm, {S, 0, 1, 0});
    }
    const bool a_rows = a.dtype == DType::f32, b_rows = b.dtype == DType::f32;
    TensorView ha = a, hb = b, da = a, db = b;
    ha.data = a_rows ? static_cast<const void*>(rows.data())
                     : (op == ElementwiseOp::cat_last ? y.data() : x.data());
    hb.data = b_rows ? static_cast<const void*>(rows.data()) : x.data();
    da.data = a_rows ? static_cast<const void*>(drows.get())
                     : (op == ElementwiseOp::cat_last ? dy.get() : dx.get());
    db.data = b_rows ? static_cast<const void*>(drows.get()) : dx.get();
    std::vector<bf16> want(sz(n));
    Buffer<bf16> got(dev, sz(n));
    cpu::elementwise(op, tview(want.data(), DType::bf16, hm, hm_st), ha, hb, 0.75f, nullptr);
    dev.elementwise(op, tview(got.get(), DType::bf16, hm, hm_st), da, db, 0.75f);
    EXPECT_EQ(count_far(got.read(), want, exp_or_sqrt ? kBf16Ulp : 0.f, 0.f), 0u);
  }
  // reduce_last: a mean over D (fp32 out), then the sum over H of [B, H, S, D] seen as
  // [B, S, D, H], into token-major [B, S, D] bf16 with a gap.
  std::vector<float> mean_want(sz(B * H * S));
  Buffer<float> mean_got(dev, sz(B * H * S));
  const TensorView mean_in = tview(nullptr, DType::bf16, {B * H * S, D}, {D, 1});
  TensorView hin = mean_in, din = mean_in;
  hin.data = y.data();
  din.data = dy.get();
  cpu::reduce_last(tview(mean_want.data(), DType::f32, {B * H * S, 1}, {1, 0}), hin, 0.125f,
                   nullptr);
  dev.reduce_last(tview(mean_got.get(), DType::f32, {B * H * S, 1}, {1, 0}), din, 0.125f);
  EXPECT_EQ(mean_got.read(), mean_want);
  std::vector<bf16> sum_want(sz(B * S * (D + 1)));
  Buffer<bf16> sum_got(dev, sum_want);
  const std::vector<std::int64_t> out_sz{B, S, D, 1}, out_st{S * (D + 1), D + 1, 1, 0};
  const std::vector<std::int64_t> in_sz{B, S, D, H}, in_st{H * S * D, D, 1, S * D};
  cpu::reduce_last(tview(sum_want.data(), DType::bf16, out_sz, out_st),
                   tview(y.data(), DType::bf16, in_sz, in_st), 1.0f, nullptr);
  dev.reduce_last(tview(sum_got.get(), DType::bf16, out_sz, out_st),
                  tview(dy.get(), DType::bf16, in_sz, in_st), 1.0f);
  EXPECT_EQ(count_far(sum_got.read(), sum_want, 0.f, 0.f), 0u);
}

}  // namespace
}  // namespace zob
