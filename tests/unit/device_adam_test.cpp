// device_adamw_step (src/step/device_adam.hpp) on the CPU device: torch.optim.AdamW's foreach
// step, kernel by kernel. Against a scalar reference written here in the same fp32 evaluation
// order from the hyperparameters' own decimal doubles (bit-exact, steps 1..3, with and without
// weight decay, lerp's both branches), the reference itself checked against the update in
// double; against the tool's CPU Adam (zob/adam.hpp: the same math, other roundings) within a
// tolerance that a swapped formula exceeds; the kernels it launches, in torch's order, against
// device_adamw_kernels and device_adamw_bytes; and the new ElementwiseOps one by one. The data
// come from a fixed seed, printed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.hpp"
#include "step/device_adam.hpp"
#include "zob/adam.hpp"
#include "zob/forwarding_device.hpp"
#include "zob/thread_pool.hpp"

namespace zob {
namespace {

using step_detail::device_adamw_bytes;
using step_detail::device_adamw_kernels;
using step_detail::device_adamw_step;

constexpr std::uint64_t kSeed = 20261205;

std::mt19937_64 seeded(const char* what) {
  std::printf("%s: seed %llu\n", what, static_cast<unsigned long long>(kSeed));
  ::testing::Test::RecordProperty("seed", std::to_string(kSeed));
  return std::mt19937_64(kSeed);
}

// The hyperparameters as a DeepSpeed config writes them (Python doubles), and as AdamHyper
// keeps them (floats).
struct Hyper {
  double lr, beta1, beta2, eps, weight_decay;
  AdamHyper as_float() const {
    AdamHyper h;
    h.lr = static_cast<float>(lr);
    h.beta1 = static_cast<float>(beta1);
    h.beta2 = static_cast<float>(beta2);
    h.eps = static_cast<float>(eps);
    h.weight_decay = static_cast<float>(weight_decay);
    return h;
  }
};

struct Tensors {
  std::vector<float> p, g, m, v;
};

// params in (-1, 1); gradients over five decades with random signs and a few exact zeros.
std::vector<float> random_grads(std::size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(-1.0, 1.0), decade(-4.0, 1.0);
  std::vector<float> g(n);
  for (auto& x : g)
    x = rng() % 17 == 0 ? 0.0f : static_cast<float>(unit(rng) * std::pow(10.0, decade(rng)));
  return g;
}

Tensors fresh(std::size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  Tensors s{std::vector<float>(n), {}, std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f)};
  for (auto& x : s.p) x = unit(rng);
  return s;
}

// _multi_tensor_adam's update of one element in fp32, the kernels' order, scalars from h's
// doubles as Python computes them.
void reference_step(float& p, float g, float& m, float& v, int t, const Hyper& h) {
  if (h.weight_decay != 0) p = p * static_cast<float>(1.0 - h.lr * h.weight_decay);
  const float w = static_cast<float>(1.0 - h.beta1);
  m = std::fabs(w) < 0.5f ? m + w * (g - m) : g - (g - m) * (1.0f - w);
  v = v * static_cast<float>(h.beta2);
  v = v + static_cast<float>(1.0 - h.beta2) * (g * g);
  const double bc1 = 1.0 - std::pow(h.beta1, t), bc2 = 1.0 - std::pow(h.beta2, t);
  float d = std::sqrt(v);
  d = d / static_cast<float>(std::pow(bc2, 0.5));
  d = d + static_cast<float>(h.eps);
  p = p + static_cast<float>(-(h.lr / bc1)) * (m / d);
}

// The same update in double from the same fp32 inputs (the reference's own check).
void double_step(double& p, double g, double& m, double& v, int t, const Hyper& h) {
  p *= 1.0 - h.lr * h.weight_decay;
  m = h.beta1 * m + (1.0 - h.beta1) * g;
  v = h.beta2 * v + (1.0 - h.beta2) * g * g;
  const double bc1 = 1.0 - std::pow(h.beta1, t), bc2 = 1.0 - std::pow(h.beta2, t);
  p -= h.lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + h.eps);
}

std::size_t count_differing_bits(const std::vector<float>& got, const std::vector<float>& want) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    bad += std::memcmp(&got[i], &want[i], sizeof(float)) != 0;
  return bad;
}

const Hyper kPlain{1e-3, 0.9, 0.999, 1e-8, 0.0};
const Hyper kDecay{1e-3, 0.9, 0.999, 1e-8, 0.01};
const Hyper kBigLerpWeight{2e-3, 0.3, 0.99, 1e-6, 0.1};  // 1 - beta1 = 0.7: lerp's other branch

