// ZeRO-3 partitioning on the CPU device, every schedule and loop: one rank reproduces run_arm
// bit for bit; two and three forked ranks reproduce an in-test single-process reference that
// sums the ranks' micro-batch gradients (fp32, rank order) and applies Adam to the whole
// master; the host waits a rank's step issues are the one-GPU plan's, not one per operation.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/cpu_device.hpp"
#include "collectives/shm_collectives.hpp"
#include "small_model_config.hpp"
#include "step/deepspeed/deepspeed_plan.hpp"
#include "step/ranks/partitioned_step.hpp"
#include "step/step_internal.hpp"
#include "step/whatif/overlap.hpp"
#include "zob/adam.hpp"
#include "zob/bf16.hpp"
#include "zob/errors.hpp"
#include "zob/model.hpp"
#include "zob/step.hpp"
#include "zob/thread_pool.hpp"

namespace zob {
namespace {

RunConfig tiny(Schedule schedule = Schedule::stock, Loop loop = Loop::copy_back) {
  RunConfig c = test::small_model_config(2, 1, 2, 4242);  // P = 2632
  c.sub_group_size = 1000;
  c.chunk_elems = 300;
  c.schedule = schedule;
  c.loop = loop;
  return c;
}

// The CPU device, counting the host's waits for the device.
class CountingCpuDevice final : public CpuDevice {
 public:
  using CpuDevice::CpuDevice;
  void event_synchronize(DeviceEvent& event) override {
    ++waits;
    CpuDevice::event_synchronize(event);
  }
  void synchronize() override { ++waits; }
  std::int64_t waits = 0;
};

struct Plan {
  Schedule schedule;
  Loop loop;
};
std::string plan_name(const ::testing::TestParamInfo<Plan>& info) {
  return std::string(to_string(info.param.schedule)) + "_" +
         (info.param.loop == Loop::copy_back ? "copy_back" : "offload_param");
}
const Plan kPlans[] = {{Schedule::stock, Loop::copy_back},
                       {Schedule::overlap, Loop::copy_back},
                       {Schedule::stock, Loop::offload_param},
                       {Schedule::overlap, Loop::offload_param}};
// Every schedule: the deepspeed one too (its host waits are DeepSpeed's, not PlanWaits').
const Plan kAllPlans[] = {
    {Schedule::stock, Loop::copy_back},     {Schedule::overlap, Loop::copy_back},
    {Schedule::stock, Loop::offload_param}, {Schedule::overlap, Loop::offload_param},
    {Schedule::deepspeed, Loop::copy_back}, {Schedule::deepspeed, Loop::offload_param}};

class OneRank : public ::testing::TestWithParam<Plan> {};

TEST_P(OneRank, IsBitwiseRunArm) {
  const RunConfig c = tiny(GetParam().schedule, GetParam().loop);
  std::vector<float> ref_master, master;
  CpuDevice d1(2), d2(2);
  const ArmResult ref = step_detail::run_arm_capture(c, Arm::registered, d1, &ref_master);
  SingleRankCollectives one;
  const ArmResult r = run_partitioned_arm(c, Arm::registered, d2, one, &master);
  ASSERT_TRUE(r.ok);
  ASSERT_EQ(master.size(), ref_master.size());
  EXPECT_EQ(std::memcmp(master.data(), ref_master.data(), master.size() * 4), 0);
  EXPECT_EQ(r.param_checksum, ref.param_checksum);
  ASSERT_EQ(r.samples.size(), ref.samples.size());
  for (std::size_t i = 0; i < r.samples.size(); ++i) {
    EXPECT_EQ(std::memcmp(&r.samples[i].loss, &ref.samples[i].loss, 4), 0) << "step " << i;
  }
  EXPECT_EQ(d2.memory_in_use(), 0u);
}
INSTANTIATE_TEST_SUITE_P(Plans, OneRank, ::testing::ValuesIn(kAllPlans), plan_name);

// ---- the single-process reference: the model on one CpuDevice, written out here ----

struct Ref {
  const RunConfig& c;
  ModelLayout L;
  CpuDevice dev{1};
  std::int64_t T, h, F, V, n;
  explicit Ref(const RunConfig& cfg)
      : c(cfg),
        L(ModelLayout::build(cfg.model)),
        T(cfg.tokens()),
        h(cfg.model.hidden),
        F(4 * cfg.model.hidden),
        V(cfg.model.vocab),
        n(cfg.model.layers) {}

