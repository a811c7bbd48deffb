// Every kernel of the xpu backend through the real loader and the fake driver, against the
// zob::cpu reference on fresh random data. The fake runs the plugin's embedded SPIR-V on
// PoCL, so this compares two implementations: exact where both do the same fp32 operations in
// the same order (gathers, adds, casts, ordered column sums), within one bf16 ulp where the
// summation order or libm differs (GEMM, gelu), and within the sum's rounding bound.
#include <gtest/gtest.h>

#include <level_zero/ze_api.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "backends/cpu/cpu_kernels.hpp"
#include "test_support.hpp"

namespace zob {
namespace {

using test::Buffer;
using test::count_far;
using test::kBf16Ulp;

// The fake's answer to "what runs kernels": "pocl" (the module's SPIR-V) or "cpu".
std::string fake_kernel_executor() {
  if (zeInit(ZE_INIT_FLAG_GPU_ONLY) != ZE_RESULT_SUCCESS) return "<zeInit failed>";
  std::uint32_t n = 1;
  ze_driver_handle_t driver = nullptr;
  if (zeDriverGet(&n, &driver) != ZE_RESULT_SUCCESS || n == 0) return "<no driver>";
  void* fn = nullptr;
  if (zeDriverGetExtensionFunctionAddress(driver, "fakeZeKernelExecutor", &fn) != ZE_RESULT_SUCCESS)
    return "<not the fake driver>";
  return reinterpret_cast<const char* (*)()>(fn)();
}

TEST(LevelZeroFake, KernelsRunTheShippedSpirvOnPoCL) {
  // The CMake configuration says which one it expects (cpu only where OpenCL is missing).
  const char* want = std::getenv("FAKE_ZE_KERNELS");
  EXPECT_EQ(fake_kernel_executor(), want != nullptr ? want : "pocl");
}

class LevelZeroKernels : public ::testing::Test {
 protected:
  LevelZeroDevice dev{0};
  std::mt19937 rng{std::random_device{}()};
};

TEST_F(LevelZeroKernels, GemmAllTransposes) {
  const std::int64_t m = 100, n = 70, k = 45, pad = 3;  // 64x64 blocks, each with a partial one
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    const std::int64_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
    auto a = test::random_bf16(static_cast<std::size_t>((ta ? k : m) * lda), rng);
    auto b = test::random_bf16(static_cast<std::size_t>((tb ? n : k) * ldb), rng);
    auto c = test::random_bf16(static_cast<std::size_t>(m * ldc), rng);  // padding kept
    Buffer<bf16> da(dev, a), db(dev, b), dc(dev, c);
    dev.gemm(GemmArgs{ta, tb, m, n, k, da.get(), lda, db.get(), ldb, dc.get(), ldc});
    cpu::gemm(ta, tb, m, n, k, a.data(), lda, b.data(), ldb, c.data(), ldc, nullptr);
    // fp32 sums in another order, one rounding to bf16: one bf16 ulp plus a little.
    EXPECT_EQ(count_far(dc.read(), c, kBf16Ulp, 1e-3f), 0u)
        << "trans_a " << ta << " trans_b " << tb;
  }
}

TEST_F(LevelZeroKernels, EmbeddingForwardAndBackward) {
  const std::int64_t vocab = 50, hidden = 300, tokens = 77;
  std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(vocab - 1));
  std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens));
  for (auto& x : ids) x = id(rng);
  auto table = test::random_bf16(static_cast<std::size_t>(vocab * hidden), rng);
  Buffer<std::int32_t> dids(dev, ids);
  Buffer<bf16> dtable(dev, table), dout(dev, static_cast<std::size_t>(tokens * hidden));
  dev.embedding_forward(dids.get(), dtable.get(), dout.get(), tokens, hidden);
  std::vector<bf16> out(static_cast<std::size_t>(tokens * hidden));
  cpu::embedding_forward(ids.data(), table.data(), out.data(), tokens, hidden, nullptr);
  EXPECT_TRUE(test::same_bits(dout.read(), out));

  // The CSR index the step builds: distinct ids, positions ascending.
  std::map<std::int32_t, std::vector<std::int32_t>> where;
  for (std::int32_t t = 0; t < tokens; ++t) where[ids[static_cast<std::size_t>(t)]].push_back(t);
  std::vector<std::int32_t> uniq, offsets{0}, positions;
  for (auto& [u, ps] : where) {
    uniq.push_back(u);
    positions.insert(positions.end(), ps.begin(), ps.end());
    offsets.push_back(static_cast<std::int32_t>(positions.size()));
  }
  auto grad = test::random_bf16(static_cast<std::size_t>(tokens * hidden), rng);
  auto dtab = test::random_bf16(static_cast<std::size_t>(vocab * hidden), rng);  // rows kept
  Buffer<std::int32_t> du(dev, uniq), doff(dev, offsets), dpos(dev, positions);
  Buffer<bf16> dgrad(dev, grad), ddtab(dev, dtab);
  const EmbeddingGradIndex index{du.get(), doff.get(), dpos.get(),
                                 static_cast<std::int64_t>(uniq.size())};
  dev.embedding_backward(index, dgrad.get(), ddtab.get(), hidden);
  cpu::embedding_backward(uniq.data(), offsets.data(), positions.data(), index.n_unique,
                          grad.data(), dtab.data(), hidden, nullptr);
  EXPECT_TRUE(test::same_bits(ddtab.read(), dtab));
}

