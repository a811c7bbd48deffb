// The CPU reference kernels against direct double-precision formulas written here, on fresh
// random data (the seed is printed on failure).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "backends/cpu/cpu_kernels.hpp"
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
  bf16 bnormal(float scale = 1.0f) { return zob::f32_to_bf16(normal(scale)); }
  std::vector<bf16> bvec(std::size_t n, float scale = 1.0f) {
    std::vector<bf16> v(n);
    for (auto& x : v) x = bnormal(scale);
    return v;
  }
  std::uint32_t bits() { return static_cast<std::uint32_t>(gen()); }
  int uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); }
};
#define SEED_TRACE(rng) SCOPED_TRACE(::testing::Message() << "seed " << (rng).seed)

double d(bf16 v) { return static_cast<double>(zob::bf16_to_f32(v)); }
std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
bool same_bits(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 2) == 0;
}
// A bf16 rounding of v is within half an ulp: at most 2^-8 relative (8 significant bits).
constexpr double kBf16Rel = 1.0 / 256;

// Independent round-to-nearest-even to bf16, by comparing the two neighbours in double.
std::uint16_t reference_round(float x) {
  const std::uint32_t u = bits_of(x);
  if (std::isnan(x)) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  if (std::isinf(x)) return static_cast<std::uint16_t>(u >> 16);
  const std::uint16_t lo = static_cast<std::uint16_t>(u >> 16);
  const std::uint16_t hi = static_cast<std::uint16_t>(lo + 1);  // next magnitude up
  const double lo_v = std::fabs(d(bf16{lo}));
  // Above the largest finite bf16 the next value is 2^128 for rounding purposes.
  const double hi_v = (hi & 0x7fffu) == 0x7f80u ? std::ldexp(1.0, 128) : std::fabs(d(bf16{hi}));
  const double ax = std::fabs(static_cast<double>(x));
  if (ax - lo_v < hi_v - ax) return lo;
  if (ax - lo_v > hi_v - ax) return hi;
  return (lo & 1u) ? hi : lo;
}

TEST(CpuKernels, CastF32ToBf16IsBitExactOnSpecialsAndRandomBits) {
  Rng rng;
  SEED_TRACE(rng);
  std::vector<std::uint32_t> cases = {
      0x3f808000u, 0x3f818000u, 0xbf808000u, 0x3f80c000u, 0x3f807fffu,  // ties, near ties
      0x7fc00000u, 0x7f800001u, 0xffc00001u, 0x7fffffffu, 0xff800001u,  // NaNs (signalling too)
      0x7f800000u, 0xff800000u, 0x7f7fffffu, 0x7f7f8000u, 0x7f7f7fffu,  // inf, overflow
      0x00000001u, 0x00008000u, 0x00018000u, 0x0000ffffu, 0x807fffffu,  // denormals
      0x00000000u, 0x80000000u};
  for (int i = 0; i < 20000; ++i) cases.push_back(rng.bits());
  std::vector<float> src;
  for (auto c : cases) src.push_back(float_of(c));
  std::vector<bf16> dst(src.size());
  zob::ThreadPool pool(2);
  zob::cpu::cast_f32_to_bf16(src.data(), dst.data(), static_cast<std::int64_t>(src.size()), &pool);
  for (std::size_t i = 0; i < src.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << std::hex << "input 0x" << cases[i]);
    EXPECT_EQ(dst[i].bits, zob::f32_to_bf16(src[i]).bits);
    EXPECT_EQ(dst[i].bits, reference_round(src[i]));
    if (std::isnan(src[i])) {
      EXPECT_TRUE(std::isnan(zob::bf16_to_f32(dst[i])));
      EXPECT_EQ(dst[i].bits & 0x8000u, (cases[i] >> 16) & 0x8000u);  // sign kept
    }
  }
}

TEST(CpuKernels, CastBf16ToF32IsExactForAllPatterns) {
  std::vector<bf16> src(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) src[i].bits = static_cast<std::uint16_t>(i);
  std::vector<float> dst(src.size());
  zob::cpu::cast_bf16_to_f32(src.data(), dst.data(), 65536, nullptr);
  for (std::uint32_t i = 0; i < 65536; ++i) ASSERT_EQ(bits_of(dst[i]), i << 16);
}

