// The ZeRO-3 step on the CPU device: determinism, arm and loop equivalence, the forward
// against an independent fp64 model, Adam's first move, byte accounting, and that no host
// memory stays locked after run_arm, on success and on failure.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "backends/cpu/cpu_device.hpp"
#include "small_model_config.hpp"
#include "step/step_internal.hpp"
#include "zob/adam.hpp"
#include "zob/bf16.hpp"
#include "zob/errors.hpp"
#include "zob/host_memory.hpp"
#include "zob/model.hpp"
#include "zob/step.hpp"

namespace zob {
namespace {

RunConfig tiny() {
  RunConfig c;
  c.schedule = Schedule::stock;
  c.model = {97, 16, 2};
  c.batch = 2;
  c.seq = 5;
  c.steps = 2;
  c.warmup = 1;
  c.threads = 2;
  c.seed = 7;
  return c;
}

// P = 2*61*8 + 3*(8*64 + 40) = 2632: three sub-groups of <= 1000, pieces of <= 300 (11 pieces).
RunConfig sliced() {
  RunConfig c = test::small_model_config(3, 0, 3, 12345);
  c.sub_group_size = 1000;
  c.chunk_elems = 300;
  return c;
}

ArmResult run(const RunConfig& c, Arm arm = Arm::unregistered,
              std::vector<float>* master = nullptr) {
  CpuDevice dev(2);
  ArmResult r = step_detail::run_arm_capture(c, arm, dev, master);
  EXPECT_EQ(dev.memory_in_use(), 0u);
  return r;
}

std::vector<float> losses(const ArmResult& r) {
  std::vector<float> l;
  for (const auto& s : r.samples) l.push_back(s.loss);
  return l;
}

TEST(Step, DeterministicAndFieldsFilled) {
  for (const RunConfig& c : {tiny(), sliced()}) {
    const ArmResult a = run(c);
    const ArmResult b = run(c);
    ASSERT_TRUE(a.ok);
    EXPECT_EQ(a.param_checksum, b.param_checksum);
    EXPECT_EQ(losses(a), losses(b));
    EXPECT_EQ(a.device, "cpu");
    EXPECT_EQ(a.model, "synthetic-h" + std::to_string(c.model.hidden) + "-l" +
                           std::to_string(c.model.layers));
    EXPECT_EQ(a.params, parameter_count(c.model));
    EXPECT_EQ(a.tokens_per_step, c.batch * c.seq);
    EXPECT_EQ(a.samples.size(), static_cast<std::size_t>(c.warmup + c.steps));
    EXPECT_EQ(a.adam_threads, c.threads);
    EXPECT_EQ(a.loop, "copy_back");
    EXPECT_EQ(a.registration, "none");
    EXPECT_GT(a.gpu_peak_gb, 0);
    EXPECT_GE(a.locked_bytes, 8u * static_cast<std::uint64_t>(a.params));
    double sum = 0, best = 1e30;
    for (int i = c.warmup; i < c.warmup + c.steps; ++i) {
      sum += a.samples[static_cast<std::size_t>(i)].wall_s;
      best = std::min(best, a.samples[static_cast<std::size_t>(i)].wall_s);
    }
    EXPECT_DOUBLE_EQ(a.step_avg_s, sum / c.steps);
    EXPECT_DOUBLE_EQ(a.step_min_s, best);
    for (const auto& s : a.samples) {
      EXPECT_TRUE(std::isfinite(s.loss));
      for (const char* k : {"forward", "backward", "grad_offload", "adam_cast", "copy_back"}) {
        EXPECT_TRUE(s.phases.count(k)) << k;
      }
      EXPECT_EQ(s.phases.at("grad_offload").bytes, 4u * static_cast<std::uint64_t>(a.params));
      std::set<std::string> tracks;
      for (const auto& span : s.spans) {
        tracks.insert(span.track);
        EXPECT_GE(span.start_s, 0);
        EXPECT_GE(span.duration_s, 0);
        EXPECT_LE(span.start_s, s.wall_s);
      }
      EXPECT_EQ(tracks, (std::set<std::string>{"compute", "h2d", "d2h", "cpu_adam"}));
    }
  }
  // The step changes the parameters, so successive losses differ.
  const ArmResult a = run(tiny());
  EXPECT_NE(a.samples[0].loss, a.samples[1].loss);
}

TEST(Step, ArmsAreBitwiseIdentical) {
  for (const RunConfig& c : {tiny(), sliced()}) {
    const ArmResult u = run(c, Arm::unregistered);
    const ArmResult p = run(c, Arm::pageable);
    const ArmResult r = run(c, Arm::registered);
    EXPECT_EQ(u.param_checksum, p.param_checksum);
    EXPECT_EQ(u.param_checksum, r.param_checksum);
    EXPECT_EQ(losses(u), losses(p));
    EXPECT_EQ(losses(u), losses(r));
    EXPECT_EQ(p.locked_bytes, 0u);
    EXPECT_FALSE(r.registration_verified);  // nothing to register on the CPU device
  }
}

TEST(Step, LoopsGiveTheSameMath) {
  for (RunConfig c : {tiny(), sliced()}) {
    const ArmResult cb = run(c);
    c.loop = Loop::offload_param;
    const ArmResult op = run(c);
    EXPECT_EQ(op.loop, "offload_param");
    EXPECT_EQ(cb.param_checksum, op.param_checksum);
    EXPECT_EQ(losses(cb), losses(op));
    for (const auto& s : op.samples) {
      EXPECT_TRUE(s.phases.count("param_fetch"));
      // stock fuses the host cast into Adam: one phase, 30 B/param (Adam's 28 + the bf16)
      EXPECT_TRUE(s.phases.count("adam_cast"));
      EXPECT_FALSE(s.phases.count("adam"));
      EXPECT_FALSE(s.phases.count("host_cast"));
      EXPECT_EQ(s.phases.at("adam_cast").bytes, 30u * static_cast<std::uint64_t>(op.params));
      EXPECT_FALSE(s.phases.count("copy_back"));
      EXPECT_EQ(s.phases.at("param_fetch").bytes, step_traffic(c).param_fetch_h2d);
    }
    // pinned: master + grads + bf16 params
    EXPECT_GE(op.locked_bytes, 10u * static_cast<std::uint64_t>(op.params));
  }
}

TEST(Step, SubGroupsAndPiecesDoNotChangeTheMath) {
  RunConfig one = sliced();
  one.sub_group_size = 1000000000;
  one.chunk_elems = std::int64_t{1} << 26;
  EXPECT_EQ(run(one).param_checksum, run(sliced()).param_checksum);
  RunConfig other_seed = sliced();
  other_seed.seed = 1;
  EXPECT_NE(run(other_seed).param_checksum, run(sliced()).param_checksum);
}

// ---- an independent model of the forward pass, fp64 with the step's bf16 roundings ----

double r16(double v) { return bf16_to_f32(f32_to_bf16(static_cast<float>(v))); }

struct Reference {
  std::vector<std::vector<double>> xs;        // hidden states x_0..x_n, [T][h] flattened
  std::vector<std::vector<double>> pre, act;  // per layer, [T][4h]
  std::vector<double> w;                      // bf16-rounded parameters
  std::vector<double> logits;                 // [T][V]
  double loss = 0, abs_sum = 0;
};

Reference reference_forward(const RunConfig& c) {
  const ModelLayout L = ModelLayout::build(c.model);
  std::vector<float> master(static_cast<std::size_t>(L.total));
  initial_parameters(L, c.seed, master.data());
  Reference ref;
  for (float m : master) ref.w.push_back(r16(m));
  auto w = [&](std::int64_t i) { return ref.w[static_cast<std::size_t>(i)]; };
  const std::int64_t T = c.tokens(), h = c.model.hidden, F = 4 * h, V = c.model.vocab;
  const auto ids = token_ids(T, V, c.seed);
  std::vector<double> x(static_cast<std::size_t>(T * h));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t k = 0; k < h; ++k) x[t * h + k] = w(ids[t] * h + k);
  ref.xs.push_back(x);
  for (std::int64_t l = 0; l < c.model.layers; ++l) {
    const auto& ts = L.modules[static_cast<std::size_t>(l + 1)].tensors;
    const std::int64_t W1 = ts[0].offset, B1 = ts[1].offset, W2 = ts[2].offset, B2 = ts[3].offset;
    std::vector<double> pre(static_cast<std::size_t>(T * F)), act(pre.size()), y(x.size());
    for (std::int64_t t = 0; t < T; ++t) {
      for (std::int64_t f = 0; f < F; ++f) {
        double acc = 0;
        for (std::int64_t k = 0; k < h; ++k) acc += x[t * h + k] * w(W1 + f * h + k);
        const double p = r16(r16(acc) + w(B1 + f));
        pre[t * F + f] = p;
        act[t * F + f] = r16(0.5 * p * (1 + std::erf(p / std::sqrt(2.0))));
      }
      for (std::int64_t o = 0; o < h; ++o) {
        double acc = 0;
        for (std::int64_t f = 0; f < F; ++f) acc += act[t * F + f] * w(W2 + o * F + f);
        y[t * h + o] = r16(r16(acc) + w(B2 + o));
      }
    }
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = r16(x[i] + y[i]);
    ref.xs.push_back(x);
    ref.pre.push_back(pre);
    ref.act.push_back(act);
  }
  const std::int64_t H = L.modules.back().offset;
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t v = 0; v < V; ++v) {
      double acc = 0;
      for (std::int64_t k = 0; k < h; ++k) acc += x[t * h + k] * w(H + v * h + k);
      const double logit = r16(acc);
      ref.logits.push_back(logit);
      ref.loss += logit;
      ref.abs_sum += std::abs(logit);
    }
  }
  return ref;
}

