// The CUDA decoder-transformer kernels (--model) against the CPU reference
// (cpu_decoder_kernels.hpp) on fresh random data, sizes that are not multiples of any block or
// warp, GQA repeats > 1, rotary theta > 0 and 0, causal rows of lengths that are not powers of
// two. Tolerances, and why:
//   to_heads / from_heads with theta == 0: bit-exact (the same copies and fp32 adds);
//   with theta > 0: 1 bf16 ulp, or 2^-20 (|x0| + |x1|) where x0 c - x1 s cancels (CUDA's
//     double cos / sin may round to another float than glibc's);
//   silu_mul: 1 bf16 ulp (expf differs by an fp32 ulp), or 2^-20 of the terms where
//     1 + x (1 - s) cancels;
//   rmsnorm, causal softmax: 1 bf16 ulp, or the effect of the row sum's other order
//     (2^-20 of the sum of the magnitudes it adds) where the output cancels;
//   dweight: 1 bf16 ulp, or 2^-16 sum_r |dy xhat| (column_sum's tolerance);
//   gemm_strided_batched: the gemm tolerance of cuda_kernels_test.cpp, per batch entry.
// Every op also runs twice and must give the same bits (deterministic).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "backends/cpu/cpu_decoder_kernels.hpp"
#include "gpu_test_util.hpp"
#include "zob/device.hpp"

namespace zob::gpu_test {
namespace {

float f(bf16 v) { return bf16_to_f32(v); }

// got[i] within 1 bf16 ulp of want[i], or within floor(i).
void expect_close(const std::vector<bf16>& got, const std::vector<bf16>& want,
                  const std::function<double(std::size_t)>& floor, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(f(got[i])) - f(want[i]));
    if (ulp_distance(got[i], want[i]) > 1 && !(diff <= floor(i)) && ++bad <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: gpu " << f(got[i]) << " cpu " << f(want[i])
                    << " (seed " << test_seed() << ")";
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": elements outside the tolerance";
}

void expect_same_bits(const std::vector<bf16>& got, const std::vector<bf16>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i].bits != want[i].bits && ++bad <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: gpu 0x" << std::hex << got[i].bits << " cpu 0x"
                    << want[i].bits << std::dec << " (seed " << test_seed() << ")";
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": elements differing";
}

std::size_t sz(std::int64_t n) { return static_cast<std::size_t>(n); }

// ---- gemm_strided_batched ----

struct BatchedCase {
  bool trans_a, trans_b;
  std::int64_t m, n, k, count;
  bool shared_a;  // stride_a = 0
};

class CudaGemmBatched : public ::testing::TestWithParam<BatchedCase> {};
// Attention's shapes for seq 77, head_dim 40: S = Q K^T, O = P V, and their gradients
// dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q; plus a shared (stride 0) operand.
INSTANTIATE_TEST_SUITE_P(Attention, CudaGemmBatched,
                         ::testing::Values(BatchedCase{false, true, 77, 77, 40, 6, false},
                                           BatchedCase{false, false, 77, 40, 77, 6, false},
                                           BatchedCase{true, false, 77, 40, 77, 5, false},
                                           BatchedCase{true, true, 33, 19, 65, 3, false},
                                           BatchedCase{false, true, 50, 70, 24, 4, true}));

TEST_P(CudaGemmBatched, MatchesCpuPerBatchEntry) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const auto p = GetParam();
  const std::int64_t a_rows = p.trans_a ? p.k : p.m, a_cols = p.trans_a ? p.m : p.k;
  const std::int64_t b_rows = p.trans_b ? p.n : p.k, b_cols = p.trans_b ? p.k : p.n;
  // Gaps between the entries, which must survive; with m * n odd (77 x 77, seq x seq for an
  // odd seq) the entries of C start at 2-byte-aligned addresses, as attention's scores do.
  constexpr std::int64_t kGap = 8;
  const std::int64_t stride_a = p.shared_a ? 0 : a_rows * a_cols + 2 * kGap;
  const std::int64_t stride_b = b_rows * b_cols + 3 * kGap, stride_c = p.m * p.n + kGap;
  const auto a = random_bf16(sz(p.shared_a ? stride_a + a_rows * a_cols : stride_a * p.count));
  const auto b = random_bf16(sz(stride_b * p.count));
  auto want = random_bf16(sz(stride_c * p.count));  // the gaps must survive
  DeviceBuffer<bf16> d_a(dev, a), d_b(dev, b), d_c(dev, want);
  GemmArgs g{p.trans_a, p.trans_b, p.m,    p.n,         p.k, a.data(),
             a_cols,    b.data(),  b_cols, want.data(), p.n};
  cpu::gemm_strided_batched(g, p.count, stride_a, stride_b, stride_c, nullptr);
  g.a = d_a.get();
  g.b = d_b.get();
  g.c = d_c.get();
  dev.gemm_strided_batched(g, p.count, stride_a, stride_b, stride_c);
  const auto got = d_c.download();
  std::size_t bad = 0;
  for (std::int64_t e = 0; e < p.count; ++e) {
    for (std::int64_t i = 0; i < p.m; ++i) {
      for (std::int64_t j = 0; j < p.n; ++j) {
        double mag = 0;
        for (std::int64_t kk = 0; kk < p.k; ++kk) {
          const auto ai = sz(e * stride_a + (p.trans_a ? kk * a_cols + i : i * a_cols + kk));
          const auto bi = sz(e * stride_b + (p.trans_b ? j * b_cols + kk : kk * b_cols + j));
          mag += std::fabs(static_cast<double>(f(a[ai])) * f(b[bi]));
        }
        const auto ci = sz(e * stride_c + i * p.n + j);
        const double ref = f(want[ci]);
        const double tol =
            std::ldexp(1.0, std::ilogb(std::max(std::fabs(ref), 1e-30)) - 7) + mag * 0x1p-12;
        if (!(std::fabs(f(got[ci]) - ref) <= tol) && ++bad <= 5) {
          ADD_FAILURE() << "C" << e << "[" << i << "," << j << "] gpu " << f(got[ci]) << " cpu "
                        << ref << " (seed " << test_seed() << ")";
        }
      }
    }
    const auto gap = sz(e * stride_c + p.m * p.n);  // the gap after entry e
    for (std::size_t q = gap; q < gap + sz(kGap); ++q) bad += got[q].bits != want[q].bits;
  }
  EXPECT_EQ(bad, 0u);
}