// C = op(A) op(B) in double from the bf16 inputs; tolerance: the one bf16 rounding (2^-8
// relative) plus fp32 accumulation, bounded by 1e-5 * sum |a||b| per element.
// scratch_floats > 0: through gemm_bounded with that scratch (tiles of C and of K).
void check_gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, Rng& rng,
                zob::ThreadPool* pool, std::int64_t scratch_floats = 0) {
  SCOPED_TRACE(::testing::Message()
               << "trans_a " << ta << " trans_b " << tb << " scratch " << scratch_floats);
  const auto run = [&](const zob::GemmArgs& g) {
    if (scratch_floats > 0) {
      zob::cpu::gemm_bounded(g.trans_a, g.trans_b, g.m, g.n, g.k, g.a, g.lda, g.b, g.ldb, g.c,
                             g.ldc, scratch_floats, pool);
    } else {
      zob::cpu::gemm(g, pool);
    }
  };
  const std::int64_t a_rows = ta ? k : m, a_cols = ta ? m : k;
  const std::int64_t b_rows = tb ? n : k, b_cols = tb ? k : n;
  const std::int64_t lda = a_cols + 5, ldb = b_cols + 3, ldc = n + 7;
  const bf16 nan{0x7fc0};
  // Padding is NaN: a kernel that reads it poisons its result.
  std::vector<bf16> a(static_cast<std::size_t>(a_rows * lda), nan);
  std::vector<bf16> b(static_cast<std::size_t>(b_rows * ldb), nan);
  for (std::int64_t r = 0; r < a_rows; ++r)
    for (std::int64_t c = 0; c < a_cols; ++c) a[r * lda + c] = rng.bnormal();
  for (std::int64_t r = 0; r < b_rows; ++r)
    for (std::int64_t c = 0; c < b_cols; ++c) b[r * ldb + c] = rng.bnormal();
  const bf16 sentinel = zob::f32_to_bf16(12345.0f);
  std::vector<bf16> c(static_cast<std::size_t>(m * ldc), sentinel);
  zob::GemmArgs args{ta, tb, m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc};
  run(args);
  double worst = 0;
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        const double av = d(ta ? a[p * lda + i] : a[i * lda + p]);
        const double bv = d(tb ? b[j * ldb + p] : b[p * ldb + j]);
        ref += av * bv;
        mag += std::fabs(av * bv);
      }
      const double err = std::fabs(d(c[i * ldc + j]) - ref);
      const double tol = kBf16Rel * std::fabs(ref) + 1e-5 * mag;
      ASSERT_LE(err, tol) << "C[" << i << "," << j << "] = " << d(c[i * ldc + j]) << " ref " << ref;
      worst = std::max(worst, err / (mag + 1e-30));
    }
    for (std::int64_t j = n; j < ldc; ++j)
      ASSERT_EQ(c[i * ldc + j].bits, sentinel.bits) << "padding written";
  }
  ::testing::Test::RecordProperty("worst_err_over_sum_abs", std::to_string(worst));
  // Same inputs, same bits.
  std::vector<bf16> again(c.size(), sentinel);
  args.c = again.data();
  run(args);
  EXPECT_TRUE(same_bits(c, again));
}

TEST(CpuKernels, GemmMatchesDoubleInTheStepsThreeShapesAndTransposeBoth) {
  Rng rng;
  SEED_TRACE(rng);
  zob::ThreadPool pool(2);
  check_gemm(false, true, 37, 53, 71, rng, &pool);    // forward Y = X W^T
  check_gemm(false, false, 29, 66, 45, rng, &pool);   // input grad dX = dY W
  check_gemm(true, false, 61, 23, 90, rng, nullptr);  // weight grad dW = dY^T X
  check_gemm(true, true, 17, 40, 33, rng, &pool);
  check_gemm(false, true, 1, 300, 257, rng, &pool);  // big enough to thread the conversions
}

// A scratch far below the operands forces tiles of C and partial sums over K (beta 1); uneven
// shapes leave ragged last tiles, and the NaN padding catches a tile that reads past its rows.
TEST(CpuKernels, GemmInTilesOfABoundedScratchMatchesDouble) {
  Rng rng(29);
  zob::ThreadPool pool(3);
  for (const std::int64_t scratch : {3, 100, 1000}) {
    check_gemm(false, true, 37, 53, 71, rng, &pool, scratch);
    check_gemm(false, false, 29, 66, 45, rng, &pool, scratch);
    check_gemm(true, false, 61, 23, 90, rng, nullptr, scratch);
    check_gemm(true, true, 17, 40, 33, rng, &pool, scratch);
  }
}