// The gradient of sum(logits) by plain loops over the reference forward, with the step's
// bf16 roundings (every stored tensor rounded once).
std::vector<double> reference_grads(const RunConfig& c, const Reference& ref) {
  const ModelLayout L = ModelLayout::build(c.model);
  const std::int64_t T = c.tokens(), h = c.model.hidden, F = 4 * h, V = c.model.vocab;
  auto w = [&](std::int64_t i) { return ref.w[static_cast<std::size_t>(i)]; };
  std::vector<double> g(static_cast<std::size_t>(L.total), 0.0);
  const std::int64_t H = L.modules.back().offset;
  const auto& xn = ref.xs.back();
  std::vector<double> dy(static_cast<std::size_t>(T * h));
  for (std::int64_t k = 0; k < h; ++k) {
    double col = 0, wsum = 0;
    for (std::int64_t t = 0; t < T; ++t) col += xn[t * h + k];
    for (std::int64_t v = 0; v < V; ++v) wsum += w(H + v * h + k);
    for (std::int64_t v = 0; v < V; ++v) g[H + v * h + k] = r16(col);  // dlogits = 1
    for (std::int64_t t = 0; t < T; ++t) dy[t * h + k] = r16(wsum);
  }
  for (std::int64_t l = c.model.layers - 1; l >= 0; --l) {
    const auto& ts = L.modules[static_cast<std::size_t>(l + 1)].tensors;
    const std::int64_t W1 = ts[0].offset, B1 = ts[1].offset, W2 = ts[2].offset, B2 = ts[3].offset;
    const auto& x = ref.xs[static_cast<std::size_t>(l)];
    const auto& pre = ref.pre[static_cast<std::size_t>(l)];
    const auto& act = ref.act[static_cast<std::size_t>(l)];
    std::vector<double> dpre(static_cast<std::size_t>(T * F));
    for (std::int64_t t = 0; t < T; ++t) {
      for (std::int64_t f = 0; f < F; ++f) {
        double dact = 0;
        for (std::int64_t o = 0; o < h; ++o) dact += dy[t * h + o] * w(W2 + o * F + f);
        const double p = pre[t * F + f];
        const double dgelu = 0.5 * (1 + std::erf(p / std::sqrt(2.0))) +
                             p * std::exp(-0.5 * p * p) / std::sqrt(2 * M_PI);
        dpre[t * F + f] = r16(r16(dact) * dgelu);
      }
    }
    for (std::int64_t o = 0; o < h; ++o) {
      double b = 0;
      for (std::int64_t t = 0; t < T; ++t) b += dy[t * h + o];
      g[B2 + o] = r16(b);
      for (std::int64_t f = 0; f < F; ++f) {
        double acc = 0;
        for (std::int64_t t = 0; t < T; ++t) acc += dy[t * h + o] * act[t * F + f];
        g[W2 + o * F + f] = r16(acc);
      }
    }
    for (std::int64_t f = 0; f < F; ++f) {
      double b = 0;
      for (std::int64_t t = 0; t < T; ++t) b += dpre[t * F + f];
      g[B1 + f] = r16(b);
      for (std::int64_t k = 0; k < h; ++k) {
        double acc = 0;
        for (std::int64_t t = 0; t < T; ++t) acc += dpre[t * F + f] * x[t * h + k];
        g[W1 + f * h + k] = r16(acc);
      }
    }
    for (std::int64_t t = 0; t < T; ++t) {
      for (std::int64_t k = 0; k < h; ++k) {
        double acc = 0;
        for (std::int64_t f = 0; f < F; ++f) acc += dpre[t * F + f] * w(W1 + f * h + k);
        dy[t * h + k] = r16(dy[t * h + k] + r16(acc));
      }
    }
  }
  const auto ids = token_ids(T, V, c.seed);
  std::vector<double> emb(static_cast<std::size_t>(V * h), 0.0);
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t k = 0; k < h; ++k) emb[ids[t] * h + k] += dy[t * h + k];
  for (std::size_t i = 0; i < emb.size(); ++i) g[i] = r16(emb[i]);
  return g;
}

