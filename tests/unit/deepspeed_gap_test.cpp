// What the output says separates the tool's step from a DeepSpeed user's
// (src/report/deepspeed_gap.cpp): the hook counts against DeepSpeed's own, counted on an H200
// (results/h200/2026-12-02-deepspeed-account: DSREF hook_timers), and the projection of a
// user's step on runs made of fresh random step times.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "random_seed.hpp"
#include "report/deepspeed_gap.hpp"
#include "report/details.hpp"
#include "report/report.hpp"
#include "zob/model.hpp"
#include "zob/stats.hpp"

namespace {

// Fresh random step times every run; the seed goes into each test's output (SCOPED_TRACE in
// the tests that draw, and the XML report) so that a failure can be replayed.
const std::uint64_t kSeed = zob::test::random_seed("deepspeed_gap_test");
std::mt19937_64 gen{kSeed};
double uniform(double lo, double hi) { return std::uniform_real_distribution<>(lo, hi)(gen); }
#define ZOB_TRACE_SEED()                                      \
  SCOPED_TRACE(fmt::format("random seed {} (kSeed)", kSeed)); \
  ::testing::Test::RecordProperty("seed", std::to_string(kSeed))

// DeepSpeed's pre-forward hook calls and gradient-hook calls in one step, as counted by
// bench/deepspeed/account.py (its pre-forward count includes the harness's loss wrapper).
struct Counted {
  const char* model;
  std::int64_t pre_forward_calls;
  std::int64_t gradient_hook_calls;
};

TEST(DeepSpeedGap, HookCountsAreDeepSpeedsOnTheRecordedModels) {
  for (const Counted& c : {Counted{"Qwen2.5-0.5B", 319, 290}, Counted{"Qwen2.5-1.5B", 371, 338},
                           Counted{"Llama-3.2-3B", 371, 254}}) {
    const auto h = zob::deepspeed_hooks(zob::resolve_model(c.model));
    ASSERT_TRUE(h.has_value()) << c.model;
    EXPECT_EQ(h->hooked_modules, c.pre_forward_calls - 1) << c.model;
    EXPECT_EQ(h->gradient_hooks, c.gradient_hook_calls) << c.model;
  }
}

TEST(DeepSpeedGap, SyntheticModelHasNoLine) {
  zob::RunConfig c;
  EXPECT_FALSE(zob::deepspeed_hooks(c.model).has_value());
  EXPECT_EQ(zob::not_contained_line(c), "");
  EXPECT_TRUE(zob::not_contained_json(c).is_null());
  c.model = zob::resolve_model("Llama-3.2-1B");
  const std::string line = zob::not_contained_line(c);
  EXPECT_NE(line.find("not contained:"), std::string::npos);
  EXPECT_NE(line.find(std::to_string(13 * c.model.layers + 6) + " modules"), std::string::npos);
}

zob::ArmResult arm(zob::Arm which, double step_s, int steps) {
  zob::ArmResult r;
  r.arm = which;
  r.ok = true;
  r.device = "cuda";
  r.warmup = 1;
  r.steps = steps;
  for (int i = 0; i < steps + 1; ++i) {
    zob::StepSample s;
    s.wall_s = step_s * uniform(0.99, 1.01);
    r.samples.push_back(s);
  }
  const auto t = r.timed_step_s();
  r.step_avg_s = std::accumulate(t.begin(), t.end(), 0.0) / static_cast<double>(t.size());
  r.step_min_s = *std::min_element(t.begin(), t.end());
  return r;
}

zob::RunResult run_of(int rounds, double fast_s, double slow_s) {
  zob::RunResult run;
  run.config.device = zob::DeviceKind::cuda;
  run.config.repeats = rounds;
  for (int k = 0; k < rounds; ++k) {
    run.rounds.push_back({arm(zob::Arm::registered, fast_s, 4),
                          arm(zob::Arm::unregistered, slow_s * uniform(0.9, 1.1), 4)});
  }
  for (zob::Arm a : run.config.arms) run.arms.push_back(zob::combine_rounds(zob::runs_of(run, a)));
  return run;
}

TEST(DeepSpeedGap, UnregisteredStepLosesTheMedianSavingWithItsInterval) {
  ZOB_TRACE_SEED();
  const double fast = uniform(0.2, 2.0), slow = fast * uniform(2.0, 3.0);
  zob::RunResult run = run_of(5, fast, slow);
  run.config.deepspeed_step_s = slow * uniform(1.2, 2.0);  // DeepSpeed's step is longer
  run.config.deepspeed_arm = zob::Arm::unregistered;
  const auto v = zob::verdicts(run).front();
  ASSERT_TRUE(v.saved_median && v.saved_low && v.saved_high);
  const auto p = zob::project_user_step(run);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->projected_arm, zob::Arm::registered);
  EXPECT_DOUBLE_EQ(p->projected_s, run.config.deepspeed_step_s - *v.saved_median);
  EXPECT_LE(*p->saved_low, p->saved_s);
  EXPECT_GE(*p->saved_high, p->saved_s);
  const std::string text = zob::render_projection(run);
  EXPECT_NE(text.find(fmt::format("would be {:.3f} s", p->projected_s)), std::string::npos) << text;
  EXPECT_NE(text.find("assumes"), std::string::npos);
  EXPECT_EQ(zob::projection_json(run)["projected_arm"], "registered");
}