TEST(CpuKernels, GemmWithEmptyKWritesZerosAndRejectsShortLeadingDims) {
  std::vector<bf16> c(6, zob::f32_to_bf16(3.0f));
  zob::cpu::gemm(false, false, 2, 3, 0, nullptr, 1, nullptr, 3, c.data(), 3, nullptr);
  for (auto v : c) EXPECT_EQ(v.bits, 0);
  std::vector<bf16> a(20), b(20);
  EXPECT_THROW(
      zob::cpu::gemm(false, false, 2, 3, 4, a.data(), 3, b.data(), 3, c.data(), 3, nullptr),
      zob::DeviceError);
}

TEST(CpuKernels, EmbeddingForwardAndBackwardWithRepeatedIds) {
  Rng rng;
  SEED_TRACE(rng);
  const std::int64_t vocab = 13, hidden = 37, tokens = 60;
  auto table = rng.bvec(vocab * hidden);
  std::vector<std::int32_t> ids(tokens);
  for (auto& id : ids) id = rng.uniform(0, 6);  // ids 0..6 only: many repeats, rows 7.. unused
  std::vector<bf16> out(tokens * hidden);
  zob::cpu::embedding_forward(ids.data(), table.data(), out.data(), tokens, hidden, nullptr);
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t h = 0; h < hidden; ++h)
      ASSERT_EQ(out[t * hidden + h].bits, table[ids[t] * hidden + h].bits);

  // CSR index built here independently: distinct ids, positions ascending.
  std::map<std::int32_t, std::vector<std::int32_t>> where;
  for (std::int64_t t = 0; t < tokens; ++t) where[ids[t]].push_back(static_cast<std::int32_t>(t));
  std::vector<std::int32_t> unique, offsets{0}, positions;
  for (auto& [id, pos] : where) {
    unique.push_back(id);
    positions.insert(positions.end(), pos.begin(), pos.end());
    offsets.push_back(static_cast<std::int32_t>(positions.size()));
  }
  auto dout = rng.bvec(tokens * hidden);
  const bf16 sentinel = zob::f32_to_bf16(-777.0f);
  std::vector<bf16> dtable(vocab * hidden, sentinel);
  zob::cpu::embedding_backward(unique.data(), offsets.data(), positions.data(),
                               static_cast<std::int64_t>(unique.size()), dout.data(), dtable.data(),
                               hidden, nullptr);
  for (std::int64_t v = 0; v < vocab; ++v) {
    for (std::int64_t h = 0; h < hidden; ++h) {
      const bf16 got = dtable[v * hidden + h];
      if (!where.count(static_cast<std::int32_t>(v))) {
        ASSERT_EQ(got.bits, sentinel.bits) << "row " << v << " has no token but was written";
        continue;
      }
      double ref = 0, mag = 0;
      for (auto t : where[static_cast<std::int32_t>(v)]) {
        ref += d(dout[t * hidden + h]);
        mag += std::fabs(d(dout[t * hidden + h]));
      }
      ASSERT_LE(std::fabs(d(got) - ref), kBf16Rel * std::fabs(ref) + 1e-6 * mag)
          << "row " << v << " col " << h;
    }
  }
}

TEST(CpuKernels, BiasAddBiasGeluAndResidualAdd) {
  Rng rng;
  SEED_TRACE(rng);
  const std::int64_t rows = 19, cols = 45;
  auto y = rng.bvec(rows * cols, 2.0f), bias = rng.bvec(cols);
  auto y0 = y;
  zob::cpu::bias_add(y.data(), bias.data(), rows, cols, nullptr);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const double ref = d(y0[r * cols + c]) + d(bias[c]);
      ASSERT_LE(std::fabs(d(y[r * cols + c]) - ref), kBf16Rel * std::fabs(ref));
    }

  auto pre = rng.bvec(rows * cols, 2.0f);
  auto pre0 = pre;
  std::vector<bf16> act(rows * cols);
  zob::cpu::bias_gelu_forward(pre.data(), bias.data(), act.data(), rows, cols, nullptr);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::int64_t i = r * cols + c;
      const double ref_pre = d(pre0[i]) + d(bias[c]);
      ASSERT_LE(std::fabs(d(pre[i]) - ref_pre), kBf16Rel * std::fabs(ref_pre));
      const double x = d(pre[i]);  // gelu of the stored (rounded) pre
      const double ref = 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
      ASSERT_LE(std::fabs(d(act[i]) - ref), kBf16Rel * std::fabs(ref) + 1e-6) << "x " << x;
    }

  auto x = rng.bvec(1000), other = rng.bvec(1000, 0.5f);
  auto x0 = x;
  zob::cpu::residual_add(x.data(), other.data(), 1000, nullptr);
  for (int i = 0; i < 1000; ++i) {
    const double ref = d(x0[i]) + d(other[i]);
    ASSERT_LE(std::fabs(d(x[i]) - ref), kBf16Rel * std::fabs(ref));
  }
}