// ---- RMSNorm ----

class CudaRmsNorm : public ::testing::TestWithParam<std::int64_t> {};
INSTANTIATE_TEST_SUITE_P(Cols, CudaRmsNorm, ::testing::Values(4096, 1000, 77, 2050));

TEST_P(CudaRmsNorm, ForwardAndBackwardMatchCpu) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const std::int64_t rows = 37, cols = GetParam();
  const float eps = 1e-5f;
  const auto x = random_bf16(sz(rows * cols), 2.0f);
  auto w = random_bf16(sz(cols));
  for (auto& v : w) v = f32_to_bf16(1.0f + 0.5f * f(v));
  const auto dy = random_bf16(sz(rows * cols));
  std::vector<bf16> y(x.size()), dx(x.size()), dw(w.size());
  std::vector<float> rstd(sz(rows));
  cpu::rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), rows, cols, eps, nullptr);
  cpu::rmsnorm_backward(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), rows,
                        cols, nullptr);

  DeviceBuffer<bf16> d_x(dev, x), d_w(dev, w), d_y(dev, y.size()), d_dy(dev, dy),
      d_dx(dev, dx.size()), d_dw(dev, dw.size());
  DeviceBuffer<float> d_rstd(dev, sz(rows));
  dev.rmsnorm_forward(d_x.get(), d_w.get(), d_y.get(), d_rstd.get(), rows, cols, eps);
  const auto got_rstd = d_rstd.download();
  for (std::int64_t r = 0; r < rows; ++r) {
    // Both sums of cols positive terms are within cols * 2^-24 (relative) of the exact one.
    EXPECT_NEAR(got_rstd[sz(r)], rstd[sz(r)], rstd[sz(r)] * std::ldexp(cols + 16.0, -24))
        << "rstd row " << r;
  }
  const auto got_y = d_y.download();
  expect_close(
      got_y, y, [](std::size_t) { return 0.0; }, "rmsnorm y");

  // Backward from the CPU's rstd, so only the kernel's own sums differ.
  d_rstd.upload(rstd);
  dev.rmsnorm_backward(d_dy.get(), d_x.get(), d_w.get(), d_rstd.get(), d_dx.get(), d_dw.get(), rows,
                       cols);
  std::vector<double> row_mag(sz(rows), 0.0), col_mag(sz(cols), 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t c = 0; c < cols; ++c) {
      const double xhat = f(x[sz(r * cols + c)]) * rstd[sz(r)];
      const double gy = f(dy[sz(r * cols + c)]);
      row_mag[sz(r)] += std::fabs(gy * f(w[sz(c)]) * xhat);
      col_mag[sz(c)] += std::fabs(gy * xhat);
    }
  }
  // dx = rstd (g - xhat dot / cols): dot / cols, summed in two orders, each within
  // 2^-24 sum|g xhat| of the exact value.
  const auto got_dx = d_dx.download();
  expect_close(
      got_dx, dx,
      [&](std::size_t i) {
        const auto r = static_cast<std::int64_t>(i) / cols;
        const double xhat = std::fabs(f(x[i]) * rstd[sz(r)]);
        return rstd[sz(r)] * xhat * row_mag[sz(r)] * 0x1p-23;
      },
      "rmsnorm dx");
  const auto got_dw = d_dw.download();
  expect_close(
      got_dw, dw, [&](std::size_t c) { return col_mag[c] * 0x1p-16; }, "rmsnorm dweight");

  dev.rmsnorm_forward(d_x.get(), d_w.get(), d_y.get(), d_rstd.get(), rows, cols, eps);
  expect_same_bits(d_y.download(), got_y, "rmsnorm y repeated");
  // The repeated forward wrote the device's own rstd; the first backward ran on the CPU's.
  d_rstd.upload(rstd);
  dev.rmsnorm_backward(d_dy.get(), d_x.get(), d_w.get(), d_rstd.get(), d_dx.get(), d_dw.get(), rows,
                       cols);
  expect_same_bits(d_dx.download(), got_dx, "rmsnorm dx repeated");
  expect_same_bits(d_dw.download(), got_dw, "rmsnorm dweight repeated");
}

