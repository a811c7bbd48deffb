// The decoder-transformer CPU reference kernels (--model) against double-precision formulas
// written here, and every backward against finite differences of its forward (in double), on
// fresh random data (the seed is printed on failure).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "backends/cpu/cpu_decoder_kernels.hpp"
#include "zob/bf16.hpp"
#include "zob/device.hpp"
#include "zob/errors.hpp"
#include "zob/thread_pool.hpp"

namespace {

using zob::bf16;

struct Rng {
  std::uint64_t seed = std::random_device{}() | (std::uint64_t{std::random_device{}()} << 32);
  std::mt19937_64 gen{seed};
  float normal(float scale = 1.0f) { return std::normal_distribution<float>(0.0f, scale)(gen); }
  std::vector<bf16> bvec(std::size_t n, float scale = 1.0f) {
    std::vector<bf16> v(n);
    for (auto& x : v) x = zob::f32_to_bf16(normal(scale));
    return v;
  }
};
#define SEED_TRACE(rng) SCOPED_TRACE(::testing::Message() << "seed " << (rng).seed)

double d(bf16 v) { return static_cast<double>(zob::bf16_to_f32(v)); }
std::vector<double> dvec(const std::vector<bf16>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = d(v[i]);
  return out;
}

// |got - want| <= rel * |want| + abs_tol for every element.
void expect_close(const std::vector<bf16>& got, const std::vector<double>& want, double rel,
                  double abs_tol, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(d(got[i]) - want[i]);
    if (err > rel * std::fabs(want[i]) + abs_tol && bad++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << d(got[i]) << ", want " << want[i];
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// d/dx of sum(r * f(x)) by central differences in double, for each element of x.
std::vector<double> numeric_grad(
    const std::function<std::vector<double>(const std::vector<double>&)>& f, std::vector<double> x,
    const std::vector<double>& r) {
  std::vector<double> g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i], eps = 1e-4 * std::max(1.0, std::fabs(keep));
    x[i] = keep + eps;
    const std::vector<double> up = f(x);
    x[i] = keep - eps;
    const std::vector<double> down = f(x);
    x[i] = keep;
    double s = 0;
    for (std::size_t k = 0; k < r.size(); ++k) s += r[k] * (up[k] - down[k]);
    g[i] = s / (2 * eps);
  }
  return g;
}

constexpr double kRel = 1.0 / 128;  // two bf16 roundings

// ---- RMSNorm ----

std::vector<double> rmsnorm_ref(const std::vector<double>& x, const std::vector<double>& w,
                                std::int64_t rows, std::int64_t cols, double eps) {
  std::vector<double> y(x.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (std::int64_t c = 0; c < cols; ++c) ss += x[r * cols + c] * x[r * cols + c];
    const double rstd = 1 / std::sqrt(ss / cols + eps);
    for (std::int64_t c = 0; c < cols; ++c) y[r * cols + c] = w[c] * x[r * cols + c] * rstd;
  }
  return y;
}

TEST(DecoderKernels, RmsNormForwardAndBackward) {
  Rng rng;
  SEED_TRACE(rng);
  zob::ThreadPool pool(3);
  const std::int64_t rows = 7, cols = 24;
  const float eps = 1e-5f;
  const auto x = rng.bvec(rows * cols, 2.0f), w = rng.bvec(cols), dy = rng.bvec(rows * cols);
  std::vector<bf16> y(x.size()), dx(x.size()), dw(cols);
  std::vector<float> rstd(rows);
  zob::cpu::rmsnorm_forward(x.data(), w.data(), y.data(), rstd.data(), rows, cols, eps, &pool);
  const auto xd = dvec(x), wd = dvec(w), dyd = dvec(dy);
  expect_close(y, rmsnorm_ref(xd, wd, rows, cols, eps), kRel, 1e-6, "y");
  zob::cpu::rmsnorm_backward(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), rows,
                             cols, &pool);
  const auto gx =
      numeric_grad([&](const auto& v) { return rmsnorm_ref(v, wd, rows, cols, eps); }, xd, dyd);
  const auto gw =
      numeric_grad([&](const auto& v) { return rmsnorm_ref(xd, v, rows, cols, eps); }, wd, dyd);
  expect_close(dx, gx, kRel, 1e-3 * max_abs(gx), "dx");
  expect_close(dw, gw, kRel, 1e-3 * max_abs(gw), "dweight");
}