TEST(DeviceAdam, StepsMatchTheFp32ReferenceBitForBit) {
  auto rng = seeded("DeviceAdam.StepsMatchTheFp32ReferenceBitForBit");
  CpuDevice dev(2);
  for (const Hyper& h : {kPlain, kDecay, kBigLerpWeight}) {
    for (const std::size_t n : {std::size_t{1}, std::size_t{13}, std::size_t{12347}}) {
      SCOPED_TRACE("n " + std::to_string(n) + ", beta1 " + std::to_string(h.beta1) + ", wd " +
                   std::to_string(h.weight_decay));
      Tensors got = fresh(n, rng);
      Tensors want = got;
      std::vector<double> dp(got.p.begin(), got.p.end()), dm(n, 0.0), dv(n, 0.0);
      std::vector<double> m_scale(n, 0.0);  // m's terms in magnitude: its roundings' size
      std::vector<float> temp(n);
      for (int t = 1; t <= 3; ++t) {
        const std::vector<float> g = random_grads(n, rng);
        device_adamw_step(dev, got.p.data(), g.data(), got.m.data(), got.v.data(), temp.data(),
                          static_cast<std::int64_t>(n), t, h.as_float());
        for (std::size_t i = 0; i < n; ++i) {
          reference_step(want.p[i], g[i], want.m[i], want.v[i], t, h);
          double_step(dp[i], g[i], dm[i], dv[i], t, h);
          m_scale[i] = h.beta1 * m_scale[i] + (1.0 - h.beta1) * std::fabs(g[i]);
        }
        EXPECT_EQ(count_differing_bits(got.p, want.p), 0u) << "params, step " << t;
        EXPECT_EQ(count_differing_bits(got.m, want.m), 0u) << "exp_avg, step " << t;
        EXPECT_EQ(count_differing_bits(got.v, want.v), 0u) << "exp_avg_sq, step " << t;
      }
      // The fp32 reference is the update: within a few roundings per step of the double one
      // (each step's change to p is ~lr, so 3 steps of fp32 roundings are far below 1e-5).
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_NEAR(want.p[i], dp[i], 1e-6 + 1e-6 * std::fabs(dp[i])) << i;
        ASSERT_NEAR(want.m[i], dm[i], 1e-6 * m_scale[i] + 1e-30) << i;
        ASSERT_NEAR(want.v[i], dv[i], 1e-5 * std::fabs(dv[i]) + 1e-37) << i;
      }
    }
  }
}

// The tool's CPU Adam (DeepSpeedCPUAdam's b1*m + (1-b1)*g, from float hyperparameters) and
// torch's foreach AdamW are the same update: after three steps they agree to a small part of
// the update (1 - 0.999f is 1.3e-5 off 1 - 0.999), while b1 and 1 - b1 swapped, or a missing
// bias correction, are off by most of it.
TEST(DeviceAdam, AgreesWithTheCpuAdamWithinRounding) {
  auto rng = seeded("DeviceAdam.AgreesWithTheCpuAdamWithinRounding");
  CpuDevice dev(2);
  ThreadPool pool(2);
  const std::size_t n = 12347;
  for (const Hyper& h : {kPlain, kDecay}) {
    Tensors dev_s = fresh(n, rng);
    Tensors cpu_s = dev_s;
    std::vector<double> moved(n, 0.0), m_scale(n, 0.0);  // |each step's change| summed
    std::vector<float> temp(n);
    for (int t = 1; t <= 3; ++t) {
      const std::vector<float> g = random_grads(n, rng), p_before = cpu_s.p;
      device_adamw_step(dev, dev_s.p.data(), g.data(), dev_s.m.data(), dev_s.v.data(), temp.data(),
                        static_cast<std::int64_t>(n), t, h.as_float());
      adam_step(cpu_s.p.data(), g.data(), cpu_s.m.data(), cpu_s.v.data(),
                static_cast<std::int64_t>(n), t, h.as_float(), pool);
      for (std::size_t i = 0; i < n; ++i) {
        moved[i] += std::fabs(static_cast<double>(cpu_s.p[i]) - p_before[i]);
        m_scale[i] = h.beta1 * m_scale[i] + (1.0 - h.beta1) * std::fabs(g[i]);
      }
    }
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double tol = 2e-3 * moved[i] + 2.5e-7 * std::fabs(cpu_s.p[i]);
      bad += !(std::fabs(static_cast<double>(dev_s.p[i]) - cpu_s.p[i]) <= tol);
      bad += !(std::fabs(dev_s.m[i] - cpu_s.m[i]) <= 1e-6 * m_scale[i] + 1e-30);
      bad += !(std::fabs(dev_s.v[i] - cpu_s.v[i]) <= 1e-4 * std::fabs(cpu_s.v[i]) + 1e-37);
    }
    EXPECT_EQ(bad, 0u) << "weight decay " << h.weight_decay;
  }
}