// ---- rotary embedding and the head permutes ----

struct HeadsCase {
  std::int64_t batch, seq, heads, head_dim, repeat;
  double theta;
};

class CudaHeads : public ::testing::TestWithParam<HeadsCase> {};
INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaHeads,
    ::testing::Values(HeadsCase{2, 37, 3, 64, 1, 10000.0}, HeadsCase{2, 37, 3, 64, 4, 10000.0},
                      HeadsCase{1, 300, 2, 40, 3, 1000000.0}, HeadsCase{3, 19, 5, 6, 2, 10000.0},
                      HeadsCase{2, 37, 3, 64, 1, 0.0}, HeadsCase{2, 29, 4, 24, 3, 0.0}));

TEST_P(CudaHeads, ToHeadsAndFromHeadsMatchCpu) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const auto p = GetParam();
  const std::int64_t tokens = p.batch * p.seq * p.heads * p.head_dim;
  const std::int64_t half = p.head_dim / 2;
  const auto x = random_bf16(sz(tokens));
  const auto g = random_bf16(sz(tokens * p.repeat));
  std::vector<bf16> out(sz(tokens * p.repeat)), back(sz(tokens));
  cpu::to_heads(x.data(), out.data(), p.batch, p.seq, p.heads, p.head_dim, p.repeat, p.theta,
                nullptr);
  cpu::from_heads(g.data(), back.data(), p.batch, p.seq, p.heads, p.head_dim, p.repeat, p.theta,
                  nullptr);
  DeviceBuffer<bf16> d_x(dev, x), d_out(dev, out.size()), d_g(dev, g), d_back(dev, back.size());
  dev.to_heads(d_x.get(), d_out.get(), p.batch, p.seq, p.heads, p.head_dim, p.repeat, p.theta);
  dev.from_heads(d_g.get(), d_back.get(), p.batch, p.seq, p.heads, p.head_dim, p.repeat, p.theta);
  const auto got_out = d_out.download();
  const auto got_back = d_back.download();
  if (p.theta == 0) {
    expect_same_bits(got_out, out, "to_heads");
    expect_same_bits(got_back, back, "from_heads");
  } else {
    // The pair (x0, x1) an output mixes: |x0| + |x1| bounds what a changed cos / sin moves.
    expect_close(
        got_out, out,
        [&](std::size_t i) {
          const auto d = static_cast<std::int64_t>(i) % p.head_dim;
          auto t = static_cast<std::int64_t>(i) / p.head_dim;
          const auto s = t % p.seq;
          t /= p.seq;
          const auto h = (t % (p.heads * p.repeat)) / p.repeat, b = t / (p.heads * p.repeat);
          const auto base = sz(((b * p.seq + s) * p.heads + h) * p.head_dim);
          return (std::fabs(f(x[base + sz(d % half)])) +
                  std::fabs(f(x[base + sz(d % half + half)]))) *
                 0x1p-20;
        },
        "to_heads");
    expect_close(
        got_back, back,
        [&](std::size_t) {
          return static_cast<double>(p.repeat) * 8.0 * 0x1p-20;  // |g| < 8 for N(0,1) bf16 data
        },
        "from_heads");
  }
  dev.to_heads(d_x.get(), d_out.get(), p.batch, p.seq, p.heads, p.head_dim, p.repeat, p.theta);
  expect_same_bits(d_out.download(), got_out, "to_heads repeated");
}

// ---- causal softmax ----

class CudaCausalSoftmax : public ::testing::TestWithParam<std::int64_t> {};
INSTANTIATE_TEST_SUITE_P(Seq, CudaCausalSoftmax, ::testing::Values(1, 77, 300, 1000));

