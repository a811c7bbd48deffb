// Each CUDA kernel against the CPU reference kernels (zob::cpu, the numerical oracle) on fresh
// random data. Tolerances, and why:
//   casts, fill, embedding forward/backward, bias_add, residual_add, bias_gelu's pre: bit-exact
//     (the same fp32 adds in the same order, the same rounding);
//   gelu forward / backward: 1 bf16 ulp (erff / expf differ by an fp32 ulp between CUDA and
//     glibc), or 2^-20 absolute where 1 + erf(x) cancels for x < -4 and the value is ~0;
//   column_sum: 1 bf16 ulp, or 2^-16 * sum|x| over the column (summation order differs);
//   sum: within its own summation tree's rigorous bound of the exact (double) sum, and 2^-16 *
//     sum|x| of the CPU's (whose sequential block sums are less accurate); same bits on repeat;
//   gemm: 1 bf16 ulp of |ref| + 2^-12 * sum_k |a||b| (fp32 accumulation in another order,
//     then each side rounds once to bf16).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "backends/cpu/cpu_kernels.hpp"
#include "gpu_test_util.hpp"

namespace zob::gpu_test {
namespace {

void expect_same_bits(const std::vector<bf16>& got, const std::vector<bf16>& want,
                      const char* what) {
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

void expect_within_ulp(const std::vector<bf16>& got, const std::vector<bf16>& want,
                       const char* what, float abs_floor) {
  ASSERT_EQ(got.size(), want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float diff = std::fabs(bf16_to_f32(got[i]) - bf16_to_f32(want[i]));
    if (ulp_distance(got[i], want[i]) > 1 && !(diff <= abs_floor) && ++bad <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: gpu " << bf16_to_f32(got[i]) << " cpu "
                    << bf16_to_f32(want[i]) << " (seed " << test_seed() << ")";
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": elements off by more than 1 ulp";
}

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Random fp32 across the whole exponent range, plus the cases rounding gets wrong: exact
// ties (both parities), values that round up into the next binade or to infinity, subnormals,
// signed zeros, infinities and NaNs with payloads and either sign.
std::vector<float> cast_inputs(std::size_t n) {
  std::vector<float> v(n);
  std::uniform_int_distribution<std::uint32_t> any;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t u = any(rng());
    switch (i % 8) {
      case 0: u = (u & 0xffff0000u) | 0x8000u; break;           // exact tie
      case 1: u = (u & 0xffff0000u) | 0x7fffu; break;           // just below a tie
      case 2: u = (u & 0x807fffffu) | 0x7f800000u | 1u; break;  // NaN (or with payload)
      case 3: u = (u & 0x8000ffffu); break;                     // subnormal
      default: break;                                           // anything, NaN included
    }
    v[i] = from_bits(u);
  }
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(),
                            from_bits(0x7f7f8000u),
                            from_bits(0x3f808000u),
                            from_bits(0x3f818000u),
                            from_bits(0xffc00001u),
                            from_bits(0x7fa00000u)};
  for (std::size_t i = 0; i < std::size(specials) && i < n; ++i) v[i] = specials[i];
  return v;
}

TEST(CudaKernels, CastF32ToBf16IsBitExactIncludingNaNAndTies) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const std::size_t n = (1u << 20) + 13;  // a ragged tail after the 8-wide vector path
  const auto src = cast_inputs(n);
  std::vector<bf16> want(n);
  cpu::cast_f32_to_bf16(src.data(), want.data(), static_cast<std::int64_t>(n), nullptr);
  for (std::size_t i = 0; i < n; i += 997) ASSERT_EQ(want[i].bits, f32_to_bf16(src[i]).bits);

  DeviceBuffer<float> d_src(dev, src);
  DeviceBuffer<bf16> d_dst(dev, n);
  dev.cast_f32_to_bf16(d_src.get(), d_dst.get(), static_cast<std::int64_t>(n), Queue::d2h);
  expect_same_bits(d_dst.download(), want, "cast_f32_to_bf16 (aligned)");

  // Misaligned by one element: the scalar path must give the same bits.
  d_dst.poison();
  dev.cast_f32_to_bf16(d_src.get() + 1, d_dst.get() + 3, static_cast<std::int64_t>(n - 8));
  const auto got = d_dst.download();
  std::vector<bf16> got_shift(got.begin() + 3, got.begin() + 3 + (n - 8));
  std::vector<bf16> want_shift(want.begin() + 1, want.begin() + 1 + (n - 8));
  expect_same_bits(got_shift, want_shift, "cast_f32_to_bf16 (misaligned)");
  EXPECT_EQ(got[0].bits, 0xA5A5) << "wrote before the destination";
}

TEST(CudaKernels, CastBf16ToF32IsBitExact) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const std::size_t n = (1u << 19) + 5;
  std::vector<bf16> src(n);
  std::uniform_int_distribution<unsigned> any(0, 0xffff);
  for (auto& b : src) b.bits = static_cast<std::uint16_t>(any(rng()));
  std::vector<float> want(n);
  cpu::cast_bf16_to_f32(src.data(), want.data(), static_cast<std::int64_t>(n), nullptr);