  // bf16 gradient of the whole flat array for the micro-batch of token seed `ts`; *loss set.
  std::vector<bf16> grads(const std::vector<bf16>& w, std::uint64_t ts, float* loss) {
    const auto ids = token_ids(T, V, ts);
    std::vector<std::int32_t> order(ids.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ids[a] < ids[b]; });
    std::vector<std::int32_t> uniq, offs;
    for (std::size_t i = 0; i < order.size(); ++i) {
      if (i == 0 || ids[order[i]] != ids[order[i - 1]]) {
        uniq.push_back(ids[order[i]]);
        offs.push_back(static_cast<std::int32_t>(i));
      }
    }
    offs.push_back(static_cast<std::int32_t>(order.size()));
    const EmbeddingGradIndex index{uniq.data(), offs.data(), order.data(),
                                   static_cast<std::int64_t>(uniq.size())};
    std::vector<bf16> xs((n + 1) * T * h), pre(n * T * F), act(n * T * F), logits(T * V);
    std::vector<bf16> dy(T * h), dtmp(T * h), dact(T * F), dpre(T * F), g(w.size());
    auto x = [&](std::int64_t i) { return xs.data() + i * T * h; };
    const bf16* W = w.data();
    dev.embedding_forward(ids.data(), W + L.modules[0].offset, x(0), T, h);
    for (std::int64_t i = 0; i < n; ++i) {
      const bf16* w1 = W + L.modules[static_cast<std::size_t>(i + 1)].offset;
      const bf16 *b1 = w1 + F * h, *w2 = b1 + F, *b2 = w2 + h * F;
      dev.gemm({false, true, T, F, h, x(i), h, w1, h, pre.data() + i * T * F, F});
      dev.bias_gelu_forward(pre.data() + i * T * F, b1, act.data() + i * T * F, T, F);
      dev.gemm({false, true, T, h, F, act.data() + i * T * F, F, w2, F, x(i + 1), h});
      dev.bias_add(x(i + 1), b2, T, h);
      dev.residual_add(x(i + 1), x(i), T * h);
    }
    const bf16* head = W + L.modules.back().offset;
    dev.gemm({false, true, T, V, h, x(n), h, head, h, logits.data(), V});
    dev.sum(logits.data(), T * V, loss);
    dev.fill(logits.data(), 1.0f, T * V);
    dev.gemm(
        {true, false, V, h, T, logits.data(), V, x(n), h, g.data() + L.modules.back().offset, h});
    dev.gemm({false, false, T, h, V, logits.data(), V, head, h, dy.data(), h});
    for (std::int64_t i = n - 1; i >= 0; --i) {
      const std::int64_t off = L.modules[static_cast<std::size_t>(i + 1)].offset;
      const bf16 *w1 = W + off, *w2 = w1 + F * h + F;
      bf16 *gw1 = g.data() + off, *gb1 = gw1 + F * h, *gw2 = gb1 + F, *gb2 = gw2 + h * F;
      dev.gemm({false, false, T, F, h, dy.data(), h, w2, F, dact.data(), F});
      dev.gemm({true, false, h, F, T, dy.data(), h, act.data() + i * T * F, F, gw2, F});
      dev.column_sum(dy.data(), gb2, T, h);
      dev.gelu_backward(dact.data(), pre.data() + i * T * F, dpre.data(), T * F);
      dev.gemm({true, false, F, h, T, dpre.data(), F, x(i), h, gw1, h});
      dev.column_sum(dpre.data(), gb1, T, F);
      dev.gemm({false, false, T, h, F, dpre.data(), F, w1, h, dtmp.data(), h});
      dev.residual_add(dy.data(), dtmp.data(), T * h);
    }
    dev.embedding_backward(index, dy.data(), g.data(), h);  // g starts zeroed
    return g;
  }