TEST(CpuKernels, GeluBackwardMatchesTheErfDerivative) {
  Rng rng;
  SEED_TRACE(rng);
  const std::int64_t n = 5000;
  auto dact = rng.bvec(n), pre = rng.bvec(n, 3.0f);
  std::vector<bf16> dpre(n);
  zob::cpu::gelu_backward(dact.data(), pre.data(), dpre.data(), n, nullptr);
  const double pi = std::acos(-1.0);
  for (std::int64_t i = 0; i < n; ++i) {
    const double x = d(pre[i]);
    const double deriv =
        0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-x * x / 2) / std::sqrt(2 * pi);
    const double ref = d(dact[i]) * deriv;
    ASSERT_LE(std::fabs(d(dpre[i]) - ref), kBf16Rel * std::fabs(ref) + 1e-5 * std::fabs(d(dact[i])))
        << "x " << x;
  }
}

TEST(CpuKernels, ColumnSumFillAndSum) {
  Rng rng;
  SEED_TRACE(rng);
  const std::int64_t rows = 77, cols = 131;
  auto x = rng.bvec(rows * cols);
  std::vector<bf16> out(cols + 1, bf16{0x1234});
  zob::cpu::column_sum(x.data(), out.data(), rows, cols, nullptr);
  for (std::int64_t c = 0; c < cols; ++c) {
    double ref = 0, mag = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      ref += d(x[r * cols + c]);
      mag += std::fabs(d(x[r * cols + c]));
    }
    ASSERT_LE(std::fabs(d(out[c]) - ref), kBf16Rel * std::fabs(ref) + 1e-6 * mag) << "col " << c;
  }
  EXPECT_EQ(out[cols].bits, 0x1234) << "wrote past cols";

  const float value = rng.normal(10.0f);
  std::vector<bf16> filled(1001, bf16{0x1234});
  zob::cpu::fill(filled.data(), value, 1000, nullptr);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(filled[i].bits, reference_round(value));
  EXPECT_EQ(filled[1000].bits, 0x1234);

  const std::int64_t n = 3 * zob::cpu::kSumBlock + 917;
  auto s = rng.bvec(n);
  float result = 0;
  zob::cpu::sum(s.data(), n, &result, nullptr);
  double ref = 0, mag = 0;
  for (auto v : s) {
    ref += d(v);
    mag += std::fabs(d(v));
  }
  EXPECT_LE(std::fabs(result - ref), 1e-6 * mag) << "sum " << result << " ref " << ref;
  zob::cpu::sum(s.data(), 0, &result, nullptr);
  EXPECT_EQ(result, 0.0f);
}

TEST(CpuKernels, ReductionsGiveTheSameBitsForAnyThreadCount) {
  Rng rng;
  SEED_TRACE(rng);
  const std::int64_t rows = 300, cols = 257, n = rows * cols;  // above the threading threshold
  auto x = rng.bvec(n);
  std::vector<std::int32_t> unique(50), offsets{0}, positions;
  for (int i = 0; i < 50; ++i) {
    unique[i] = i;
    for (int p = i; p < 300; p += 50) positions.push_back(p);
    offsets.push_back(static_cast<std::int32_t>(positions.size()));
  }
  std::vector<float> sums;
  std::vector<std::vector<bf16>> colsums, embs, gemms;
  for (int threads : {0, 1, 2, 3, 5}) {
    std::unique_ptr<zob::ThreadPool> pool;
    if (threads > 0) pool = std::make_unique<zob::ThreadPool>(threads);
    float s = 0;
    zob::cpu::sum(x.data(), n, &s, pool.get());
    sums.push_back(s);
    colsums.emplace_back(cols);
    zob::cpu::column_sum(x.data(), colsums.back().data(), rows, cols, pool.get());
    embs.emplace_back(50 * cols);
    zob::cpu::embedding_backward(unique.data(), offsets.data(), positions.data(), 50, x.data(),
                                 embs.back().data(), cols, pool.get());
  }
  for (std::size_t i = 1; i < sums.size(); ++i) {
    EXPECT_EQ(bits_of(sums[i]), bits_of(sums[0])) << "run " << i;
    EXPECT_TRUE(same_bits(colsums[i], colsums[0])) << "run " << i;
    EXPECT_TRUE(same_bits(embs[i], embs[0])) << "run " << i;
  }
}

}  // namespace
