// The CUDA generic tensor kernels (Device::elementwise, Device::reduce_last: the deepspeed
// schedule's eager decoder) against the CPU reference (cpu_tensor_ops.hpp) on the eager
// decoder's own view shapes at a size of many blocks: a transposed bf16 input, fp32 row
// broadcasts, a column broadcast, a half-row slice, cat_last, GQA's repeat (stride 0) and the
// sum over its repeats into a token-major output, a mean over rows. Tolerances: bit-exact, except
// the ops with expf / sqrtf (silu, silu_backward, rsqrt): 1 bf16 ulp, and the mean (a warp's
// order, not the CPU's: 2^-20 of the row's magnitude). Every elementwise op twice: the same
// bits (deterministic).
#include <gtest/gtest.h>

#include <cmath>

#include "backends/cpu/cpu_tensor_ops.hpp"
#include "gpu_test_util.hpp"
#include "zob/device.hpp"

namespace zob::gpu_test {
namespace {

std::size_t sz(std::int64_t n) { return static_cast<std::size_t>(n); }

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

void expect_within_ulps(const std::vector<bf16>& got, const std::vector<bf16>& want, int ulps,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (ulp_distance(got[i], want[i]) > ulps && ++bad <= 5)
      ADD_FAILURE() << what << "[" << i << "] (seed " << test_seed() << ")";
  EXPECT_EQ(bad, 0u) << what;
}

TEST(CudaTensorOps, EveryOpMatchesTheCpuReferenceOnTheEagerDecodersViews) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const std::int64_t B = 3, H = 7, S = 131, D = 64, n = B * H * S * D;
  const auto x = random_bf16(sz(n)), y = random_bf16(sz(n));
  std::vector<float> rows(sz(B * S));
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = 0.25f + 1e-3f * static_cast<float>(i);
  DeviceBuffer<bf16> dx(dev, x), dy(dev, y);
  DeviceBuffer<float> drows(dev, rows);
  const std::vector<std::int64_t> hm{B, H, S, D}, hm_st{H * S * D, S * D, D, 1};
  const std::vector<std::int64_t> tm_st{S * H * D, D, H * D, 1}, row_st{S, 0, 1, 0};
  for (int code = 0; code <= static_cast<int>(ElementwiseOp::cat_last); ++code) {
    const auto op = static_cast<ElementwiseOp>(code);
    SCOPED_TRACE("op " + std::to_string(code));
    TensorView a = tview(dx.get(), DType::bf16, hm, tm_st);
    TensorView b = tview(drows.get(), DType::f32, hm, row_st);
    TensorView ha = tview(x.data(), DType::bf16, hm, tm_st);
    TensorView hb = tview(rows.data(), DType::f32, hm, row_st);
    if (op == ElementwiseOp::cat_last) {
      a = tview(dy.get(), DType::bf16, {B, H, S, D / 2}, hm_st);
      ha = tview(y.data(), DType::bf16, {B, H, S, D / 2}, hm_st);
      b = tview(dx.get(), DType::bf16, {B, H, S, D / 2}, tm_st);
      hb = tview(x.data(), DType::bf16, {B, H, S, D / 2}, tm_st);
    } else if (op == ElementwiseOp::rsqrt) {
      a = b;
      ha = hb;
    }
    std::vector<bf16> want(sz(n));
    cpu::elementwise(op, tview(want.data(), DType::bf16, hm, hm_st), ha, hb, 0.75f, nullptr);
    const bool exp_or_sqrt = op == ElementwiseOp::silu || op == ElementwiseOp::silu_backward ||
                             op == ElementwiseOp::rsqrt;
    DeviceBuffer<bf16> got(dev, sz(n)), again(dev, sz(n));
    dev.elementwise(op, tview(got.get(), DType::bf16, hm, hm_st), a, b, 0.75f);
    dev.elementwise(op, tview(again.get(), DType::bf16, hm, hm_st), a, b, 0.75f);
    const auto g = got.download();
    expect_within_ulps(g, want, exp_or_sqrt ? 1 : 0, "elementwise");
    expect_within_ulps(again.download(), g, 0, "elementwise twice");
  }
  // The sum over H of [B, H, S, D] seen as [B, S, D, H] (GQA's repeats) into token-major
  // [B, S, D] (a thread per output, the CPU's order: bit-exact); a mean over D rows into fp32.
  std::vector<bf16> sum_want(sz(B * S * D));
  DeviceBuffer<bf16> sum_got(dev, sz(B * S * D));
  const std::vector<std::int64_t> out_sz{B, S, D, 1}, out_st{S * D, D, 1, 0};
  const std::vector<std::int64_t> in_sz{B, S, D, H}, in_st{H * S * D, D, 1, S * D};
  cpu::reduce_last(tview(sum_want.data(), DType::bf16, out_sz, out_st),
                   tview(y.data(), DType::bf16, in_sz, in_st), 1.0f, nullptr);
  dev.reduce_last(tview(sum_got.get(), DType::bf16, out_sz, out_st),
                  tview(dy.get(), DType::bf16, in_sz, in_st), 1.0f);
  expect_within_ulps(sum_got.download(), sum_want, 0, "sum over repeats");
  std::vector<float> mean_want(sz(B * H * S));
  DeviceBuffer<float> mean_got(dev, sz(B * H * S));
  const std::vector<std::int64_t> mean_out{B * H * S, 1}, mean_out_st{1, 0};
  const std::vector<std::int64_t> mean_in{B * H * S, D}, mean_in_st{D, 1};
  cpu::reduce_last(tview(mean_want.data(), DType::f32, mean_out, mean_out_st),
                   tview(y.data(), DType::bf16, mean_in, mean_in_st), 1.0f / D, nullptr);
  dev.reduce_last(tview(mean_got.get(), DType::f32, mean_out, mean_out_st),
                  tview(dy.get(), DType::bf16, mean_in, mean_in_st), 1.0f / D);
  const auto mg = mean_got.download();
  for (std::size_t i = 0; i < mg.size(); ++i) {  // another order: within 2^-20 of the magnitudes
    double mag = 0;
    for (std::int64_t d = 0; d < D; ++d) mag += std::fabs(bf16_to_f32(y[i * sz(D) + sz(d)]));
    ASSERT_NEAR(mg[i], mean_want[i], mag / D * 0x1p-20) << "mean row " << i;
  }
}

// A column sum of many terms (RMSNorm's weight gradient: [rows, cols] bf16 summed over rows)
// runs as 32-column tiles whose row groups are added in a fixed order, not the CPU's ascending
// one: each column within an fp32 summation bound of the exact sum, one bf16 rounding more
// (cols not a multiple of 32: the last tile partial), and the same bits twice.
TEST(CudaTensorOps, AColumnSumOfManyTermsIsExactToItsBoundAndDeterministic) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const std::int64_t rows = 1031, cols = 200;
  const auto x = random_bf16(sz(rows * cols));
  DeviceBuffer<bf16> dx(dev, x), got(dev, sz(cols)), again(dev, sz(cols));
  const TensorView in = tview(dx.get(), DType::bf16, {cols, rows}, {1, cols});
  dev.reduce_last(tview(got.get(), DType::bf16, {cols, 1}, {1, 0}), in, 0.5f);
  dev.reduce_last(tview(again.get(), DType::bf16, {cols, 1}, {1, 0}), in, 0.5f);
  const auto g = got.download();
  expect_within_ulps(again.download(), g, 0, "column sum twice");
  for (std::int64_t c = 0; c < cols; ++c) {
    double exact = 0, mag = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const double v = bf16_to_f32(x[sz(r * cols + c)]);
      exact += v;
      mag += std::fabs(v);
    }
    exact *= 0.5;
    const double bound = 0.5 * mag * rows * 0x1p-24 + std::fabs(exact) * 0x1p-8;
    ASSERT_NEAR(bf16_to_f32(g[sz(c)]), exact, bound)
        << "column " << c << " (seed " << test_seed() << ")";
  }
}

}  // namespace
}  // namespace zob::gpu_test