TEST(Step, FirstLossMatchesIndependentForward) {
  for (const RunConfig& c : {tiny(), sliced()}) {
    const Reference ref = reference_forward(c);
    const ArmResult r = run(c);
    // The device accumulates in fp32 where the reference uses fp64: a product sum may then
    // round to the neighbouring bf16 value (2^-8 relative) now and then. Allow 1e-3 of the
    // summed magnitudes; any layout or transposition error moves the loss by O(abs_sum).
    EXPECT_NEAR(r.samples[0].loss, ref.loss, 1e-3 * ref.abs_sum) << "abs_sum " << ref.abs_sum;
    EXPECT_GT(ref.abs_sum, 1.0);
  }
}

TEST(Step, FirstAdamStepMovesEachElementByAboutLr) {
  RunConfig c = tiny();
  c.steps = 1;
  c.warmup = 0;
  const ModelLayout L = ModelLayout::build(c.model);
  std::vector<float> before(static_cast<std::size_t>(L.total)), after;
  initial_parameters(L, c.seed, before.data());
  run(c, Arm::unregistered, &after);
  ASSERT_EQ(after.size(), before.size());
  const double lr = AdamHyper{}.lr;
  const double slack = 1e-7;  // fp32 rounding of p - lr at |p| <= 0.5
  // Bias-corrected first step: |delta| = lr * |g| / (|g| + eps), i.e. lr unless g == 0.
  const auto ids = token_ids(c.tokens(), c.model.vocab, c.seed);
  const std::set<std::int32_t> seen(ids.begin(), ids.end());
  std::int64_t moved = 0;
  for (std::int64_t i = 0; i < L.total; ++i) {
    const double d = static_cast<double>(after[i]) - before[i];
    ASSERT_LE(std::abs(d), lr + slack) << i;
    if (i < L.modules[0].count && !seen.count(static_cast<std::int32_t>(i / c.model.hidden))) {
      EXPECT_EQ(d, 0.0) << "embedding row of an unseen token moved, element " << i;
    }
    if (std::abs(std::abs(d) - lr) <= 1e-3 * lr + slack) ++moved;
  }
  const std::int64_t unseen_rows = c.model.vocab - static_cast<std::int64_t>(seen.size());
  EXPECT_GE(moved, (L.total - unseen_rows * c.model.hidden) * 95 / 100);
  // Head gradient, derived independently: dlogits = 1, so dW[v][k] = sum_t x_n[t][k] for every
  // row v, and Adam's first step moves against its sign.
  const Reference ref = reference_forward(c);
  const auto& xn = ref.xs.back();
  const std::int64_t h = c.model.hidden, H = L.modules.back().offset;
  int checked = 0;
  for (std::int64_t k = 0; k < h; ++k) {
    double g = 0, mag = 0;
    for (std::int64_t t = 0; t < c.tokens(); ++t) {
      g += xn[t * h + k];
      mag += std::abs(xn[t * h + k]);
    }
    if (std::abs(g) < 0.05 * mag) continue;  // too close to 0 to trust the sign under bf16
    ++checked;
    for (std::int64_t v = 0; v < c.model.vocab; ++v) {
      const double d = static_cast<double>(after[H + v * h + k]) - before[H + v * h + k];
      ASSERT_LT(d * g, 0) << "head[" << v << "][" << k << "]";
    }
  }
  EXPECT_GT(checked, h / 2);
}

