// torch.optim.AdamW's foreach step on the xpu backend (src/step/device_adam.hpp: the sub-groups
// DeepSpeed keeps on the device with offload_optimizer.ratio < 1) through the real loader and
// the fake driver, against the CPU reference (cpu_tensor_ops.hpp), bit for bit: each AdamW
// ElementwiseOp on its own (a strided operand, fp32 and bf16 outputs), then three whole steps,
// each kernel of which is replayed on host copies with the reference. With FAKE_ZE_KERNELS=pocl
// (the default) that is tensor.cl's SPIR-V on PoCL, whose sqrt and divisions are IEEE; with
// =cpu (level_zero.fake_driver.decoder_cpu) the fake's launch checks in front of the reference.
// The data come from a fixed seed, printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "backends/cpu/cpu_tensor_ops.hpp"
#include "step/device_adam.hpp"
#include "test_support.hpp"
#include "zob/forwarding_device.hpp"

namespace zob {
namespace {

using test::Buffer;

constexpr unsigned kSeed = 1205;

std::size_t sz(std::int64_t n) { return static_cast<std::size_t>(n); }

template <typename T>
std::size_t count_differing(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return got.size() + want.size();
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    bad += std::memcmp(&got[i], &want[i], sizeof(T)) != 0;
  return bad;
}

std::vector<float> uniform(std::size_t n, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

class LevelZeroAdam : public ::testing::Test {
 protected:
  void SetUp() override {
    std::printf("LevelZeroAdam: seed %u\n", kSeed);
    RecordProperty("seed", std::to_string(kSeed));
  }
  LevelZeroDevice dev{0};
  std::mt19937 rng{kSeed};
};

TEST_F(LevelZeroAdam, EachAdamOpMatchesTheCpuReference) {
  const std::int64_t n = 3001;  // not a multiple of the work-group
  const auto a = uniform(sz(2 * n), 0.01f, 3.0f, rng), b = uniform(sz(n), -3.0f, 3.0f, rng),
             out0 = uniform(sz(n), -3.0f, 3.0f, rng);
  std::vector<bf16> out16(sz(n));
  for (std::size_t i = 0; i < out16.size(); ++i) out16[i] = f32_to_bf16(out0[i]);
  Buffer<float> da(dev, a), db(dev, b);
  using Op = ElementwiseOp;
  struct Case {
    Op op;
    float scalar;
  };
  for (const Case c :
       {Case{Op::lerp, 0.1f}, Case{Op::lerp, 0.8f}, Case{Op::sqrt, 0.0f},
        Case{Op::div_scalar, 0.37f}, Case{Op::addcmul, 1e-3f}, Case{Op::addcdiv, -2.5e-3f}}) {
    SCOPED_TRACE("op " + std::to_string(static_cast<int>(c.op)) + " scalar " +
                 std::to_string(c.scalar));
    // a read every second element; out read back by addcmul / addcdiv.
    std::vector<float> want = out0;
    std::vector<bf16> want16 = out16;
    cpu::elementwise(c.op, vector_view(want.data(), DType::f32, n, 1),
                     vector_view(a.data(), DType::f32, n, 2),
                     vector_view(b.data(), DType::f32, n, 1), c.scalar, nullptr);
    cpu::elementwise(c.op, vector_view(want16.data(), DType::bf16, n, 1),
                     vector_view(a.data(), DType::f32, n, 2),
                     vector_view(b.data(), DType::f32, n, 1), c.scalar, nullptr);
    Buffer<float> got(dev, out0);
    Buffer<bf16> got16(dev, out16);
    dev.elementwise(c.op, vector_view(got.get(), DType::f32, n, 1),
                    vector_view(da.get(), DType::f32, n, 2),
                    vector_view(db.get(), DType::f32, n, 1), c.scalar);
    dev.elementwise(c.op, vector_view(got16.get(), DType::bf16, n, 1),
                    vector_view(da.get(), DType::f32, n, 2),
                    vector_view(db.get(), DType::f32, n, 1), c.scalar);
    EXPECT_EQ(count_differing(got.read(), want), 0u) << "fp32 out";
    EXPECT_EQ(count_differing(got16.read(), want16), 0u) << "bf16 out";
  }
}

// Forwards to the device, and replays each elementwise launch with the CPU reference on the
// host copies of the buffers (views flat from a buffer's start, as device_adamw_step's are).
class Replay : public ForwardingDevice {
 public:
  using ForwardingDevice::ForwardingDevice;
  std::map<const void*, void*> host_of;
  int launches = 0;
  void elementwise(ElementwiseOp op, const TensorView& out, const TensorView& a,
                   const TensorView& b, float scalar) override {
    ForwardingDevice::elementwise(op, out, a, b, scalar);
    cpu::elementwise(op, on_host(out), on_host(a), is_binary(op) ? on_host(b) : b, scalar, nullptr);
    ++launches;
  }

 private:
  void before(const char*) override {}
  TensorView on_host(TensorView v) const {
    v.data = host_of.at(v.data);
    return v;
  }
};

TEST_F(LevelZeroAdam, ThreeStepsMatchTheCpuReferenceKernelByKernel) {
  const std::int64_t n = 5003;
  AdamHyper h;
  h.lr = 1e-3f;
  h.weight_decay = 0.01f;
  std::vector<float> p = uniform(sz(n), -1.0f, 1.0f, rng), g(sz(n)), m(sz(n)), v(sz(n)),
                     temp(sz(n));
  Buffer<float> dp(dev, p), dg(dev, sz(n)), dm(dev, sz(n)), dv(dev, sz(n)), dtemp(dev, sz(n));
  Replay replay(dev);
  replay.host_of = {{dp.get(), p.data()},
                    {dg.get(), g.data()},
                    {dm.get(), m.data()},
                    {dv.get(), v.data()},
                    {dtemp.get(), temp.data()}};
  for (int t = 1; t <= 3; ++t) {
    const std::vector<float> fresh = uniform(sz(n), -0.5f, 0.5f, rng);
    std::copy(fresh.begin(), fresh.end(), g.begin());  // in place: the replay holds g.data()
    g[sz(t)] = 0.0f;    // a zero gradient: v stays small, temp is eps
    dev.synchronize();  // the last step's kernels read the gradient buffer
    dev.copy_to_device(Queue::h2d, dg.get(), g.data(), sz(n) * sizeof(float));
    dev.synchronize();
    step_detail::device_adamw_step(replay, dp.get(), dg.get(), dm.get(), dv.get(), dtemp.get(), n,
                                   t, h);
  }
  EXPECT_EQ(replay.launches, 3 * step_detail::device_adamw_kernels(h));
  EXPECT_EQ(count_differing(dp.read(), p), 0u) << "params";
  EXPECT_EQ(count_differing(dm.read(), m), 0u) << "exp_avg";
  EXPECT_EQ(count_differing(dv.read(), v), 0u) << "exp_avg_sq";
  EXPECT_EQ(count_differing(dtemp.read(), temp), 0u) << "the denominator";
}

}  // namespace
}  // namespace zob
