#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "random_seed.hpp"
#include "zob/stats.hpp"

namespace {

double direct_mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

}  // namespace

TEST(Stats, SummaryMatchesDirectFormulasOnRandomData) {
  std::mt19937_64 rng(zob::test::random_seed("SummaryMatchesDirectFormulasOnRandomData"));
  std::uniform_real_distribution<double> dist(0.1, 2.0);
  for (int n : {1, 2, 5, 10, 101}) {
    std::vector<double> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = dist(rng);
    const zob::Summary s = zob::summarize(v);
    std::vector<double> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(s.n, v.size());
    EXPECT_NEAR(s.mean, direct_mean(v), 1e-12);
    EXPECT_EQ(s.min, sorted.front());
    EXPECT_EQ(s.max, sorted.back());
    const double median = n % 2 ? sorted[static_cast<std::size_t>(n / 2)]
                                : 0.5 * (sorted[static_cast<std::size_t>(n / 2 - 1)] +
                                         sorted[static_cast<std::size_t>(n / 2)]);
    EXPECT_NEAR(s.median, median, 1e-12);
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    EXPECT_NEAR(s.stddev, n > 1 ? std::sqrt(ss / (n - 1)) : 0.0, 1e-12);
    EXPECT_GE(s.p90, s.median);
    EXPECT_LE(s.p90, s.max);
  }
}

TEST(Stats, P90OfOneToElevenIsTen) {
  std::vector<double> v;
  for (int i = 11; i >= 1; --i) v.push_back(i);
  EXPECT_DOUBLE_EQ(zob::summarize(v).p90, 10.0);
}

TEST(Stats, MedianIntervalUsesRangeForFewValuesAndOrderStatisticsForMany) {
  const auto few = zob::median_interval({3.0, 1.0, 2.0});
  EXPECT_EQ(few.method, "range");
  EXPECT_EQ(few.low, 1.0);
  EXPECT_EQ(few.high, 3.0);
  EXPECT_EQ(few.median, 2.0);
  std::vector<double> many;
  for (int i = 1; i <= 20; ++i) many.push_back(i);
  const auto m = zob::median_interval(many);
  EXPECT_EQ(m.method, "order-statistics");
  EXPECT_GE(m.confidence, 0.95);
  // n=20: the classical 95 % interval for the median is [x_(6), x_(15)].
  EXPECT_EQ(m.low, 6.0);
  EXPECT_EQ(m.high, 15.0);
}

// The range of n values misses the median only when all n fall on one side of it:
// probability 2 / 2^n. Issue 26: 5 rounds reported confidence 0 although they cover 93.75 %.
TEST(Stats, TheRangeOfFewValuesReportsItsTrueCoverage) {
  EXPECT_DOUBLE_EQ(zob::median_interval({1.0}).confidence, 0.0);
  EXPECT_DOUBLE_EQ(zob::median_interval({1.0, 2.0}).confidence, 0.5);
  EXPECT_DOUBLE_EQ(zob::median_interval({3.0, 1.0, 2.0}).confidence, 0.75);
  const auto five = zob::median_interval({2.9, 2.6, 3.2, 2.8, 3.0});
  EXPECT_EQ(five.method, "range");
  EXPECT_DOUBLE_EQ(five.confidence, 0.9375);
  // Six values: the same pair (min, max), now the 95 % order-statistics interval.
  const auto six = zob::median_interval({1, 2, 3, 4, 5, 6});
  EXPECT_EQ(six.method, "order-statistics");
  EXPECT_DOUBLE_EQ(six.confidence, 1 - 2.0 / 64);
}

TEST(Stats, PhasesSkipWarmupAndComputeBandwidth) {
  zob::ArmResult arm;
  arm.warmup = 1;
  for (int i = 0; i < 4; ++i) {
    zob::StepSample s;
    zob::PhaseSample copy;
    copy.device_s = i == 0 ? 100.0 : 0.5;  // the warmup outlier must not count
    copy.host_s = 0.6;
    copy.bytes = 1'000'000'000;
    s.phases["copy_back"] = copy;
    zob::PhaseSample adam;
    adam.host_s = 2.0;
    adam.bytes = 28'000'000;
    adam.params = 1'000'000;
    s.phases["adam"] = adam;
    arm.samples.push_back(s);
  }
  const auto j = zob::summarize_phases(arm);
  EXPECT_DOUBLE_EQ(j["copy_back"]["device_s"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(j["copy_back"]["gb_per_s"].get<double>(), 2.0);
  EXPECT_TRUE(j["adam"]["device_s"].is_null());
  EXPECT_DOUBLE_EQ(j["adam"]["gparams_per_s"].get<double>(), 0.0005);
  EXPECT_EQ(j["copy_back"]["device_s_stats"]["n"].get<int>(), 3);
}