// Adam's first step moves every element against the sign of its gradient: compare that sign
// with an independent fp64 backward, tensor by tensor, on both shapes and both loops.
TEST(Step, FirstStepFollowsIndependentGradients) {
  for (RunConfig c : {tiny(), sliced()}) {
    for (Loop loop : {Loop::copy_back, Loop::offload_param}) {
      c.loop = loop;
      c.steps = 1;
      c.warmup = 0;
      const ModelLayout L = ModelLayout::build(c.model);
      std::vector<float> before(static_cast<std::size_t>(L.total)), after;
      initial_parameters(L, c.seed, before.data());
      run(c, Arm::unregistered, &after);
      const Reference ref = reference_forward(c);
      const std::vector<double> g = reference_grads(c, ref);
      for (const auto& m : L.modules) {
        for (const auto& t : m.tensors) {
          double ss = 0;
          for (std::int64_t i = t.offset; i < t.offset + t.count(); ++i) ss += g[i] * g[i];
          const double rms = std::sqrt(ss / static_cast<double>(t.count()));
          ASSERT_GT(rms, 0) << t.name;
          std::int64_t checked = 0, wrong = 0;
          for (std::int64_t i = t.offset; i < t.offset + t.count(); ++i) {
            // Near-zero gradients may flip sign under the fp32-vs-fp64 accumulation.
            if (std::abs(g[i]) < 0.1 * rms) continue;
            ++checked;
            const double d = static_cast<double>(after[i]) - before[i];
            wrong += !(d * g[i] < 0);
          }
          const std::int64_t nonzero_rows_share =
              (&t == &L.modules[0].tensors[0]) ? 10 : 2;  // the embedding has few live rows
          EXPECT_GE(checked, t.count() / nonzero_rows_share / 2) << t.name;
          EXPECT_LE(wrong, checked / 200) << t.name << ": " << wrong << " of " << checked;
        }
      }
    }
  }
}