TEST(DeepSpeedGap, RegisteredStepGainsTheSavingBack) {
  ZOB_TRACE_SEED();
  const double fast = uniform(0.2, 2.0), slow = fast * uniform(2.0, 3.0);
  zob::RunResult run = run_of(5, fast, slow);
  run.config.deepspeed_step_s = fast * uniform(1.2, 2.0);
  run.config.deepspeed_arm = zob::Arm::registered;
  const auto v = zob::verdicts(run).front();
  const auto p = zob::project_user_step(run);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->projected_arm, zob::Arm::unregistered);
  EXPECT_DOUBLE_EQ(p->projected_s, run.config.deepspeed_step_s + *v.saved_median);
  // The interval: the user's step plus the saving's low, then plus its high (low < high).
  const double step = run.config.deepspeed_step_s;
  EXPECT_NE(zob::render_projection(run).find(fmt::format(
                "(interval {:.3f}-{:.3f} s", step + *v.saved_low, step + *v.saved_high)),
            std::string::npos)
      << zob::render_projection(run);
}

// The interval's endpoints, in order, for a step that loses the saving: the user's step minus
// the saving's high end, then minus its low end (fixed numbers: every round saves 1, 2 or 3 s).
TEST(DeepSpeedGap, TheProjectedIntervalRunsFromTheLowerStepToTheHigher) {
  zob::RunResult run;
  run.config.device = zob::DeviceKind::cuda;
  run.config.repeats = 3;
  run.config.deepspeed_step_s = 10.0;
  run.config.deepspeed_arm = zob::Arm::unregistered;
  for (double saved : {2.0, 1.0, 3.0}) {
    zob::ArmResult fast = arm(zob::Arm::registered, 1.0, 1), slow = fast;
    slow.arm = zob::Arm::unregistered;
    for (auto& s : slow.samples) s.wall_s = 1.0 + saved;
    for (auto& s : fast.samples) s.wall_s = 1.0;
    fast.step_avg_s = fast.step_min_s = 1.0;
    slow.step_avg_s = slow.step_min_s = 1.0 + saved;
    run.rounds.push_back({fast, slow});
  }
  for (zob::Arm a : run.config.arms) run.arms.push_back(zob::combine_rounds(zob::runs_of(run, a)));
  const std::string text = zob::render_projection(run);
  EXPECT_NE(text.find("would be 8.000 s (registered) (interval 7.000-9.000 s from the saving's "
                      "1.000-3.000 s)"),
            std::string::npos)
      << text;
  const auto j = zob::projection_json(run);
  EXPECT_DOUBLE_EQ(j.at("saved_low_s").get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j.at("saved_high_s").get<double>(), 3.0);
  // The registered user's step gains it: 10 + 1 .. 10 + 3.
  run.config.deepspeed_arm = zob::Arm::registered;
  EXPECT_NE(zob::render_projection(run).find("would be 12.000 s (unregistered) (interval "
                                             "11.000-13.000 s"),
            std::string::npos)
      << zob::render_projection(run);
}

// Issue 37: a projection only from a verdict that holds, and from arms that ran.
TEST(DeepSpeedGap, NoProjectionFromOneRoundOrFromAnArmThatDidNotRun) {
  ZOB_TRACE_SEED();
  zob::RunResult one = run_of(1, 1.0, 3.0);
  one.config.deepspeed_step_s = 5.0;
  EXPECT_FALSE(zob::project_user_step(one).has_value());
  EXPECT_EQ(zob::render_projection(one),
            "projection: none: the verdict is inconclusive: 1 round in which both arms completed "
            "gives no interval; run with --repeats 5 or more\n");
  EXPECT_TRUE(zob::projection_json(one).is_null());
  zob::RunResult run = run_of(5, 1.0, 3.0);
  run.config.deepspeed_step_s = 5.0;
  run.config.deepspeed_arm = zob::Arm::pageable;  // no pageable arm ran
  std::string why;
  EXPECT_FALSE(zob::project_user_step(run, &why).has_value());
  EXPECT_EQ(why,
            "--deepspeed-arm pageable is not among the arms that completed (registered, "
            "unregistered); add it to --arms (e.g. --arms registered,pageable)");
  run.config.compat = zob::Compat::v2;  // --arms is refused there: the fix is another flag
  EXPECT_FALSE(zob::project_user_step(run, &why).has_value());
  EXPECT_NE(why.find("; --compat v2 runs unpinned and pinned; --ablate-register adds "
                     "pinned-unregistered"),
            std::string::npos)
      << why;
  run.config.compat = zob::Compat::v1;
  run.config.device = zob::DeviceKind::cpu;
  run.config.deepspeed_arm = zob::Arm::unregistered;
  EXPECT_EQ(zob::render_projection(run),
            "projection: none: nothing is registered on the CPU device; run on cuda or xpu\n");
}

TEST(DeepSpeedGap, SavingLargerThanTheUsersStepIsNoProjection) {
  ZOB_TRACE_SEED();
  zob::RunResult run = run_of(5, 1.0, 3.0);
  run.config.deepspeed_step_s = uniform(0.5, 1.5);  // less than the ~2 s saved
  run.config.deepspeed_arm = zob::Arm::unregistered;
  const auto p = zob::project_user_step(run);
  ASSERT_TRUE(p.has_value());
  EXPECT_FALSE(p->meaningful);
  EXPECT_NE(zob::render_projection(run).find("projection: none"), std::string::npos);
  EXPECT_TRUE(zob::projection_json(run)["projected_s"].is_null());
}

TEST(DeepSpeedGap, NoStepGivenNoProjection) {
  ZOB_TRACE_SEED();
  zob::RunResult run = run_of(5, 1.0, 2.0);
  EXPECT_FALSE(zob::project_user_step(run).has_value());
  EXPECT_EQ(zob::render_projection(run), "");
}

}  // namespace