  DeviceBuffer<bf16> d_src(dev, src);
  DeviceBuffer<float> d_dst(dev, n);
  dev.cast_bf16_to_f32(d_src.get(), d_dst.get(), static_cast<std::int64_t>(n), Queue::h2d);
  const auto got = d_dst.download();
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad += bits_of(got[i]) != bits_of(want[i]);
  EXPECT_EQ(bad, 0u);
}

class CudaKernelsByWidth : public ::testing::TestWithParam<std::int64_t> {};
// 264 and 2048 take the 16-byte vector paths; 100 and 37 the scalar ones.
INSTANTIATE_TEST_SUITE_P(Widths, CudaKernelsByWidth, ::testing::Values(264, 2048, 100, 37));

TEST_P(CudaKernelsByWidth, EmbeddingForwardIsBitExact) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const std::int64_t hidden = GetParam();
  const std::int64_t vocab = 1000;
  const std::int64_t tokens = 777;
  const auto table = random_bf16(static_cast<std::size_t>(vocab * hidden));
  std::vector<std::int32_t> ids(tokens);
  std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(vocab - 1));
  for (auto& id : ids) id = pick(rng());
  std::vector<bf16> want(static_cast<std::size_t>(tokens * hidden));
  cpu::embedding_forward(ids.data(), table.data(), want.data(), tokens, hidden, nullptr);

  DeviceBuffer<std::int32_t> d_ids(dev, ids);
  DeviceBuffer<bf16> d_table(dev, table);
  DeviceBuffer<bf16> d_out(dev, want.size());
  dev.embedding_forward(d_ids.get(), d_table.get(), d_out.get(), tokens, hidden);
  expect_same_bits(d_out.download(), want, "embedding_forward");
}

TEST_P(CudaKernelsByWidth, EmbeddingBackwardIsBitExactAndTouchesOnlyListedRows) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const std::int64_t hidden = GetParam();
  const std::int64_t vocab = 300;
  const std::int64_t tokens = 1031;
  // Ids from a small range so most ids repeat many times (the sums are long).
  std::vector<std::int32_t> ids(tokens);
  std::uniform_int_distribution<std::int32_t> pick(0, 79);
  for (auto& id : ids) id = pick(rng()) * 3;
  std::map<std::int32_t, std::vector<std::int32_t>> where;
  for (std::int32_t t = 0; t < tokens; ++t) where[ids[t]].push_back(t);
  std::vector<std::int32_t> unique_ids, offsets{0}, positions;
  for (auto& [id, pos] : where) {
    unique_ids.push_back(id);
    positions.insert(positions.end(), pos.begin(), pos.end());
    offsets.push_back(static_cast<std::int32_t>(positions.size()));
  }
  const auto n_unique = static_cast<std::int64_t>(unique_ids.size());
  const auto dout = random_bf16(static_cast<std::size_t>(tokens * hidden));
  // Not zeros: rows outside the index must keep whatever they held.
  auto want = random_bf16(static_cast<std::size_t>(vocab * hidden));
  DeviceBuffer<bf16> d_dtable(dev, want);
  cpu::embedding_backward(unique_ids.data(), offsets.data(), positions.data(), n_unique,
                          dout.data(), want.data(), hidden, nullptr);

  DeviceBuffer<std::int32_t> d_unique(dev, unique_ids), d_offsets(dev, offsets),
      d_positions(dev, positions);
  DeviceBuffer<bf16> d_dout(dev, dout);
  const EmbeddingGradIndex index{d_unique.get(), d_offsets.get(), d_positions.get(), n_unique};
  dev.embedding_backward(index, d_dout.get(), d_dtable.get(), hidden);
  expect_same_bits(d_dtable.download(), want, "embedding_backward");
}

