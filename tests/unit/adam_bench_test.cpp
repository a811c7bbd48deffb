// run_adam_benchmark on a small size: fields filled, consistent with each other and with the
// wall time the call took, JSON complete; the report's text from known figures.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <tuple>

#include "zob/adam.hpp"
#include "zob/adam_bench.hpp"
#include "zob/errors.hpp"
#include "zob/thread_pool.hpp"

TEST(AdamBench, SmallRunGivesConsistentFields) {
  zob::AdamBenchOptions o;
  o.params = (1 << 20) + 5;  // ragged end
  o.threads = 2;
  o.repeats = 2;
  o.seed = 7;
  const zob::AdamBenchResult r = zob::run_adam_benchmark(o);
  EXPECT_EQ(r.isa, zob::adam_isa());
  EXPECT_EQ(r.threads, 2);
  EXPECT_EQ(r.params, o.params);
  EXPECT_EQ(r.repeats, 2);
  for (double x : {r.adam_gparams_per_s, r.adam_gb_per_s, r.probe_gb_per_s, r.ratio}) {
    EXPECT_TRUE(std::isfinite(x) && x > 0) << x;
  }
  EXPECT_NEAR(r.adam_gb_per_s, r.adam_gparams_per_s * 28.0, 1e-9 * r.adam_gb_per_s);
  EXPECT_NEAR(r.ratio, r.adam_gb_per_s / r.probe_gb_per_s, 1e-12 * r.ratio);

  const nlohmann::json j = r.to_json();
  for (const char* key : {"isa", "threads", "params", "adam_gparams_per_s", "adam_gb_per_s",
                          "probe_gb_per_s", "ratio", "repeats"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["params"].get<std::int64_t>(), o.params);
  EXPECT_DOUBLE_EQ(j["ratio"].get<double>(), r.ratio);
  const std::string text = r.to_text();
  EXPECT_NE(text.find(r.isa), std::string::npos);
  EXPECT_NE(text.find("28 B/param"), std::string::npos);
}

// The separate and fused Adam + cast figures: each median lies between its slowest and fastest
// repeat, the speedup's too, and the JSON and the text carry them.
TEST(AdamBench, SeparateAndFusedCastFiguresAreConsistent) {
  zob::AdamBenchOptions o;
  o.params = (1 << 19) + 3;
  o.threads = 2;
  o.repeats = 3;
  const zob::AdamBenchResult r = zob::run_adam_benchmark(o);
  for (const auto& [lo, med, hi] :
       {std::tuple{r.separate_min, r.separate_gparams_per_s, r.separate_max},
        std::tuple{r.fused_min, r.fused_gparams_per_s, r.fused_max},
        std::tuple{r.fused_speedup_min, r.fused_speedup, r.fused_speedup_max}}) {
    EXPECT_TRUE(std::isfinite(lo) && lo > 0) << lo;
    EXPECT_LE(lo, med);
    EXPECT_LE(med, hi);
  }
  const nlohmann::json j = r.to_json();
  EXPECT_DOUBLE_EQ(j.at("separate_gparams_per_s").get<double>(), r.separate_gparams_per_s);
  EXPECT_DOUBLE_EQ(j.at("fused_gparams_per_s").get<double>(), r.fused_gparams_per_s);
  EXPECT_DOUBLE_EQ(j.at("fused_speedup").get<double>(), r.fused_speedup);
  for (const char* key :
       {"separate_gparams_per_s_min", "separate_gparams_per_s_max", "fused_gparams_per_s_min",
        "fused_gparams_per_s_max", "fused_speedup_min", "fused_speedup_max"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  const std::string text = r.to_text();
  EXPECT_NE(text.find(fmt::format("fused / separate: {:.3f}x", r.fused_speedup)), std::string::npos)
      << text;
}

// The figures are medians of real passes: every timed pass (and the warm-up one) of Adam and
// of the probe, at the reported rates, must fit in the wall time of the whole call. A rate
// computed from the wrong time (the sum of the repeats, a pass count off) or the wrong
// number of parameters does not fit.
TEST(AdamBench, RatesFitInTheWallTime) {
  zob::AdamBenchOptions o;
  o.params = 1 << 21;
  o.threads = 1;
  o.repeats = 8;
  const auto t0 = std::chrono::steady_clock::now();
  const zob::AdamBenchResult r = zob::run_adam_benchmark(o);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double n = static_cast<double>(o.params);
  const double adam_pass = n / (r.adam_gparams_per_s * 1e9);
  const double probe_pass = n * 28 / (r.probe_gb_per_s * 1e9);
  // At least half of the timed passes take no less than the median pass.
  EXPECT_LT((o.repeats / 2) * (adam_pass + probe_pass), wall);
  // One core streams at most a few hundred GB/s, even from cache.
  EXPECT_LT(r.adam_gb_per_s, 2000);
  EXPECT_LT(r.probe_gb_per_s, 2000);
}

TEST(AdamBench, TextReportsTheFiguresInOrder) {
  zob::AdamBenchResult r;
  r.isa = "avx2";
  r.threads = 3;
  r.params = 1000;
  r.repeats = 5;
  r.adam_gparams_per_s = 4.25;
  r.adam_gb_per_s = 119.0;
  r.probe_gb_per_s = 125.25;
  r.ratio = 0.95;
  r.separate_gparams_per_s = 2.5, r.separate_min = 2.25, r.separate_max = 2.75;
  r.fused_gparams_per_s = 3.5, r.fused_min = 3.25, r.fused_max = 3.75;
  r.fused_speedup = 1.375, r.fused_speedup_min = 1.125, r.fused_speedup_max = 1.625;
  EXPECT_EQ(r.to_text(),
            "CPU Adam (avx2, 3 threads, 1000 params, median of 5): 4.250 Gparam/s = 119.0 GB/s\n"
            "memory probe (same arrays, threads and ranges; read p,g,m,v, write p,m,v): 125.2 "
            "GB/s\n"
            "adam / probe: 0.95  (both counted at 28 B/param; updates are in place, so there are "
            "no write-allocate reads and none are counted)\n"
            "Adam + bf16 cast, separate passes (Adam, then the cast of the master): 2.500 "
            "Gparam/s (repeats 2.250 .. 2.750)\n"
            "Adam + bf16 cast, fused (one pass, 30 B/param): 3.500 Gparam/s (repeats 3.250 .. "
            "3.750)\n"
            "fused / separate: 1.375x (median of the per-repeat ratios; 1.125 .. 1.625)\n");
  const nlohmann::json j = r.to_json();
  EXPECT_EQ(j.at("threads"), 3);
  EXPECT_EQ(j.at("repeats"), 5);
  EXPECT_DOUBLE_EQ(j.at("adam_gparams_per_s").get<double>(), 4.25);
  EXPECT_DOUBLE_EQ(j.at("probe_gb_per_s").get<double>(), 125.25);
}

TEST(AdamBench, ZeroThreadsMeansAllCpus) {
  zob::AdamBenchOptions o;
  o.params = 1000;
  o.threads = 0;
  o.repeats = 1;
  EXPECT_EQ(zob::run_adam_benchmark(o).threads, zob::available_cpus());
}

TEST(AdamBench, RejectsBadOptions) {
  zob::AdamBenchOptions o;
  o.params = 0;
  EXPECT_THROW(zob::run_adam_benchmark(o), zob::UsageError);
  o.params = 100;
  o.threads = -1;
  EXPECT_THROW(zob::run_adam_benchmark(o), zob::UsageError);
  o.threads = 1;
  o.repeats = 0;
  EXPECT_THROW(zob::run_adam_benchmark(o), zob::UsageError);
}

TEST(AdamBench, RefusesMoreMemoryThanTheMachineHas) {
  zob::AdamBenchOptions o;
  o.params = std::int64_t{1} << 50;  // 16 PB of fp32 state: bad input, naming what it needs
  o.repeats = 1;
  try {
    zob::run_adam_benchmark(o);
    ADD_FAILURE() << "no refusal";
  } catch (const zob::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("adam --params 1125899906842624 needs"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("GB available (MemAvailable)"), std::string::npos)
        << e.what();
  }
}