TEST_P(CudaCausalSoftmax, ForwardAndBackwardMatchCpuInPlaceToo) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const std::int64_t n = 3, seq = GetParam();
  const float scale = 1.0f / std::sqrt(40.0f);
  const auto scores = random_bf16(sz(n * seq * seq), 4.0f);
  const auto dprobs = random_bf16(sz(n * seq * seq));
  std::vector<bf16> probs(scores.size()), dscores(scores.size());
  cpu::causal_softmax_forward(scores.data(), probs.data(), n, seq, scale, nullptr);
  cpu::causal_softmax_backward(probs.data(), dprobs.data(), dscores.data(), n, seq, scale, nullptr);

  DeviceBuffer<bf16> d_s(dev, scores), d_p(dev, probs.size()), d_dp(dev, dprobs),
      d_ds(dev, dscores.size());
  dev.causal_softmax_forward(d_s.get(), d_p.get(), n, seq, scale);
  const auto got_p = d_p.download();
  // p in [0, 1]; the sum's other order moves it by about 2^-24 per term: within 1 ulp.
  expect_close(
      got_p, probs, [](std::size_t) { return 0.0; }, "softmax probs");
  for (std::size_t i = 0; i < got_p.size(); ++i) {
    const auto row = static_cast<std::int64_t>(i) / seq % seq,
               col = static_cast<std::int64_t>(i) % seq;
    if (col > row) {
      ASSERT_EQ(got_p[i].bits, 0u) << "masked probs[" << i << "] not +0";
    }
  }
  dev.causal_softmax_forward(d_s.get(), d_s.get(), n, seq, scale);  // in place
  expect_same_bits(d_s.download(), got_p, "softmax in place");

  // Backward from the CPU's probs: ds = scale p (dp - dot); dot over <= seq terms in two
  // orders, each within seq 2^-24 sum|p dp| of the exact value.
  DeviceBuffer<bf16> d_pc(dev, probs);
  dev.causal_softmax_backward(d_pc.get(), d_dp.get(), d_ds.get(), n, seq, scale);
  std::vector<double> row_mag(sz(n * seq), 0.0);
  for (std::size_t i = 0; i < probs.size(); ++i) {
    row_mag[i / sz(seq)] += std::fabs(static_cast<double>(f(probs[i])) * f(dprobs[i]));
  }
  const auto got_ds = d_ds.download();
  expect_close(
      got_ds, dscores,
      [&](std::size_t i) {
        return scale * f(probs[i]) * row_mag[i / sz(seq)] * static_cast<double>(seq) * 0x1p-23;
      },
      "softmax dscores");
  dev.causal_softmax_backward(d_pc.get(), d_dp.get(), d_dp.get(), n, seq, scale);  // in place
  expect_same_bits(d_dp.download(), got_ds, "softmax backward in place");
}

// ---- SiLU-mul ----

TEST(CudaSiluMul, ForwardAndBackwardMatchCpu) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  for (const std::int64_t n : {std::int64_t{100003}, std::int64_t{4096}, std::int64_t{7}}) {
    const auto gate = random_bf16(sz(n), 4.0f), up = random_bf16(sz(n)), dout = random_bf16(sz(n));
    std::vector<bf16> out(sz(n)), dgate(sz(n)), dup(sz(n));
    cpu::silu_mul_forward(gate.data(), up.data(), out.data(), n, nullptr);
    cpu::silu_mul_backward(dout.data(), gate.data(), up.data(), dgate.data(), dup.data(), n,
                           nullptr);
    DeviceBuffer<bf16> d_gate(dev, gate), d_up(dev, up), d_dout(dev, dout), d_out(dev, sz(n)),
        d_dgate(dev, sz(n)), d_dup(dev, sz(n));
    dev.silu_mul_forward(d_gate.get(), d_up.get(), d_out.get(), n);
    dev.silu_mul_backward(d_dout.get(), d_gate.get(), d_up.get(), d_dgate.get(), d_dup.get(), n);
    expect_close(
        d_out.download(), out, [](std::size_t) { return 0.0; }, "silu_mul out");
    expect_close(
        d_dup.download(), dup, [](std::size_t) { return 0.0; }, "silu_mul dup");
    // 1 + x (1 - s) cancels near x = -1.28: a changed s moves it by ~|x| 2^-23.
    expect_close(
        d_dgate.download(), dgate,
        [&](std::size_t i) {
          return std::fabs(f(dout[i]) * f(up[i])) * (1.0 + std::fabs(f(gate[i]))) * 0x1p-20;
        },
        "silu_mul dgate");
  }
}

}  // namespace
}  // namespace zob::gpu_test