TEST_P(CudaKernelsByWidth, BiasAddIsBitExact) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const std::int64_t rows = 67, cols = GetParam();
  auto y = random_bf16(static_cast<std::size_t>(rows * cols), 3.0f);
  const auto bias = random_bf16(static_cast<std::size_t>(cols));
  DeviceBuffer<bf16> d_y(dev, y), d_bias(dev, bias);
  cpu::bias_add(y.data(), bias.data(), rows, cols, nullptr);
  dev.bias_add(d_y.get(), d_bias.get(), rows, cols);
  expect_same_bits(d_y.download(), y, "bias_add");
}

TEST_P(CudaKernelsByWidth, BiasGeluForwardMatchesWithinOneUlp) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const std::int64_t rows = 129, cols = GetParam();
  auto pre = random_bf16(static_cast<std::size_t>(rows * cols), 2.5f);
  const auto bias = random_bf16(static_cast<std::size_t>(cols));
  std::vector<bf16> act(pre.size());
  DeviceBuffer<bf16> d_pre(dev, pre), d_bias(dev, bias), d_act(dev, act.size());
  cpu::bias_gelu_forward(pre.data(), bias.data(), act.data(), rows, cols, nullptr);
  dev.bias_gelu_forward(d_pre.get(), d_bias.get(), d_act.get(), rows, cols);
  expect_same_bits(d_pre.download(), pre, "bias_gelu_forward pre");
  expect_within_ulp(d_act.download(), act, "bias_gelu_forward act", 0x1p-20f);
}

TEST_P(CudaKernelsByWidth, ColumnSumMatchesAndIsDeterministic) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const std::int64_t rows = 513, cols = GetParam();
  const auto x = random_bf16(static_cast<std::size_t>(rows * cols));
  std::vector<bf16> want(static_cast<std::size_t>(cols));
  cpu::column_sum(x.data(), want.data(), rows, cols, nullptr);
  DeviceBuffer<bf16> d_x(dev, x), d_out(dev, want.size());
  dev.column_sum(d_x.get(), d_out.get(), rows, cols);
  const auto got = d_out.download();
  for (std::int64_t c = 0; c < cols; ++c) {
    double abs_sum = 0;
    for (std::int64_t r = 0; r < rows; ++r) abs_sum += std::fabs(bf16_to_f32(x[r * cols + c]));
    const double diff = std::fabs(bf16_to_f32(got[c]) - bf16_to_f32(want[c]));
    EXPECT_TRUE(ulp_distance(got[c], want[c]) <= 1 || diff <= abs_sum * 0x1p-16)
        << "column " << c << ": gpu " << bf16_to_f32(got[c]) << " cpu " << bf16_to_f32(want[c])
        << " (seed " << test_seed() << ")";
  }
  dev.column_sum(d_x.get(), d_out.get(), rows, cols);
  expect_same_bits(d_out.download(), got, "column_sum repeated");
}

