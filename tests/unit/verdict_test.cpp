// The verdict sentences (src/report/verdict.cpp) on runs made of fresh random step times: which
// sentence a run gets, and that its numbers are those computed here from the same steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>

#include "random_seed.hpp"
#include "report/details.hpp"
#include "report/report.hpp"
#include "report/verdict.hpp"
#include "zob/stats.hpp"

namespace {

// Fresh random step times every run; the seed is printed (a failure can be replayed with it).
std::mt19937_64 gen{zob::test::random_seed("verdict_test")};
double uniform(double lo, double hi) { return std::uniform_real_distribution<>(lo, hi)(gen); }

// Six rounds' slow-arm steps, each 2-3x the fast arm's: registration clearly pays.
std::vector<double> clearly_slower(double fast) {
  std::vector<double> slow;
  for (int k = 0; k < 6; ++k) slow.push_back(fast * uniform(2.0, 3.0));
  return slow;
}

zob::ArmResult arm(zob::Arm which, const std::string& device, double step_s, int steps) {
  zob::ArmResult r;
  r.arm = which;
  r.ok = true;
  r.device = device;
  r.warmup = 1;
  r.steps = steps;
  for (int i = 0; i < steps + 1; ++i) {
    zob::StepSample s;
    s.wall_s = step_s * uniform(0.995, 1.005);
    r.samples.push_back(s);
  }
  const auto t = r.timed_step_s();
  r.step_avg_s = std::accumulate(t.begin(), t.end(), 0.0) / static_cast<double>(t.size());
  r.step_min_s = *std::min_element(t.begin(), t.end());
  return r;
}

// `rounds` rounds of registered (fast_s) and unregistered (slow_s[k] in round k) on `device`.
zob::RunResult run_of(const std::string& device, double fast_s, const std::vector<double>& slow_s) {
  zob::RunResult run;
  run.config.device = device == "cpu" ? zob::DeviceKind::cpu : zob::DeviceKind::cuda;
  run.config.repeats = static_cast<int>(slow_s.size());
  const int steps = static_cast<int>(uniform(3, 6));
  for (double s : slow_s) {
    run.rounds.push_back({arm(zob::Arm::registered, device, fast_s, steps),
                          arm(zob::Arm::unregistered, device, s, steps)});
  }
  for (zob::Arm a : run.config.arms) run.arms.push_back(zob::combine_rounds(zob::runs_of(run, a)));
  return run;
}

std::string two(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

TEST(Verdict, ConclusiveRoundsGiveTheMedianAndTheInterval) {
  const double fast = uniform(0.2, 0.4);
  const std::vector<double> slow = clearly_slower(fast);
  const zob::RunResult run = run_of("cuda", fast, slow);
  const auto v = zob::verdicts(run);
  ASSERT_EQ(v.size(), 1u);
  std::vector<double> ratios;
  for (const auto& round : run.rounds) {
    ratios.push_back(zob::summarize(round[1].timed_step_s()).median /
                     zob::summarize(round[0].timed_step_s()).median);
  }
  const zob::MedianInterval m = zob::median_interval(ratios);
  EXPECT_TRUE(v[0].conclusive);
  EXPECT_DOUBLE_EQ(*v[0].median, m.median);
  const double saved = run.arms[1].step_avg_s - run.arms[0].step_avg_s;
  const std::string want =
      "Registering the offload buffers saves " + two(saved) + " s per step (" +
      std::to_string(static_cast<int>(std::lround(100 * saved / run.arms[1].step_avg_s))) +
      " %) on this machine: " + two(m.median) + "x (median; interval " + two(m.low) + "-" +
      two(m.high) + " over 6 rounds, 97 % coverage)";
  EXPECT_EQ(v[0].text, want);
  EXPECT_NE(zob::render_verdict_lines(run).find("verdict: " + want + "\n"), std::string::npos);
}

TEST(Verdict, AnIntervalAcrossOneIsInconclusive) {
  const double fast = uniform(0.2, 0.4);
  const zob::RunResult run = run_of(
      "cuda", fast, {fast * uniform(0.7, 0.9), fast * uniform(1.1, 1.3), fast * uniform(1.0, 1.1)});
  const auto v = zob::verdicts(run);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_FALSE(v[0].conclusive);
  EXPECT_EQ(
      v[0].text.rfind("inconclusive: Registering the offload buffers gives " + two(*v[0].median) +
                          "x (median over 3 rounds, 75 % coverage), but the interval " +
                          two(*v[0].low) + "-" + two(*v[0].high) + " includes 1.0; raise --repeats",
                      0),
      0u)
      << v[0].text;
}

TEST(Verdict, OneRoundSaysThereIsNoIntervalAndSlowerSaysCosts) {
  const double fast = uniform(0.2, 0.4);
  const zob::RunResult run = run_of("cuda", fast, {fast * uniform(0.5, 0.8)});
  const auto v = zob::verdicts(run);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_FALSE(v[0].median.has_value());
  EXPECT_NE(v[0].text.find(" costs "), std::string::npos) << v[0].text;
  EXPECT_NE(v[0].text.find(two(v[0].ratio) + "x (one round, no interval"), std::string::npos)
      << v[0].text;
}

// Issue 37: DRIVERRESULT names the arms as measured. Where registered was the slower, it is
// `slow`, the ratios and the interval are inverted, the saving positive; the sentence keeps
// "costs".
TEST(Verdict, TheJsonLabelsFollowTheMeasuredSign) {
  const double fast = uniform(0.2, 0.4);
  std::vector<double> slower;  // unregistered 0.5-0.8x registered's step: registered lost
  for (int k = 0; k < 3; ++k) slower.push_back(fast * uniform(0.5, 0.8));
  const zob::RunResult run = run_of("cuda", fast, slower);
  const auto v = zob::verdicts(run).at(0);
  ASSERT_LT(*v.median, 1.0);
  const auto j = zob::verdicts_json(run).at(0);
  EXPECT_EQ(j.at("slow"), "registered");
  EXPECT_EQ(j.at("fast"), "unregistered");
  EXPECT_DOUBLE_EQ(j.at("ratio").get<double>(), 1.0 / v.ratio);
  EXPECT_DOUBLE_EQ(j.at("ratio_median").get<double>(), 1.0 / *v.median);
  EXPECT_DOUBLE_EQ(j.at("interval_low").get<double>(), 1.0 / *v.high);
  EXPECT_DOUBLE_EQ(j.at("interval_high").get<double>(), 1.0 / *v.low);
  EXPECT_DOUBLE_EQ(j.at("saved_s").get<double>(), -v.saved_s);
  EXPECT_GT(j.at("saved_s").get<double>(), 0.0);
  EXPECT_NE(j.at("text").get<std::string>().find(" costs "), std::string::npos) << j.at("text");
  // Where registered won, nothing turns.
  const auto won = zob::verdicts_json(run_of("cuda", fast, clearly_slower(fast))).at(0);
  EXPECT_EQ(won.at("slow"), "unregistered");
  EXPECT_EQ(won.at("fast"), "registered");
}

TEST(Verdict, TheCpuDeviceIsNotApplicableWhateverTheNumbers) {
  const double fast = uniform(0.2, 0.4);
  const std::vector<double> slow = clearly_slower(fast);
  const zob::RunResult run = run_of("cpu", fast, slow);
  const auto v = zob::verdicts(run);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_FALSE(v[0].applicable);
  EXPECT_FALSE(v[0].conclusive);
  EXPECT_EQ(v[0].text.rfind("not applicable on the CPU device: no registration exists there", 0),
            0u);
  EXPECT_FALSE(zob::not_applicable_warning(run).empty());
  EXPECT_TRUE(zob::not_applicable_warning(run_of("cuda", fast, slow)).empty());
}

// Two runs on one GPU (issue 27): numbers that alone give a conclusive verdict do not once
// an arm saw another process on the device, or the device's free memory fell between arms.
TEST(Verdict, ASharedDeviceIsNeverConclusive) {
  const double fast = uniform(0.2, 0.4);
  const std::vector<double> slow = clearly_slower(fast);
  ASSERT_TRUE(zob::verdicts(run_of("cuda", fast, slow))[0].conclusive);
  zob::RunResult shared = run_of("cuda", fast, slow);
  shared.rounds[2][1].device_other_processes = 1;
  auto v = zob::verdicts(shared);
  EXPECT_FALSE(v[0].conclusive);
  EXPECT_EQ(v[0].text.rfind("inconclusive: Registering the offload buffers measured ", 0), 0u)
      << v[0].text;
  EXPECT_NE(v[0].text.find("(1 other process on the device during arm unregistered (round 3))"),
            std::string::npos)
      << v[0].text;
  const auto warnings = zob::run_warnings(shared);
  EXPECT_TRUE(std::any_of(warnings.begin(), warnings.end(), [](const std::string& w) {
    return w.rfind("another process used the device during the run", 0) == 0;
  }));

  // Free memory only (no process list): a fall above the threshold counts, one below not.
  zob::RunResult fell = run_of("cuda", fast, slow);
  for (auto& round : fell.rounds) {
    for (auto& a : round) a.device_free_bytes = std::uint64_t{100} << 30;
  }
  fell.rounds[1][0].device_free_bytes -= zob::kSharedFreeDrop / 2;
  EXPECT_TRUE(zob::verdicts(fell)[0].conclusive);
  fell.rounds[1][0].device_free_bytes -= zob::kSharedFreeDrop;
  v = zob::verdicts(fell);
  EXPECT_FALSE(v[0].conclusive);
  EXPECT_NE(v[0].text.find("its free memory fell by 1.5 GiB between the start of arm registered "
                           "(round 1) and of arm registered (round 2)"),
            std::string::npos)
      << v[0].text;
}

}  // namespace