// ---- rotary embedding + head permutation ----

// Token-major [B,S,heads,D] -> head-major [B,heads*rep,S,D] with RoPE, in double.
std::vector<double> to_heads_ref(const std::vector<double>& x, std::int64_t B, std::int64_t S,
                                 std::int64_t heads, std::int64_t D, std::int64_t rep,
                                 double theta) {
  std::vector<double> out(static_cast<std::size_t>(B * heads * rep * S * D));
  const std::int64_t half = D / 2;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t s = 0; s < S; ++s)
      for (std::int64_t h = 0; h < heads; ++h)
        for (std::int64_t r = 0; r < rep; ++r)
          for (std::int64_t k = 0; k < D; ++k) {
            const double* src = &x[static_cast<std::size_t>(((b * S + s) * heads + h) * D)];
            double v = src[k];
            if (theta > 0) {
              const std::int64_t dd = k % half;
              const double a = s * std::pow(theta, -2.0 * dd / D);
              v = k < half ? src[k] * std::cos(a) - src[k + half] * std::sin(a)
                           : src[k] * std::cos(a) + src[k - half] * std::sin(a);
            }
            out[static_cast<std::size_t>(((b * heads * rep + h * rep + r) * S + s) * D + k)] = v;
          }
  return out;
}

TEST(DecoderKernels, ToHeadsAndItsAdjoint) {
  Rng rng;
  SEED_TRACE(rng);
  zob::ThreadPool pool(2);
  for (const double theta : {0.0, 10000.0, 500000.0}) {
    const std::int64_t B = 2, S = 5, heads = 3, D = 8, rep = 2;
    const auto x = rng.bvec(B * S * heads * D);
    std::vector<bf16> out(static_cast<std::size_t>(B * heads * rep * S * D));
    zob::cpu::to_heads(x.data(), out.data(), B, S, heads, D, rep, theta, &pool);
    const auto want = to_heads_ref(dvec(x), B, S, heads, D, rep, theta);
    expect_close(out, want, kRel, 1e-6, "to_heads");
    // from_heads is the adjoint: its output is the gradient of sum(g * to_heads(x)).
    const auto g = rng.bvec(out.size());
    std::vector<bf16> back(x.size());
    zob::cpu::from_heads(g.data(), back.data(), B, S, heads, D, rep, theta, &pool);
    const auto gx =
        numeric_grad([&](const auto& v) { return to_heads_ref(v, B, S, heads, D, rep, theta); },
                     dvec(x), dvec(g));
    expect_close(back, gx, kRel, 1e-4 * max_abs(gx), "from_heads");
  }
}

TEST(DecoderKernels, RotaryNeedsAnEvenHeadDim) {
  std::vector<bf16> x(12), out(12);
  EXPECT_THROW(zob::cpu::to_heads(x.data(), out.data(), 1, 1, 4, 3, 1, 10000.0, nullptr),
               zob::DeviceError);
}

// ---- causal softmax ----

std::vector<double> softmax_ref(const std::vector<double>& s, std::int64_t n, std::int64_t S,
                                double scale) {
  std::vector<double> p(s.size(), 0.0);
  for (std::int64_t row = 0; row < n * S; ++row) {
    const std::int64_t i = row % S;
    double m = -INFINITY, sum = 0;
    for (std::int64_t j = 0; j <= i; ++j) m = std::max(m, scale * s[row * S + j]);
    for (std::int64_t j = 0; j <= i; ++j) sum += std::exp(scale * s[row * S + j] - m);
    for (std::int64_t j = 0; j <= i; ++j)
      p[row * S + j] = std::exp(scale * s[row * S + j] - m) / sum;
  }
  return p;
}