TEST(Step, PlanAndTrafficMatchHandFormulas) {
  for (Loop loop : {Loop::copy_back, Loop::offload_param}) {
    RunConfig c = sliced();
    c.loop = loop;
    const std::uint64_t P = 2632, T = 12, h = 8, F = 32, V = 61, n = 3;
    const std::uint64_t biggest = 8 * h * h + 5 * h;  // a layer (552) outweighs V*h (488)
    const StepTraffic t = step_traffic(c);
    EXPECT_EQ(t.grad_offload_d2h, 4 * P);
    EXPECT_EQ(t.adam_bytes, 30 * P);  // Adam fused with the cast to bf16
    EXPECT_EQ(t.copy_back_h2d, loop == Loop::copy_back ? 2 * P : 0);  // the bf16 parameters
    EXPECT_EQ(t.param_fetch_h2d, loop == Loop::copy_back ? 0 : 2 * (P + (P - V * h)));
    const MemoryPlan m = plan_memory(c);
    EXPECT_EQ(m.host_pinned_bytes, 10 * P);  // master, gradients and the bf16 parameters
    EXPECT_EQ(m.host_pageable_bytes, 8 * P);
    // copy_back: the resident parameters (no fp32 temporary: the copy-back copies bf16)
    const std::uint64_t params = loop == Loop::copy_back ? 2 * P : 2 * 2 * biggest;
    const std::uint64_t acts =
        2 * ((n + 1) * T * h + 2 * n * T * F) + 2 * T * V + 2 * 2 * T * h + 2 * 2 * T * F;
    EXPECT_EQ(m.device_bytes, params + 2 * 6 * biggest + acts + 4 * (4 * T + 1) + 4);
    // The device really stays within the plan (allocation rounding aside).
    CpuDevice dev(2);
    run_arm(c, Arm::unregistered, dev);
    EXPECT_LE(dev.memory_peak(), m.device_bytes + 64 * 256);
    EXPECT_GE(dev.memory_peak(), m.device_bytes - 4 * 4 * T);
  }
  RunConfig defaults;
  defaults.schedule = Schedule::stock;
  EXPECT_EQ(plan_memory(defaults).host_pinned_bytes, 10ull * 533848064);
}