// A wrapper that records each elementwise launch: its op, scalar and the arrays it reads.
class Recorder : public ForwardingDevice {
 public:
  using ForwardingDevice::ForwardingDevice;
  struct Launch {
    ElementwiseOp op;
    float scalar;
    std::set<const void*> reads;  // out is written besides
  };
  std::vector<Launch> launches;
  int other_calls = 0;
  void elementwise(ElementwiseOp op, const TensorView& out, const TensorView& a,
                   const TensorView& b, float scalar) override {
    std::set<const void*> reads{a.data};
    if (is_binary(op)) reads.insert(b.data);
    if (reads_out(op)) reads.insert(out.data);
    launches.push_back({op, scalar, reads});
    ForwardingDevice::elementwise(op, out, a, b, scalar);
  }

 private:
  void before(const char* member) override {
    if (std::string(member) != "elementwise") ++other_calls;
  }
};

TEST(DeviceAdam, LaunchesTorchsKernelsInOrderAndCountsThem) {
  CpuDevice cpu(1);
  const std::int64_t n = 37;
  std::vector<float> p(n, 0.5f), g(n, 0.25f), m(n, 0.0f), v(n, 0.0f), temp(n);
  using Op = ElementwiseOp;
  for (const Hyper& h : {kPlain, kDecay}) {
    Recorder dev(cpu);
    device_adamw_step(dev, p.data(), g.data(), m.data(), v.data(), temp.data(), n, 2, h.as_float());
    std::vector<Op> want{Op::lerp,       Op::mul_scalar, Op::addcmul, Op::sqrt,
                         Op::div_scalar, Op::add_scalar, Op::addcdiv};
    if (h.weight_decay != 0) want.insert(want.begin(), Op::mul_scalar);
    ASSERT_EQ(dev.launches.size(), want.size());
    EXPECT_EQ(static_cast<int>(dev.launches.size()), device_adamw_kernels(h.as_float()));
    EXPECT_EQ(dev.other_calls, 0) << "the step is its kernels alone (no allocation, no wait)";
    std::uint64_t bytes = 0;
    for (std::size_t k = 0; k < want.size(); ++k) {
      EXPECT_EQ(dev.launches[k].op, want[k]) << "kernel " << k;
      bytes += (dev.launches[k].reads.size() + 1) * sizeof(float) * static_cast<std::uint64_t>(n);
    }
    EXPECT_EQ(bytes, device_adamw_bytes(n, h.as_float()));
    // Step 2's scalars, as Python computes them and casts them to float.
    const auto& last = dev.launches.back();
    EXPECT_EQ(last.scalar, static_cast<float>(-(1e-3 / (1.0 - 0.9 * 0.9))));
    EXPECT_EQ(dev.launches[want.size() - 3].scalar,
              static_cast<float>(std::pow(1.0 - std::pow(0.999, 2.0), 0.5)));
    EXPECT_EQ(dev.launches[want.size() - 5].scalar, static_cast<float>(1.0 - 0.999));
  }
  EXPECT_EQ(device_adamw_bytes(n, kPlain.as_float()), 72u * n);
  EXPECT_EQ(device_adamw_bytes(n, kDecay.as_float()), 80u * n);
  EXPECT_EQ(device_adamw_bytes(0, kDecay.as_float()), 0u);
}

TEST(DeviceAdam, RefusesAStepBeforeTheFirstAndANegativeSize) {
  CpuDevice dev(1);
  float x = 0;
  EXPECT_THROW(device_adamw_step(dev, &x, &x, &x, &x, &x, 1, 0, AdamHyper{}),
               std::invalid_argument);
  EXPECT_THROW(device_adamw_step(dev, &x, &x, &x, &x, &x, -1, 1, AdamHyper{}),
               std::invalid_argument);
  EXPECT_THROW(step_detail::device_scale(dev, &x, -1, 1.0f), std::invalid_argument);
}

TEST(DeviceAdam, ScaleIsOneFp32Multiply) {
  auto rng = seeded("DeviceAdam.ScaleIsOneFp32Multiply");
  CpuDevice dev(2);
  std::vector<float> x = random_grads(9001, rng);
  x[3] = NAN;
  const std::vector<float> before = x;
  const float scale = static_cast<float>(1.0 / 65536.0 * 3.0);
  Recorder counted(dev);
  step_detail::device_scale(counted, x.data(), static_cast<std::int64_t>(x.size()), scale);
  EXPECT_EQ(counted.launches.size(), 1u);
  std::vector<float> want(before.size());
  for (std::size_t i = 0; i < before.size(); ++i) want[i] = before[i] * scale;
  EXPECT_EQ(count_differing_bits(x, want), 0u);
}