TEST(DecoderKernels, CausalSoftmaxForwardAndBackward) {
  Rng rng;
  SEED_TRACE(rng);
  zob::ThreadPool pool(2);
  const std::int64_t n = 3, S = 6;
  const float scale = 0.35f;
  const auto s = rng.bvec(n * S * S, 3.0f);
  std::vector<bf16> p(s.size());
  zob::cpu::causal_softmax_forward(s.data(), p.data(), n, S, scale, &pool);
  const auto want = softmax_ref(dvec(s), n, S, scale);
  expect_close(p, want, kRel, 1e-6, "probs");
  for (std::int64_t row = 0; row < n * S; ++row) {
    for (std::int64_t j = row % S + 1; j < S; ++j) EXPECT_EQ(p[row * S + j].bits, 0);
  }
  // In place, as the decoder runs it: the same bits.
  std::vector<bf16> inplace = s;
  zob::cpu::causal_softmax_forward(inplace.data(), inplace.data(), n, S, scale, &pool);
  for (std::size_t i = 0; i < p.size(); ++i) ASSERT_EQ(inplace[i].bits, p[i].bits) << i;
  const auto dp = rng.bvec(p.size());
  std::vector<bf16> ds(p.size());
  zob::cpu::causal_softmax_backward(p.data(), dp.data(), ds.data(), n, S, scale, &pool);
  const auto gs =
      numeric_grad([&](const auto& v) { return softmax_ref(v, n, S, scale); }, dvec(s), dvec(dp));
  // The kernel differentiates at the rounded probabilities: a few bf16 ulps of p.
  expect_close(ds, gs, 4 * kRel, 4e-3 * max_abs(gs), "dscores");
}

// ---- SiLU-gated product ----

TEST(DecoderKernels, SiluMulForwardAndBackward) {
  Rng rng;
  SEED_TRACE(rng);
  zob::ThreadPool pool(2);
  const std::int64_t n = 301;
  const auto gate = rng.bvec(n, 3.0f), up = rng.bvec(n), dout = rng.bvec(n);
  std::vector<bf16> out(n), dgate(n), dup(n);
  zob::cpu::silu_mul_forward(gate.data(), up.data(), out.data(), n, &pool);
  const auto f = [&](const std::vector<double>& g, const std::vector<double>& u) {
    std::vector<double> o(g.size());
    for (std::size_t i = 0; i < g.size(); ++i) o[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
    return o;
  };
  const auto gd = dvec(gate), ud = dvec(up);
  expect_close(out, f(gd, ud), kRel, 1e-6, "out");
  zob::cpu::silu_mul_backward(dout.data(), gate.data(), up.data(), dgate.data(), dup.data(), n,
                              &pool);
  // Elementwise: the numeric gradient of sum(dout * f) is each element's own derivative.
  expect_close(dgate, numeric_grad([&](const auto& v) { return f(v, ud); }, gd, dvec(dout)), kRel,
               1e-5, "dgate");
  expect_close(dup, numeric_grad([&](const auto& v) { return f(gd, v); }, ud, dvec(dout)), kRel,
               1e-5, "dup");
}

// ---- strided batched GEMM ----

TEST(DecoderKernels, GemmStridedBatchedMatchesEachProduct) {
  Rng rng;
  SEED_TRACE(rng);
  zob::ThreadPool pool(2);
  const std::int64_t count = 3, m = 5, n = 4, k = 6;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      for (const bool shared_b : {false, true}) {
        const std::int64_t sa = m * k, sb = shared_b ? 0 : k * n, sc = m * n;
        const auto a = rng.bvec(count * sa), b = rng.bvec(shared_b ? k * n : count * sb);
        std::vector<bf16> c(count * sc);
        zob::GemmArgs args{ta,         tb,       m,          n,        k, a.data(),
                           ta ? m : k, b.data(), tb ? k : n, c.data(), n};
        zob::cpu::gemm_strided_batched(args, count, sa, sb, sc, &pool);
        std::vector<double> want(c.size());
        for (std::int64_t i = 0; i < count; ++i)
          for (std::int64_t r = 0; r < m; ++r)
            for (std::int64_t col = 0; col < n; ++col) {
              double acc = 0;
              for (std::int64_t p = 0; p < k; ++p) {
                const double av = d(a[i * sa + (ta ? p * m + r : r * k + p)]);
                const double bv = d(b[i * sb + (tb ? col * k + p : p * n + col)]);
                acc += av * bv;
              }
              want[i * sc + r * n + col] = acc;
            }
        expect_close(c, want, kRel, 1e-3, "batched gemm");
      }
    }
  }
}

}  // namespace