TEST(CudaKernels, GeluBackwardMatchesWithinOneUlp) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  for (const std::size_t n : {std::size_t{100003}, std::size_t{4096}}) {
    const auto dact = random_bf16(n);
    const auto pre = random_bf16(n, 2.5f);
    std::vector<bf16> want(n);
    cpu::gelu_backward(dact.data(), pre.data(), want.data(), static_cast<std::int64_t>(n), nullptr);
    DeviceBuffer<bf16> d_dact(dev, dact), d_pre(dev, pre), d_dpre(dev, n);
    dev.gelu_backward(d_dact.get(), d_pre.get(), d_dpre.get(), static_cast<std::int64_t>(n));
    expect_within_ulp(d_dpre.download(), want, "gelu_backward", 0x1p-20f);
  }
}

TEST(CudaKernels, ResidualAddIsBitExactAlignedAndNot) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const std::size_t n = 250007;
  auto x = random_bf16(n, 2.0f);
  const auto y = random_bf16(n);
  DeviceBuffer<bf16> d_x(dev, x), d_y(dev, y);
  cpu::residual_add(x.data(), y.data(), static_cast<std::int64_t>(n), nullptr);
  dev.residual_add(d_x.get(), d_y.get(), static_cast<std::int64_t>(n));
  expect_same_bits(d_x.download(), x, "residual_add");
  // x + 1, y + 3 elements: the scalar path.
  cpu::residual_add(x.data() + 1, y.data() + 3, static_cast<std::int64_t>(n - 3), nullptr);
  dev.residual_add(d_x.get() + 1, d_y.get() + 3, static_cast<std::int64_t>(n - 3));
  expect_same_bits(d_x.download(), x, "residual_add misaligned");
}

TEST(CudaKernels, FillWritesTheRoundedValue) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const std::size_t n = 70001;
  std::normal_distribution<float> d;
  for (const float value :
       {d(rng()), d(rng()) * 1e30f, std::numeric_limits<float>::quiet_NaN(), -0.0f}) {
    std::vector<bf16> want(n);
    cpu::fill(want.data(), value, static_cast<std::int64_t>(n), nullptr);
    DeviceBuffer<bf16> d_x(dev, n);
    dev.fill(d_x.get(), value, static_cast<std::int64_t>(n));
    expect_same_bits(d_x.download(), want, "fill");
    EXPECT_EQ(want[n / 2].bits, f32_to_bf16(value).bits);
  }
}

TEST(CudaKernels, SumMatchesWithinItsErrorBoundAndRepeatsBitForBit) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  for (const std::size_t n : {std::size_t{(1u << 22) + 7}, std::size_t{1000}, std::size_t{1}}) {
    // Mean 0.5, not 0: a dropped or doubled stretch of elements then moves the sum by far more
    // than the rounding bound, whatever the signs of the dropped elements.
    auto x = random_bf16(n);
    for (auto& v : x) v = f32_to_bf16(bf16_to_f32(v) + 0.5f);
    float want = 0.0f;
    cpu::sum(x.data(), static_cast<std::int64_t>(n), &want, nullptr);
    double exact = 0, abs_sum = 0;
    for (const auto v : x) {
      exact += bf16_to_f32(v);
      abs_sum += std::fabs(bf16_to_f32(v));
    }
    DeviceBuffer<bf16> d_x(dev, x);
    DeviceBuffer<float> d_result(dev, 1);
    dev.sum(d_x.get(), static_cast<std::int64_t>(n), d_result.get());
    const float got = d_result.download()[0];
    // The kernel's summation tree has depth d = n / (1024 blocks * 256 threads) sequential adds
    // per thread + 8 levels in the block + 10 across blocks, so |got - exact| <= d u sum|x|
    // (u = 2^-24): a rigorous bound, tight enough to see one element of ~0.5 at n = 1000.
    const double depth = std::ceil(static_cast<double>(n) / (1024.0 * 256.0)) + 8 + 10 + 1;
    EXPECT_NEAR(got, exact, depth * 0x1p-24 * abs_sum) << "n " << n << " seed " << test_seed();
    // The CPU reference adds its 4096-element block sums one after another: a looser bound.
    EXPECT_NEAR(got, want, abs_sum * 0x1p-16) << "n " << n << " seed " << test_seed();
    dev.sum(d_x.get(), static_cast<std::int64_t>(n), d_result.get());
    EXPECT_EQ(bits_of(d_result.download()[0]), bits_of(got)) << "sum is not deterministic";
  }
}