TEST(DeviceAdam, PythonDoubleIsTheConfigsDecimal) {
  using step_detail::python_double;
  EXPECT_EQ(python_double(0.9f), 0.9);
  EXPECT_EQ(python_double(0.999f), 0.999);
  EXPECT_EQ(python_double(1e-8f), 1e-8);
  EXPECT_EQ(python_double(3e-4f), 3e-4);
  EXPECT_EQ(python_double(0.0f), 0.0);
  EXPECT_TRUE(std::isinf(python_double(INFINITY)));
  // A float that no short decimal names reads back as itself.
  const float odd = std::nextafter(0.1f, 1.0f);
  EXPECT_EQ(static_cast<float>(python_double(odd)), odd);
}

// The formula device.hpp gives op, written out here (x: a, y: b, o: out's old value).
float formula(ElementwiseOp op, float x, float y, float o, float s) {
  switch (op) {
    case ElementwiseOp::lerp:
      return std::fabs(s) < 0.5f ? x + s * (y - x) : y - (y - x) * (1.0f - s);
    case ElementwiseOp::sqrt: return std::sqrt(x);
    case ElementwiseOp::div_scalar: return x / s;
    case ElementwiseOp::addcmul: return o + s * (x * y);
    case ElementwiseOp::addcdiv: return o + s * (x / y);
    default: ADD_FAILURE() << "not an AdamW op"; return 0.0f;
  }
}

// Each new op is its formula of device.hpp, on a strided a, into fp32 and into bf16 (one
// rounding; a bf16 out is read as its bf16 value), with out read where the op says so; lerp on
// both sides of its 0.5 switch; a division by zero gives IEEE's inf.
TEST(DeviceAdam, EachNewOpIsItsFormula) {
  auto rng = seeded("DeviceAdam.EachNewOpIsItsFormula");
  CpuDevice dev(2);
  const std::int64_t n = 5003;
  std::uniform_real_distribution<float> pos(0.05f, 4.0f), any(-4.0f, 4.0f);
  std::vector<float> a(2 * n), b(n), out0(n);
  for (auto& x : a) x = pos(rng);
  for (auto& x : b) x = any(rng);
  for (auto& x : out0) x = any(rng);
  b[7] = 0.0f;
  using Op = ElementwiseOp;
  const std::pair<Op, float> cases[] = {
      {Op::lerp, 0.1f},        {Op::lerp, 0.75f},    {Op::lerp, -0.6f},      {Op::sqrt, 0.0f},
      {Op::div_scalar, 0.37f}, {Op::addcmul, 1e-3f}, {Op::addcdiv, -2.5e-3f}};
  for (const auto& [op, scalar] : cases) {
    SCOPED_TRACE("op " + std::to_string(static_cast<int>(op)) + " scalar " +
                 std::to_string(scalar));
    std::vector<float> got = out0, want(n);
    std::vector<bf16> got16(n), want16(n);
    for (std::int64_t i = 0; i < n; ++i) {
      want[i] = formula(op, a[2 * i], b[i], out0[i], scalar);
      got16[i] = f32_to_bf16(out0[i]);
      want16[i] = f32_to_bf16(formula(op, a[2 * i], b[i], bf16_to_f32(got16[i]), scalar));
    }
    const TensorView va = vector_view(a.data(), DType::f32, n, 2),
                     vb = vector_view(b.data(), DType::f32, n, 1);
    dev.elementwise(op, vector_view(got.data(), DType::f32, n, 1), va, vb, scalar);
    dev.elementwise(op, vector_view(got16.data(), DType::bf16, n, 1), va, vb, scalar);
    EXPECT_EQ(count_differing_bits(got, want), 0u) << "fp32 out";
    std::size_t bad16 = 0;
    for (std::int64_t i = 0; i < n; ++i) bad16 += got16[i].bits != want16[i].bits;
    EXPECT_EQ(bad16, 0u) << "bf16 out";
  }
}

// addcmul in place over its own a (out and a the same view), which the step never does but the
// interface allows; an op past the last is refused.
TEST(DeviceAdam, AddcmulMayReadOutAsA) {
  CpuDevice dev(1);
  const std::int64_t n = 101;
  std::vector<float> v(n), b(n), want(n);
  for (std::int64_t i = 0; i < n; ++i) v[i] = 0.25f * i - 3.0f, b[i] = 1.0f / (i + 1.0f);
  for (std::int64_t i = 0; i < n; ++i) want[i] = v[i] + 0.5f * (v[i] * b[i]);
  const TensorView vv = vector_view(v.data(), DType::f32, n, 1);
  dev.elementwise(ElementwiseOp::addcmul, vv, vv, vector_view(b.data(), DType::f32, n, 1), 0.5f);
  EXPECT_EQ(count_differing_bits(v, want), 0u);
  const auto past = static_cast<ElementwiseOp>(static_cast<int>(kLastElementwiseOp) + 1);
  EXPECT_EQ(elementwise_problem(past, vv, vv, TensorView{}), "unknown op");
}

}  // namespace
}  // namespace zob