// ---- failure paths: a CpuDevice that throws on the N-th allocation or the N-th gemm ----

class FailingDevice : public CpuDevice {
 public:
  FailingDevice(int fail_alloc, int fail_gemm)
      : CpuDevice(2), fail_alloc_(fail_alloc), fail_gemm_(fail_gemm) {}
  void* allocate(std::size_t bytes) override {
    if (++allocs_ == fail_alloc_) {
      throw DeviceError(DeviceErrorKind::out_of_memory, "test: allocation refused");
    }
    return CpuDevice::allocate(bytes);
  }
  void gemm(const GemmArgs& a) override {
    if (++gemms_ == fail_gemm_) throw DeviceError(DeviceErrorKind::runtime, "test: gemm failed");
    CpuDevice::gemm(a);
  }
  int allocs_ = 0, gemms_ = 0;

 private:
  int fail_alloc_, fail_gemm_;
};

TEST(Step, NothingStaysLockedOrAllocated) {
  for (Arm arm : {Arm::unregistered, Arm::registered, Arm::pageable}) {
    for (Loop loop : {Loop::copy_back, Loop::offload_param}) {
      RunConfig c = tiny();
      c.loop = loop;
      run(c, arm);
      EXPECT_EQ(host_memory_counters().locked_bytes, 0u);
      EXPECT_EQ(host_memory_counters().registered_bytes, 0u);
      int allocations = 0;
      {
        FailingDevice probe(-1, -1);
        run_arm(c, arm, probe);
        allocations = probe.allocs_;
      }
      ASSERT_GT(allocations, 10);
      for (int n = 1; n <= allocations; ++n) {
        FailingDevice dev(n, -1);
        EXPECT_THROW(run_arm(c, arm, dev), DeviceError) << n;
        EXPECT_EQ(dev.memory_in_use(), 0u) << n;
        EXPECT_EQ(host_memory_counters().locked_bytes, 0u) << n;
        EXPECT_EQ(host_memory_counters().registered_bytes, 0u) << n;
      }
      FailingDevice mid_step(-1, 25);  // 15 gemms a step: inside the second step's backward
      EXPECT_THROW(run_arm(c, arm, mid_step), DeviceError);
      EXPECT_EQ(mid_step.memory_in_use(), 0u);
      EXPECT_EQ(host_memory_counters().locked_bytes, 0u);
    }
  }
}

TEST(Step, ProgressLinePerStep) {
  testing::internal::CaptureStderr();
  run(tiny(), Arm::pageable);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("[pageable] step 1/3 (warmup): "), std::string::npos) << err;
  EXPECT_NE(err.find("[pageable] step 3/3 (timed): "), std::string::npos) << err;
  EXPECT_NE(err.find(" s  loss "), std::string::npos) << err;
}

TEST(Step, RejectsBadSizes) {
  RunConfig c = tiny();
  c.chunk_elems = 0;
  CpuDevice dev(1);
  EXPECT_THROW(run_arm(c, Arm::pageable, dev), UsageError);
}

}  // namespace
}  // namespace zob