  // `ranks` micro-batches per step, gradients summed in fp32 in rank order, Adam on the whole.
  std::vector<float> train(int ranks, std::vector<float>* losses) {
    const auto n = static_cast<std::size_t>(L.total);
    std::vector<float> master(n);
    std::vector<float> m(n, 0.0f);
    std::vector<float> v(n, 0.0f);
    std::vector<float> g32(n, 0.0f);
    initial_parameters(L, c.seed, master.data());
    ThreadPool pool(1);
    for (int t = 1; t <= c.warmup + c.steps; ++t) {
      std::vector<bf16> w(master.size());
      for (std::size_t i = 0; i < w.size(); ++i) w[i] = f32_to_bf16(master[i]);
      float total = 0;
      for (int r = 0; r < ranks; ++r) {
        float loss = 0;
        const auto g = grads(w, c.seed + static_cast<std::uint64_t>(r), &loss);
        total = r == 0 ? loss : total + loss;
        for (std::size_t i = 0; i < g.size(); ++i) {
          g32[i] = r == 0 ? bf16_to_f32(g[i]) : g32[i] + bf16_to_f32(g[i]);
        }
      }
      losses->push_back(total);
      adam_step(master.data(), g32.data(), m.data(), v.data(), L.total, t, AdamHyper{}, pool);
    }
    return master;
  }
};

// Runs `ranks` forked rank processes; returns the full master reassembled from their shards.
// *waits (if given) receives each rank's host waits for its device, setup included.
std::vector<float> run_ranks(const RunConfig& c, int ranks, std::vector<float>* losses,
                             std::vector<std::string>* errors,
                             std::vector<std::int64_t>* waits = nullptr,
                             const step_detail::DeepSpeedKnobs* knobs = nullptr) {
  const ModelLayout L = ModelLayout::build(c.model);
  const ShardLayout S = ShardLayout::build(L, ranks);
  const std::size_t steps = static_cast<std::size_t>(c.warmup + c.steps);
  // shard, losses, the wait count (two floats' room)
  const std::size_t per_rank = static_cast<std::size_t>(S.total) + steps + 2;
  const std::size_t bytes = per_rank * 4 * static_cast<std::size_t>(ranks);
  void* out = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(out, MAP_FAILED);
  auto* f = static_cast<float*>(out);
  ShmRegion region = ShmRegion::create(ranks, 256, "unittest");  // small slot: many pieces
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int code = 0;
      try {
        CountingCpuDevice dev(1);
        ShmCollectives comm(region, r, 30);
        std::vector<float> shard;
        const ArmResult a =
            run_partitioned_arm(c, Arm::unregistered, dev, comm, comm, &shard, knobs);
        float* mine = f + per_rank * static_cast<std::size_t>(r);
        std::memcpy(mine, shard.data(), shard.size() * 4);
        for (std::size_t s = 0; s < steps; ++s)
          mine[S.total + static_cast<std::int64_t>(s)] = a.samples[s].loss;
        std::memcpy(mine + S.total + static_cast<std::int64_t>(steps), &dev.waits,
                    sizeof dev.waits);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = 1;
      }
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  for (int r = 0; r < ranks; ++r) {
    int status = 0;
    ::waitpid(pids[static_cast<std::size_t>(r)], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      errors->push_back("rank " + std::to_string(r));
  }
  std::vector<float> full(static_cast<std::size_t>(L.total));
  for (std::size_t m = 0; m < L.modules.size(); ++m) {
    for (int r = 0; r < ranks; ++r) {
      const std::int64_t lo = std::min(L.modules[m].count, r * S.shard[m]);
      const std::int64_t hi = std::min(L.modules[m].count, (r + 1) * S.shard[m]);
      const float* src = f + per_rank * static_cast<std::size_t>(r) + S.offset[m];
      std::copy(src, src + (hi - lo), full.begin() + L.modules[m].offset + lo);
    }
  }
  for (std::size_t s = 0; s < steps; ++s)
    losses->push_back(f[static_cast<std::size_t>(S.total) + s]);
  for (int r = 0; waits != nullptr && r < ranks; ++r) {
    std::int64_t w = 0;
    std::memcpy(
        &w, f + per_rank * static_cast<std::size_t>(r) + static_cast<std::size_t>(S.total) + steps,
        sizeof w);
    waits->push_back(w);
  }
  // every rank must report the same (summed) loss
  for (int r = 1; r < ranks; ++r) {
    for (std::size_t s = 0; s < steps; ++s) {
      EXPECT_EQ(f[per_rank * static_cast<std::size_t>(r) + static_cast<std::size_t>(S.total) + s],
                f[static_cast<std::size_t>(S.total) + s]);
    }
  }
  ::munmap(out, bytes);
  return full;
}

class PartitionedRanks : public ::testing::TestWithParam<std::tuple<int, Plan, bool>> {};

// The third parameter: the deepspeed schedule with DeepSpeed's settings shrunk (fetches,
// releases and several buckets) instead of its defaults (every tensor of the tiny model
// persistent, one bucket).
TEST_P(PartitionedRanks, EqualsSingleProcessSumOfMicroBatchGradients) {
  const int ranks = std::get<0>(GetParam());
  const Plan plan = std::get<1>(GetParam());
  const step_detail::DeepSpeedKnobs knobs = test::tiny_deepspeed_knobs();
  const bool shrunk = std::get<2>(GetParam());
  ::setenv("ZOB_ADAM_ISA", "scalar", 1);  // the same Adam path in the ranks and the reference
  const RunConfig c = tiny(plan.schedule, plan.loop);
  std::vector<float> got_losses, want_losses;
  std::vector<std::string> errors;
  const auto got = run_ranks(c, ranks, &got_losses, &errors, nullptr, shrunk ? &knobs : nullptr);
  ASSERT_TRUE(errors.empty()) << errors[0];
  Ref ref(c);
  const auto want = ref.train(ranks, &want_losses);
  ::unsetenv("ZOB_ADAM_ISA");
  ASSERT_EQ(got.size(), want.size());
  std::size_t diff = 0;
  for (std::size_t i = 0; i < got.size(); ++i) diff += std::memcmp(&got[i], &want[i], 4) != 0;
  EXPECT_EQ(diff, 0u) << "elements of the master differ from the reference";
  EXPECT_EQ(got_losses, want_losses);
  // The test can fail: one micro-batch alone gives a different master.
  std::vector<float> one_losses;
  const auto one = ref.train(1, &one_losses);
  EXPECT_NE(std::memcmp(one.data(), want.data(), one.size() * 4), 0);
}

std::string ranks_name(const ::testing::TestParamInfo<std::tuple<int, Plan, bool>>& info) {
  return std::to_string(std::get<0>(info.param)) + "ranks_" +
         plan_name({std::get<1>(info.param), info.index}) +
         (std::get<2>(info.param) ? "_shrunk_knobs" : "");
}
INSTANTIATE_TEST_SUITE_P(Ranks, PartitionedRanks,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::ValuesIn(kAllPlans),
                                            ::testing::Values(false)),
                         ranks_name);
INSTANTIATE_TEST_SUITE_P(
    DeepSpeed, PartitionedRanks,
    ::testing::Combine(::testing::Values(2, 3),
                       ::testing::Values(Plan{Schedule::deepspeed, Loop::copy_back},
                                         Plan{Schedule::deepspeed, Loop::offload_param}),
                       ::testing::Values(true)),
    ranks_name);

// The host waits one step issues, from two runs that differ by two steps only (setup cancels).
std::int64_t waits_per_step(RunConfig c, int ranks,
                            const step_detail::DeepSpeedKnobs* knobs = nullptr) {
  std::vector<std::int64_t> per_run[2];
  for (int k = 0; k < 2; ++k) {
    c.warmup = 0;
    c.steps = 1 + 2 * k;
    std::vector<float> losses;
    std::vector<std::string> errors;
    run_ranks(c, ranks, &losses, &errors, &per_run[k], knobs);
    EXPECT_TRUE(errors.empty());
  }
  for (std::size_t r = 1; r < per_run[1].size(); ++r) {
    EXPECT_EQ(per_run[1][r] - per_run[0][r], per_run[1][0] - per_run[0][0]) << "rank " << r;
  }
  return per_run[1].empty() || per_run[0].empty() ? -1 : (per_run[1][0] - per_run[0][0]) / 2;
}

class PlanWaits : public ::testing::TestWithParam<Plan> {};

// The waits of the one-GPU plan, whatever the rank count: stock waits once for every gradient,
// once per sub-group's copy-back, once at the end of the step; overlap once per landing part of
// the gradients (each module's D2H cut where a piece begins: its pieces wait on them) and once
// at the end. No wait per copy, cast, module or
// collective: the per-operation step before this one issued 4 per module and 2 per piece.
TEST_P(PlanWaits, AreTheOneGpuPlansForEveryRankCount) {
  const Plan plan = GetParam();
  const RunConfig c = tiny(plan.schedule, plan.loop);
  const ModelLayout L = ModelLayout::build(c.model);
  const auto modules = static_cast<std::int64_t>(L.modules.size());
  for (int ranks : {1, 2, 3}) {
    const std::int64_t S = ShardLayout::build(L, ranks).total;
    const std::int64_t sub_groups = (S + c.sub_group_size - 1) / c.sub_group_size;
    const ModelLayout shard = step_detail::shard_layout_of(L, ShardLayout::build(L, ranks));
    std::int64_t parts = 0;
    for (const auto& m : step_detail::landing_parts(
             shard, step_detail::make_pieces(shard, c.sub_group_size, c.chunk_elems))) {
      parts += static_cast<std::int64_t>(m.size());
    }
    EXPECT_GE(parts, modules);
    std::int64_t want = plan.schedule == Schedule::overlap ? parts + 1 : 2;
    if (plan.schedule == Schedule::stock && plan.loop == Loop::copy_back) want += sub_groups;
    EXPECT_EQ(waits_per_step(c, ranks), want) << ranks << " ranks";
  }
}
INSTANTIATE_TEST_SUITE_P(Plans, PlanWaits, ::testing::ValuesIn(kPlans), plan_name);

// The deepspeed schedule's host waits with N ranks are its one-rank plan's: under
// offload_param the same (the fetch handles gain a gather, not a wait); in the copy-back loop
// the handles that one rank skips (its parameters stay resident) are waited for as under
// offload_param, plus the persistent tensors' gather after the step. None per collective.
TEST(DeepSpeedRankWaits, AreTheOneRankPlansWaits) {
  const step_detail::DeepSpeedKnobs knobs = test::tiny_deepspeed_knobs();
  for (Loop loop : {Loop::offload_param, Loop::copy_back}) {
    SCOPED_TRACE(loop == Loop::copy_back ? "copy_back" : "offload_param");
    RunConfig c = tiny(Schedule::deepspeed, loop);
    // One sub-group and one copy-back piece for every rank count: their waits are the
    // one-GPU plan's per sub-group and piece, and the sub-groups' count follows the shard.
    c.sub_group_size = c.chunk_elems = 1 << 20;
    const step_detail::DeepSpeedPlan plan =
        step_detail::build_deepspeed_plan(ModelLayout::build(c.model), loop, knobs);
    std::int64_t visits_waiting = 0;
    for (const step_detail::DsVisit& v : plan.visits) visits_waiting += v.waits > 0 ? 1 : 0;
    ASSERT_GT(visits_waiting, 0);  // the shrunk settings make the trace wait
    const std::int64_t one = waits_per_step(c, 1, &knobs);
    const std::int64_t extra = loop == Loop::copy_back ? visits_waiting + 1 : 0;
    for (int ranks : {2, 3}) EXPECT_EQ(waits_per_step(c, ranks, &knobs), one + extra) << ranks;
  }
}

TEST(PartitionedStep, ShardLayoutPadsEveryModule) {
  const ModelLayout L = ModelLayout::build({61, 8, 3});
  const ShardLayout S = ShardLayout::build(L, 4);
  std::int64_t total = 0;
  for (std::size_t m = 0; m < L.modules.size(); ++m) {
    EXPECT_GE(S.shard[m] * 4, L.modules[m].count);
    EXPECT_LT((S.shard[m] - 1) * 4, L.modules[m].count);
    EXPECT_EQ(S.offset[m], total);
    total += S.shard[m];
  }
  EXPECT_EQ(S.total, total);
}

}  // namespace
}  // namespace zob