struct GemmCase {
  bool trans_a, trans_b;
  std::int64_t m, n, k, pad;
};

class CudaGemm : public ::testing::TestWithParam<GemmCase> {};
// The step's three shapes (forward X W^T, input grad dY W, weight grad dY^T X), odd sizes,
// and leading dimensions wider than the rows.
INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaGemm,
    ::testing::Values(GemmCase{false, true, 67, 45, 129, 0}, GemmCase{false, false, 67, 45, 129, 0},
                      GemmCase{true, false, 67, 45, 129, 0}, GemmCase{false, true, 64, 96, 200, 8},
                      GemmCase{false, false, 33, 130, 70, 5},
                      GemmCase{true, false, 128, 40, 513, 3}, GemmCase{true, true, 31, 17, 65, 2},
                      GemmCase{false, true, 256, 384, 512, 0}),
    [](const ::testing::TestParamInfo<GemmCase>& i) {
      const auto& c = i.param;
      return std::string(c.trans_a ? "T" : "N") + (c.trans_b ? "T" : "N") + "_" +
             std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) + "_pad" +
             std::to_string(c.pad);
    });

TEST_P(CudaGemm, MatchesCpuWithinAccumulationTolerance) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const auto p = GetParam();
  const std::int64_t a_rows = p.trans_a ? p.k : p.m, a_cols = p.trans_a ? p.m : p.k;
  const std::int64_t b_rows = p.trans_b ? p.n : p.k, b_cols = p.trans_b ? p.k : p.n;
  const std::int64_t lda = a_cols + p.pad, ldb = b_cols + p.pad, ldc = p.n + p.pad;
  const auto a = random_bf16(static_cast<std::size_t>(a_rows * lda));
  const auto b = random_bf16(static_cast<std::size_t>(b_rows * ldb));
  auto want = random_bf16(static_cast<std::size_t>(p.m * ldc));  // padding must survive
  DeviceBuffer<bf16> d_a(dev, a), d_b(dev, b), d_c(dev, want);
  GemmArgs g{p.trans_a, p.trans_b, p.m, p.n, p.k, a.data(), lda, b.data(), ldb, want.data(), ldc};
  cpu::gemm(g, nullptr);
  g.a = d_a.get();
  g.b = d_b.get();
  g.c = d_c.get();
  dev.gemm(g);
  const auto got = d_c.download();
  auto at = [&](std::int64_t i, std::int64_t kk) {
    return bf16_to_f32(p.trans_a ? a[kk * lda + i] : a[i * lda + kk]);
  };
  auto bt = [&](std::int64_t kk, std::int64_t j) {
    return bf16_to_f32(p.trans_b ? b[j * ldb + kk] : b[kk * ldb + j]);
  };
  std::size_t bad = 0;
  for (std::int64_t i = 0; i < p.m; ++i) {
    for (std::int64_t j = 0; j < ldc; ++j) {
      const std::size_t idx = static_cast<std::size_t>(i * ldc + j);
      if (j >= p.n) {
        bad += got[idx].bits != want[idx].bits;
        continue;
      }
      double mag = 0;
      for (std::int64_t kk = 0; kk < p.k; ++kk) mag += std::fabs(at(i, kk) * bt(kk, j));
      const double ref = bf16_to_f32(want[idx]);
      const double tol =
          std::ldexp(1.0, std::ilogb(std::max(std::fabs(ref), 1e-30)) - 7) + mag * 0x1p-12;
      if (!(std::fabs(bf16_to_f32(got[idx]) - ref) <= tol) && ++bad <= 5) {
        ADD_FAILURE() << "C[" << i << "," << j << "] gpu " << bf16_to_f32(got[idx]) << " cpu "
                      << ref << " tol " << tol << " (seed " << test_seed() << ")";
      }
    }
  }
  EXPECT_EQ(bad, 0u);
}

}  // namespace
}  // namespace zob::gpu_test
