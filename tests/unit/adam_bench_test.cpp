// run_adam_benchmark on a small size: fields filled, consistent with each other, JSON complete.
// No timing assertions beyond "positive and finite".
#include <gtest/gtest.h>

#include <cmath>
#include <string>

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
  o.params = std::int64_t{1} << 50;  // 16 PB of fp32 state
  o.repeats = 1;
  EXPECT_THROW(zob::run_adam_benchmark(o), zob::DeviceError);
}
