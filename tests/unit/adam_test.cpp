// CPU Adam and the host bf16 cast against independent double-precision / bit-level references,
// on fresh random data, for every ISA this CPU supports.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "adam_test_support.hpp"
#include "optim/adam_kernels.hpp"
#include "zob/adam.hpp"
#include "zob/bf16.hpp"
#include "zob/errors.hpp"
#include "zob/thread_pool.hpp"

namespace {

using zob::detail::AdamIsa;

using zob::adam_test::State;
using zob::adam_test::supported_isas;

// Magnitudes spread over many decades (1e-12 .. 1e12 for grads, squared stays finite in fp32),
// random signs, a few exact zeros.
State random_state(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(-1.0, 1.0), decade(-12.0, 12.0);
  std::uniform_int_distribution<int> pick(0, 9);
  State s;
  const auto size = static_cast<std::size_t>(n);
  s.p.resize(size), s.g.resize(size), s.m.resize(size), s.v.resize(size);
  for (std::size_t i = 0; i < size; ++i) {
    s.p[i] = static_cast<float>(unit(rng) * std::pow(10.0, decade(rng) / 4));
    const int kind = pick(rng);
    double g = unit(rng);
    if (kind == 0) g = 0.0;
    if (kind >= 1 && kind <= 4) g *= std::pow(10.0, decade(rng));
    s.g[i] = static_cast<float>(g);
    s.m[i] = static_cast<float>(g * 0.5 * unit(rng));
    s.v[i] = static_cast<float>(g * g * std::fabs(unit(rng)));
  }
  return s;
}

// One AdamW step in double from the given fp32 state, written independently of the kernels
// (no constant folding): returns the double results and the size of the Adam update.
struct RefElem {
  double p, m, v;
  double m_scale;       // |b1*m| + |(1-b1)*g|: the size m's rounding errors scale with
  double update_scale;  // the update computed with m_scale in place of m
};
RefElem reference(float p, float g, float m, float v, int t, const zob::AdamHyper& h) {
  const double b1 = h.beta1, b2 = h.beta2, lr = h.lr, eps = h.eps, wd = h.weight_decay;
  const double bc1 = h.bias_correction ? 1.0 - std::pow(b1, t) : 1.0;
  const double bc2 = h.bias_correction ? 1.0 - std::pow(b2, t) : 1.0;
  RefElem r{};
  r.m = b1 * m + (1.0 - b1) * g;
  r.v = b2 * v + (1.0 - b2) * static_cast<double>(g) * g;
  double pd = p;
  if (wd != 0.0) pd -= lr * wd * pd;
  const double denom = std::sqrt(r.v) / std::sqrt(bc2) + eps;
  r.p = pd - (lr / bc1) * r.m / denom;
  r.m_scale = std::fabs(b1 * m) + std::fabs((1.0 - b1) * g);
  r.update_scale = (lr / bc1) * r.m_scale / denom;
  return r;
}

// Tolerances: m and v are a few fp32 roundings from the double value: 4 ulp relative to the
// sizes of their two terms (m = b1*m + (1-b1)*g can cancel, so not relative to m itself),
// plus an absolute 1e-37 for v where g*g falls into fp32's subnormal range. p may differ by
// a few ulp of p itself and a few ulp of the update, which inherits m's error (the division
// and sqrt each round once; the vector paths use fma, the scalar path does not):
// 8 * FLT_EPSILON * (|p| + update scale).
void expect_close_to_reference(const State& before, const State& after, int t,
                               const zob::AdamHyper& h, const std::string& what) {
  const float rel = 4 * FLT_EPSILON;
  std::int64_t bad = 0;
  for (std::size_t i = 0; i < before.p.size() && bad < 5; ++i) {
    const RefElem r = reference(before.p[i], before.g[i], before.m[i], before.v[i], t, h);
    const double m_tol = rel * r.m_scale + 1e-44;
    const double v_tol = rel * std::fabs(r.v) + 1e-37;
    const double p_tol = 2 * rel * (std::fabs(r.p) + r.update_scale) + 1e-44;
    const bool ok = std::fabs(after.m[i] - r.m) <= m_tol && std::fabs(after.v[i] - r.v) <= v_tol &&
                    std::fabs(after.p[i] - r.p) <= p_tol;
    if (!ok) {
      ++bad;
      ADD_FAILURE() << what << " t=" << t << " i=" << i << " g=" << before.g[i]
                    << " p=" << after.p[i] << " ref " << r.p << " m=" << after.m[i] << " ref "
                    << r.m << " v=" << after.v[i] << " ref " << r.v;
    }
  }
}

TEST(Adam, EveryIsaMatchesTheDoubleReferenceOverSeveralSteps) {
  std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (AdamIsa isa : supported_isas()) {
    for (std::int64_t n : {1, 7, 15, 17, 63, 64, 65, 1000, 4099}) {
      for (float wd : {0.0f, 0.01f}) {
        for (bool bias : {true, false}) {
          for (int threads : {1, 3}) {
            zob::ThreadPool pool(threads);
            zob::AdamHyper h;
            h.lr = 1e-3f;
            h.weight_decay = wd;
            h.bias_correction = bias;
            State s = random_state(n, ++seed);
            const std::string what = std::string(zob::detail::to_string(isa)) +
                                     " n=" + std::to_string(n) + " wd=" + std::to_string(wd) +
                                     " bias=" + std::to_string(bias) +
                                     " threads=" + std::to_string(threads);
            for (int t = 1; t <= 5; ++t) {
              const State before = s;
              zob::detail::adam_step_isa(isa, s.p.data(), s.g.data(), s.m.data(), s.v.data(), n, t,
                                         h, pool);
              EXPECT_EQ(s.g, before.g) << "grads must not be written";
              expect_close_to_reference(before, s, t, h, what);
            }
          }
        }
      }
    }
  }
}

TEST(Adam, ResultsAreBitwiseIndependentOfTheThreadCount) {
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  zob::AdamHyper h;
  h.weight_decay = 0.1f;
  const std::int64_t n = 64 * 37 + 11;  // ranges of unequal length and a ragged end
  for (AdamIsa isa : supported_isas()) {
    const State start = random_state(n, seed);
    State first;
    for (int threads = 1; threads <= 4; ++threads) {
      zob::ThreadPool pool(threads);
      State s = start;
      for (int t = 1; t <= 3; ++t) {
        zob::detail::adam_step_isa(isa, s.p.data(), s.g.data(), s.m.data(), s.v.data(), n, t, h,
                                   pool);
      }
      if (threads == 1) {
        first = s;
        continue;
      }
      const auto bytes = static_cast<std::size_t>(n) * sizeof(float);
      EXPECT_EQ(std::memcmp(s.p.data(), first.p.data(), bytes), 0) << zob::detail::to_string(isa);
      EXPECT_EQ(std::memcmp(s.m.data(), first.m.data(), bytes), 0) << zob::detail::to_string(isa);
      EXPECT_EQ(std::memcmp(s.v.data(), first.v.data(), bytes), 0) << zob::detail::to_string(isa);
    }
  }
}

TEST(Adam, PublicEntryPointUsesTheSelectedIsaAndMatchesIt) {
  const State start = random_state(1001, std::random_device{}());
  zob::ThreadPool pool(2);
  zob::AdamHyper h;
  State a = start, b = start;
  zob::adam_step(a.p.data(), a.g.data(), a.m.data(), a.v.data(), 1001, 2, h, pool);
  zob::detail::adam_step_isa(zob::detail::selected_isa(), b.p.data(), b.g.data(), b.m.data(),
                             b.v.data(), 1001, 2, h, pool);
  EXPECT_EQ(a.p, b.p);
  EXPECT_EQ(a.m, b.m);
  EXPECT_EQ(a.v, b.v);
  EXPECT_STREQ(zob::adam_isa(), zob::detail::to_string(zob::detail::selected_isa()));
}

TEST(Adam, RejectsBadArguments) {
  zob::ThreadPool pool(1);
  float x = 1.0f, g = 1.0f, m = 0.0f, v = 0.0f;
  EXPECT_THROW(zob::adam_step(&x, &g, &m, &v, 1, 0, {}, pool), zob::UsageError);
  EXPECT_THROW(zob::adam_step(&x, &g, &m, &v, -1, 1, {}, pool), zob::UsageError);
  zob::adam_step(&x, &g, &m, &v, 0, 1, {}, pool);  // n == 0 is a no-op
  EXPECT_EQ(x, 1.0f);
}

TEST(Adam, IsaOverrideThroughTheEnvironment) {
  const char* old = std::getenv("ZOB_ADAM_ISA");
  const std::string saved = old ? old : "";
  ::setenv("ZOB_ADAM_ISA", "scalar", 1);
  EXPECT_STREQ(zob::adam_isa(), "scalar");
  ::setenv("ZOB_ADAM_ISA", "sse9", 1);
  EXPECT_THROW(zob::adam_isa(), zob::UsageError);
  for (AdamIsa isa : {AdamIsa::avx2, AdamIsa::avx512}) {
    ::setenv("ZOB_ADAM_ISA", zob::detail::to_string(isa), 1);
    if (zob::detail::isa_supported(isa)) {
      EXPECT_STREQ(zob::adam_isa(), zob::detail::to_string(isa));
    } else {
      EXPECT_THROW(zob::adam_isa(), zob::UsageError);
    }
  }
  if (old) {
    ::setenv("ZOB_ADAM_ISA", saved.c_str(), 1);
  } else {
    ::unsetenv("ZOB_ADAM_ISA");
  }
}

// The bf16 cast: bit-for-bit against zob::f32_to_bf16 on random bit patterns (NaNs,
// infinities, subnormals, ties included) and on crafted rounding ties.
TEST(CastF32ToBf16Host, EveryIsaMatchesTheScalarDefinitionBitForBit) {
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // Large enough for the streaming-store path of the vector kernels (ranges >= 1 << 14).
  const std::int64_t n = 3 * (std::int64_t{1} << 14) + 77;
  std::vector<float> src(static_cast<std::size_t>(n));
  const std::uint32_t specials[] = {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
                                    0x7f800001u, 0x00000001u, 0x80008000u, 0x3f808000u,
                                    0x3f818000u, 0x7f7fffffu, 0x00000000u, 0x80000000u};
  for (std::size_t i = 0; i < src.size(); ++i) {
    std::uint32_t u = static_cast<std::uint32_t>(rng());
    if (i % 5 == 0) u = (u & 0xffff0000u) | 0x8000u;  // exact tie
    if (i < std::size(specials)) u = specials[i];
    std::memcpy(&src[i], &u, sizeof u);
  }
  std::vector<std::uint16_t> expected(src.size());
  for (std::size_t i = 0; i < src.size(); ++i) expected[i] = zob::f32_to_bf16(src[i]).bits;
  for (AdamIsa isa : supported_isas()) {
    for (int threads : {1, 2, 3}) {
      zob::ThreadPool pool(threads);
      for (std::int64_t len : {std::int64_t{1}, std::int64_t{31}, std::int64_t{1357}, n}) {
        for (std::size_t shift : {0, 3}) {  // a destination off the 32-byte grid too
          std::vector<std::uint16_t> buf(src.size() + 1 + shift, 0xabcd);
          std::uint16_t* dst = buf.data() + shift;
          zob::detail::cast_f32_to_bf16_isa(isa, src.data(), dst, len, pool);
          for (std::int64_t i = 0; i < len; ++i) {
            ASSERT_EQ(dst[i], expected[static_cast<std::size_t>(i)])
                << zob::detail::to_string(isa) << " i=" << i << " threads=" << threads
                << " shift=" << shift;
          }
          EXPECT_EQ(dst[len], 0xabcd) << "wrote past the end";
          if (shift > 0) {
            EXPECT_EQ(buf[0], 0xabcd) << "wrote before the start";
          }
        }
      }
    }
  }
  std::vector<std::uint16_t> pub(src.size());
  zob::ThreadPool pool(2);
  zob::cast_f32_to_bf16_host(src.data(), pub.data(), n, pool);
  EXPECT_EQ(pub, expected);
}

}  // namespace