TEST_F(LevelZeroKernels, BiasGeluResidualFill) {
  const std::int64_t rows = 13, cols = 301, n = rows * cols;
  auto y = test::random_bf16(static_cast<std::size_t>(n), rng);
  auto bias = test::random_bf16(static_cast<std::size_t>(cols), rng);
  auto other = test::random_bf16(static_cast<std::size_t>(n), rng);
  Buffer<bf16> dy(dev, y), dbias(dev, bias), dother(dev, other),
      dact(dev, static_cast<std::size_t>(n));

  dev.bias_add(dy.get(), dbias.get(), rows, cols);
  cpu::bias_add(y.data(), bias.data(), rows, cols, nullptr);
  EXPECT_TRUE(test::same_bits(dy.read(), y)) << "bias_add";

  std::vector<bf16> act(static_cast<std::size_t>(n));
  dev.bias_gelu_forward(dy.get(), dbias.get(), dact.get(), rows, cols);
  cpu::bias_gelu_forward(y.data(), bias.data(), act.data(), rows, cols, nullptr);
  EXPECT_TRUE(test::same_bits(dy.read(), y)) << "bias_gelu_forward pre";
  EXPECT_EQ(count_far(dact.read(), act, kBf16Ulp, 1e-6f), 0u) << "bias_gelu_forward act (erf)";

  std::vector<bf16> dpre(static_cast<std::size_t>(n));
  Buffer<bf16> ddpre(dev, static_cast<std::size_t>(n));
  dev.gelu_backward(dother.get(), dy.get(), ddpre.get(), n);
  cpu::gelu_backward(other.data(), y.data(), dpre.data(), n, nullptr);
  EXPECT_EQ(count_far(ddpre.read(), dpre, kBf16Ulp, 1e-6f), 0u) << "gelu_backward (erf, exp)";

  dev.residual_add(dy.get(), dother.get(), n);
  cpu::residual_add(y.data(), other.data(), n, nullptr);
  EXPECT_TRUE(test::same_bits(dy.read(), y)) << "residual_add";

  const float value = std::uniform_real_distribution<float>(-3.f, 3.f)(rng);
  dev.fill(dy.get(), value, n - 5);  // the tail keeps its old values
  cpu::fill(y.data(), value, n - 5, nullptr);
  EXPECT_TRUE(test::same_bits(dy.read(), y)) << "fill";
}

TEST_F(LevelZeroKernels, ColumnSumAndSum) {
  const std::int64_t rows = 33, cols = 517;
  auto x = test::random_bf16(static_cast<std::size_t>(rows * cols), rng);
  Buffer<bf16> dx(dev, x), dcol(dev, static_cast<std::size_t>(cols));
  Buffer<float> dsum(dev, std::size_t{1});
  std::vector<bf16> col(static_cast<std::size_t>(cols));
  dev.column_sum(dx.get(), dcol.get(), rows, cols);
  cpu::column_sum(x.data(), col.data(), rows, cols, nullptr);
  EXPECT_TRUE(test::same_bits(dcol.read(), col));
  float expected = 0;
  dev.sum(dx.get(), rows * cols, dsum.get());
  cpu::sum(x.data(), rows * cols, &expected, nullptr);
  const float got = dsum.read()[0];
  // Two fp32 summation trees: each within depth * 2^-24 * sum|x| of the exact sum.
  double exact = 0, magnitude = 0;
  for (auto v : x) exact += bf16_to_f32(v), magnitude += std::fabs(bf16_to_f32(v));
  const double bound = 2 * 64 * std::ldexp(1.0, -24) * magnitude;
  EXPECT_NEAR(got, exact, bound);
  EXPECT_NEAR(expected, exact, bound);
}

TEST_F(LevelZeroKernels, CastsOnEveryQueue) {
  const std::int64_t n = 1000;
  std::vector<float> f(static_cast<std::size_t>(n));
  std::uniform_real_distribution<float> d(-1e4f, 1e4f);
  for (auto& v : f) v = d(rng);
  // Rounding edge cases: a tie to even each way, NaNs of both signs, infinities.
  const std::uint32_t specials[] = {0x3f808000u, 0x3f818000u, 0x7fc00001u, 0xffa00000u,
                                    0x7f800000u, 0xff800000u, 0x7f7fffffu};
  for (std::size_t i = 0; i < std::size(specials); ++i) std::memcpy(&f[i * 7], &specials[i], 4);
  for (Queue q : {Queue::compute, Queue::h2d, Queue::d2h}) {
    Buffer<float> src(dev, f), back(dev, static_cast<std::size_t>(n));
    Buffer<bf16> dst(dev, static_cast<std::size_t>(n));
    dev.cast_f32_to_bf16(src.get(), dst.get(), n, q);
    dev.cast_bf16_to_f32(dst.get(), back.get(), n, q);
    std::vector<bf16> want(static_cast<std::size_t>(n));
    std::vector<float> want_back(static_cast<std::size_t>(n));
    cpu::cast_f32_to_bf16(f.data(), want.data(), n, nullptr);
    cpu::cast_bf16_to_f32(want.data(), want_back.data(), n, nullptr);
    EXPECT_TRUE(test::same_bits(dst.read(), want)) << to_string(q);
    const auto got_back = back.read();
    EXPECT_EQ(std::memcmp(got_back.data(), want_back.data(), want_back.size() * 4), 0)
        << to_string(q);
  }
}

}  // namespace
}  // namespace zob
