// torch.optim.AdamW's foreach step on the CUDA device (src/step/device_adam.hpp: the sub-groups
// DeepSpeed keeps on the GPU with offload_optimizer.ratio < 1) against the CPU reference, bit
// for bit: each AdamW ElementwiseOp on its own (a strided operand; fp32 and bf16 outputs; lerp
// on both sides of its 0.5 switch), then three whole steps with weight decay against the same
// steps on the CPU device, at a size of many blocks and not a multiple of any tile. Bit-exact
// because the kernels round each product and sum alone (__fmul_rn / __fadd_rn) and use the
// IEEE sqrt and division (__fsqrt_rn / __fdiv_rn), as the CPU does; the gradient unscale
// (device_scale) likewise. Fresh data per run; the seed is printed (ZOB_TEST_SEED replays it).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "backends/cpu/cpu_device.hpp"
#include "backends/cpu/cpu_tensor_ops.hpp"
#include "gpu_test_util.hpp"
#include "step/device_adam.hpp"
#include "zob/device.hpp"

namespace zob::gpu_test {
namespace {

std::size_t sz(std::int64_t n) { return static_cast<std::size_t>(n); }

template <typename T>
std::size_t count_differing(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return got.size() + want.size();
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    bad += std::memcmp(&got[i], &want[i], sizeof(T)) != 0;
  return bad;
}

std::vector<float> positive(std::vector<float> v) {
  for (auto& x : v) x = std::fabs(x) + 1e-3f;
  return v;
}

TEST(CudaAdam, EachAdamOpMatchesTheCpuReference) {
  ZOB_REQUIRE_GPU();
  std::printf("CudaAdam: seed %llu\n", static_cast<unsigned long long>(test_seed()));
  auto& dev = gpu();
  const std::int64_t n = (1 << 20) + 3;
  const auto a = positive(random_f32(sz(2 * n))), b = random_f32(sz(n)), out0 = random_f32(sz(n));
  std::vector<bf16> out16(sz(n));
  for (std::size_t i = 0; i < out16.size(); ++i) out16[i] = f32_to_bf16(out0[i]);
  DeviceBuffer<float> da(dev, a), db(dev, b);
  using Op = ElementwiseOp;
  const std::pair<Op, float> cases[] = {{Op::lerp, 0.1f},     {Op::lerp, 0.8f},
                                        {Op::sqrt, 0.f},      {Op::div_scalar, 0.37f},
                                        {Op::addcmul, 1e-3f}, {Op::addcdiv, -2.5e-3f}};
  for (const auto& [op, scalar] : cases) {
    SCOPED_TRACE("op " + std::to_string(static_cast<int>(op)) + " (seed " +
                 std::to_string(test_seed()) + ")");
    std::vector<float> want = out0;
    std::vector<bf16> want16 = out16;
    cpu::elementwise(op, vector_view(want.data(), DType::f32, n, 1),
                     vector_view(a.data(), DType::f32, n, 2),
                     vector_view(b.data(), DType::f32, n, 1), scalar, nullptr);
    cpu::elementwise(op, vector_view(want16.data(), DType::bf16, n, 1),
                     vector_view(a.data(), DType::f32, n, 2),
                     vector_view(b.data(), DType::f32, n, 1), scalar, nullptr);
    DeviceBuffer<float> got(dev, out0);
    DeviceBuffer<bf16> got16(dev, out16);
    dev.elementwise(op, vector_view(got.get(), DType::f32, n, 1),
                    vector_view(da.get(), DType::f32, n, 2),
                    vector_view(db.get(), DType::f32, n, 1), scalar);
    dev.elementwise(op, vector_view(got16.get(), DType::bf16, n, 1),
                    vector_view(da.get(), DType::f32, n, 2),
                    vector_view(db.get(), DType::f32, n, 1), scalar);
    EXPECT_EQ(count_differing(got.download(), want), 0u) << "fp32 out";
    EXPECT_EQ(count_differing(got16.download(), want16), 0u) << "bf16 out";
  }
}

TEST(CudaAdam, ThreeStepsAndTheUnscaleMatchTheCpuDevice) {
  ZOB_REQUIRE_GPU();
  std::printf("CudaAdam: seed %llu\n", static_cast<unsigned long long>(test_seed()));
  auto& dev = gpu();
  CpuDevice cpu(4);
  const std::int64_t n = 3 * (1 << 20) + 5;
  AdamHyper h;
  h.lr = 1e-3f;
  h.weight_decay = 0.01f;
  std::vector<float> p = random_f32(sz(n)), m(sz(n), 0.0f), v(sz(n), 0.0f), temp(sz(n));
  DeviceBuffer<float> dp(dev, p), dg(dev, sz(n)), dm(dev, m), dv(dev, v), dtemp(dev, sz(n));
  const float unscale = static_cast<float>(1.0 / 1024.0);
  for (int t = 1; t <= 3; ++t) {
    std::vector<float> g = random_f32(sz(n), 300.0f);  // a loss-scaled gradient
    dg.upload(g);
    step_detail::device_scale(dev, dg.get(), n, unscale);
    step_detail::device_scale(cpu, g.data(), n, unscale);
    step_detail::device_adamw_step(dev, dp.get(), dg.get(), dm.get(), dv.get(), dtemp.get(), n, t,
                                   h);
    step_detail::device_adamw_step(cpu, p.data(), g.data(), m.data(), v.data(), temp.data(), n, t,
                                   h);
    EXPECT_EQ(count_differing(dg.download(), g), 0u) << "unscaled gradient, step " << t;
  }
  EXPECT_EQ(count_differing(dp.download(), p), 0u) << "params (seed " << test_seed() << ")";
  EXPECT_EQ(count_differing(dm.download(), m), 0u) << "exp_avg";
  EXPECT_EQ(count_differing(dv.download(), v), 0u) << "exp_avg_sq";
  EXPECT_EQ(count_differing(dtemp.download(), temp), 0u) << "the denominator";
}

}  // namespace
}  // namespace zob::gpu_test
