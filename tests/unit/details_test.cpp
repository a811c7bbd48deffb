// --repeats rounds, step statistics, spread warnings, round validation and the added report
// sections (src/report/details.cpp), against direct computations on fresh random data.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <sstream>

#include "random_seed.hpp"
#include "report/details.hpp"
#include "report/json_util.hpp"
#include "report/report.hpp"
#include "zob/backends.hpp"

namespace {

struct Rng {
  std::mt19937_64 gen{zob::test::random_seed("details_test Rng")};
  double uniform(double lo, double hi) { return std::uniform_real_distribution<>(lo, hi)(gen); }
  int integer(int lo, int hi) { return std::uniform_int_distribution<>(lo, hi)(gen); }
  std::string hex() { return fmt::format("{:016x}", gen()); }
};

// One arm run; losses and checksum come from `seed` so runs of one seed agree bit for bit.
zob::ArmResult arm_run(Rng& rng, zob::Arm arm, int warmup, int steps, std::uint64_t seed,
                       double base_s, double jitter) {
  zob::ArmResult r;
  r.arm = arm;
  r.ok = true;
  r.device = "cpu";
  r.model = "synthetic-h64-l2";
  r.params = 1000;
  r.warmup = warmup;
  r.steps = steps;
  r.loop = "copy_back";
  std::mt19937_64 numbers(seed);
  for (int i = 0; i < warmup + steps; ++i) {
    zob::StepSample s;
    s.wall_s = base_s * (1 + rng.uniform(-jitter, jitter));
    s.loss = static_cast<float>(std::uniform_real_distribution<>(-1e3, 1e3)(numbers));
    s.phases["adam"] = {-1, rng.uniform(0.1, 0.2), 28'000, 1000};
    s.phases["grad_offload"] = {rng.uniform(0.01, 0.02), rng.uniform(0.01, 0.03), 4000, 1000};
    r.samples.push_back(s);
  }
  const auto timed = r.timed_step_s();
  r.step_avg_s =
      std::accumulate(timed.begin(), timed.end(), 0.0) / static_cast<double>(timed.size());
  r.step_min_s = *std::min_element(timed.begin(), timed.end());
  r.param_checksum = fmt::format("{:016x}", numbers());
  r.registration = arm == zob::Arm::registered ? "cudaHostRegister" : "none";
  r.registration_verified = arm == zob::Arm::registered;
  r.registered_at_driver = arm == zob::Arm::registered ? "all" : "none";
  r.locked_bytes = 8000;
  r.registered_bytes = arm == zob::Arm::registered ? (std::uint64_t{3} << 30) : 0;
  r.register_s = arm == zob::Arm::registered ? rng.uniform(0.1, 0.5) : 0;
  r.pid = rng.integer(2, 1 << 22);
  return r;
}

// R rounds of registered + unregistered, combined as the driver does.
zob::RunResult rounds_run(Rng& rng, int rounds, double jitter = 0.01) {
  zob::RunResult run;
  run.config.arms = {zob::Arm::registered, zob::Arm::unregistered};
  run.config.warmup = rng.integer(0, 2);
  run.config.steps = rng.integer(2, 5);
  run.config.repeats = rounds;
  const std::uint64_t seed = rng.gen();
  for (int k = 0; k < rounds; ++k) {
    run.rounds.push_back({arm_run(rng, zob::Arm::registered, run.config.warmup, run.config.steps,
                                  seed, rng.uniform(0.2, 0.3), jitter),
                          arm_run(rng, zob::Arm::unregistered, run.config.warmup, run.config.steps,
                                  seed, rng.uniform(0.5, 0.7), jitter)});
  }
  for (zob::Arm a : run.config.arms) run.arms.push_back(zob::combine_rounds(zob::runs_of(run, a)));
  return run;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

TEST(Rounds, CombinedArmCoversEveryRoundsTimedSteps) {
  Rng rng;
  const int R = rng.integer(2, 5);
  const zob::RunResult run = rounds_run(rng, R);
  for (std::size_t i = 0; i < 2; ++i) {
    const zob::ArmResult& c = run.arms[i];
    std::vector<double> all;
    for (const auto& round : run.rounds) {
      const auto t = round[i].timed_step_s();
      all.insert(all.end(), t.begin(), t.end());
    }
    EXPECT_TRUE(c.ok);
    EXPECT_EQ(c.timed_step_s(), all);
    EXPECT_NEAR(c.step_avg_s, std::accumulate(all.begin(), all.end(), 0.0) / all.size(), 1e-12);
    EXPECT_EQ(c.step_min_s, *std::min_element(all.begin(), all.end()));
    EXPECT_EQ(c.samples.size(), static_cast<std::size_t>(run.config.warmup + R * run.config.steps));
    EXPECT_EQ(c.pid, run.rounds[0][i].pid);
  }
  EXPECT_TRUE(zob::validate_arms(run).ok());
}

TEST(Rounds, AFailedRoundFailsTheArmAndIsNamed) {
  Rng rng;
  zob::RunResult run = rounds_run(rng, 3);
  run.rounds[1][1].ok = false;
  run.rounds[1][1].error = "killed by signal " + rng.hex();
  const auto c = zob::combine_rounds(zob::runs_of(run, zob::Arm::unregistered));
  EXPECT_FALSE(c.ok);
  EXPECT_EQ(c.error, "round 2: " + run.rounds[1][1].error);
}

TEST(Rounds, SpeedupMedianAndIntervalComeFromPerRoundMedians) {
  Rng rng;
  const int R = rng.integer(6, 8);
  zob::RunResult run = rounds_run(rng, R);
  std::vector<double> ratios;
  for (const auto& round : run.rounds) {
    ratios.push_back(median(round[1].timed_step_s()) / median(round[0].timed_step_s()));
  }
  const auto j = zob::driver_result_json(run);
  EXPECT_NEAR(j.at("speedup_median").get<double>(), median(ratios), 1e-12);
  const auto& iv = j.at("speedup_interval");
  EXPECT_EQ(iv.at("method"), "order-statistics");
  EXPECT_EQ(iv.at("rounds"), R);
  auto sorted = ratios;
  std::sort(sorted.begin(), sorted.end());
  // n = 6..8: the >= 95 % order-statistic interval is [x_(1), x_(n)] (k = 1).
  EXPECT_EQ(iv.at("low").get<double>(), sorted.front());
  EXPECT_EQ(iv.at("high").get<double>(), sorted.back());
  EXPECT_GE(iv.at("confidence").get<double>(), 0.95);
  // speedup (the Python script's) stays the ratio of the means over all timed steps.
  EXPECT_NEAR(j.at("speedup").get<double>(), run.arms[1].step_avg_s / run.arms[0].step_avg_s,
              1e-12);
  EXPECT_EQ(j.at("repeats"), R);
  EXPECT_EQ(j.at("registered").at("rounds").size(), static_cast<std::size_t>(R));
  for (int k = 0; k < R; ++k) {
    const auto& e = j.at("unregistered").at("rounds")[static_cast<std::size_t>(k)];
    EXPECT_EQ(e.at("round"), k + 1);
    EXPECT_EQ(e.at("pid"), run.rounds[static_cast<std::size_t>(k)][1].pid);
    EXPECT_NEAR(e.at("step_median_s").get<double>(),
                median(run.rounds[static_cast<std::size_t>(k)][1].timed_step_s()), 1e-15);
  }
}

TEST(Rounds, ARoundThatDisagreesWithTheFirstIsNamed) {
  Rng rng;
  zob::RunResult run = rounds_run(rng, 3);
  run.rounds[2][0].param_checksum = rng.hex();
  for (zob::Arm a : {zob::Arm::registered, zob::Arm::unregistered}) {
    run.arms[a == zob::Arm::registered ? 0 : 1] = zob::combine_rounds(zob::runs_of(run, a));
  }
  auto v = zob::validate_arms(run);
  EXPECT_FALSE(v.ok());
  EXPECT_FALSE(v.rounds_equal);
  EXPECT_NE(v.first_difference.find("arm registered round 3 vs round 1: param_checksum"),
            std::string::npos)
      << v.first_difference;
  // A loss difference is found before the checksum and names the step.
  run.rounds[2][0].param_checksum = run.rounds[0][0].param_checksum;
  const std::size_t step = static_cast<std::size_t>(rng.integer(0, run.config.warmup + 1));
  run.rounds[1][1].samples[step].loss = std::nextafter(run.rounds[1][1].samples[step].loss, 1e30f);
  v = zob::validate_arms(run);
  EXPECT_FALSE(v.rounds_equal);
  EXPECT_NE(v.first_difference.find(fmt::format("arm unregistered round 2 vs round 1: loss of "
                                                "step {} ",
                                                step + 1)),
            std::string::npos)
      << v.first_difference;
  EXPECT_EQ(zob::driver_result_json(run).at("validation").at("rounds_equal"), false);
}

TEST(Details, StepStatsAndSpreadWarning) {
  Rng rng;
  zob::RunResult quiet = rounds_run(rng, 1, 0.001);  // spread far below 5 %
  auto j = zob::driver_result_json(quiet);
  // The one warning of a quiet CPU run: registration does not apply there.
  ASSERT_EQ(j.at("warnings").size(), 1u) << j.at("warnings");
  EXPECT_NE(j["warnings"][0].get<std::string>().find("does not apply on the CPU device"),
            std::string::npos);
  const auto times = quiet.arms[0].timed_step_s();
  const auto& st = j.at("registered").at("step_stats");
  EXPECT_EQ(st.at("n"), times.size());
  EXPECT_NEAR(st.at("median").get<double>(), median(times), 1e-15);
  const double mean = std::accumulate(times.begin(), times.end(), 0.0) / times.size();
  double ss = 0;
  for (double t : times) ss += (t - mean) * (t - mean);
  EXPECT_NEAR(st.at("stddev").get<double>(), std::sqrt(ss / (times.size() - 1)), 1e-12);

  // Make the unregistered arm noisy: one step 50 % slower.
  zob::RunResult noisy = quiet;
  auto& samples = noisy.arms[1].samples;
  samples.back().wall_s *= 1.5;
  const auto w = zob::spread_warnings(noisy);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].rfind("arm unregistered: step times spread ", 0), 0u) << w[0];
  EXPECT_EQ(zob::driver_result_json(noisy).at("warnings")[0], w[0]);
}

TEST(Report, PhasesKeepTheirKeysAndAddBandwidth) {
  Rng rng;
  const zob::RunResult run = rounds_run(rng, 2);
  const auto j = nlohmann::json::parse(zob::dump_json(zob::driver_result_json(run)));
  const auto& adam = j.at("registered").at("phases").at("adam");
  for (const char* key : {"device_s", "host_s", "bytes", "params", "gb_per_s", "gparams_per_s"}) {
    EXPECT_TRUE(adam.contains(key)) << key;
  }
  EXPECT_TRUE(adam.at("device_s").is_null());
  EXPECT_EQ(adam.at("bytes"), 28'000);
  std::vector<double> host;
  for (const auto& round : run.rounds) {
    for (std::size_t i = static_cast<std::size_t>(run.config.warmup); i < round[0].samples.size();
         ++i) {
      host.push_back(round[0].samples[i].phases.at("adam").host_s);
    }
  }
  EXPECT_NEAR(adam.at("host_s").get<double>(), median(host), 1e-15);
  EXPECT_NEAR(adam.at("gb_per_s").get<double>(), 28'000 / median(host) / 1e9, 1e-15);
  const auto& go = j.at("registered").at("phases").at("grad_offload");
  EXPECT_TRUE(go.at("device_s").is_number());
  EXPECT_NEAR(go.at("gb_per_s").get<double>(), 4000 / go.at("device_s").get<double>() / 1e9, 1e-15);
}

// --gpus N: per phase the rank with the longest device time (host time where the phase has
// none), with that rank's times; then the arm's bound. One rank: no section.
TEST(Report, RankSectionNamesTheSlowestRankPerPhase) {
  Rng rng;
  zob::RunResult run = rounds_run(rng, 1);
  EXPECT_EQ(zob::render_rank_section(run), "");
  zob::ArmResult& arm = run.arms[0];
  const int ranks = rng.integer(2, 5);
  for (int r = 0; r < ranks; ++r) {
    zob::RankResult k;
    k.rank = r;
    k.ok = true;
    k.phases["adam"] = {-1, rng.uniform(0.1, 0.2), 28'000, 1000};
    k.phases["all_gather"] = {rng.uniform(0.001, 0.002), rng.uniform(0.01, 0.02), 2000, 1000};
    arm.ranks.push_back(k);
  }
  arm.bound.bound_s = rng.uniform(0.1, 0.2);
  arm.bound.ratio = rng.uniform(1, 2);
  const auto slowest = [&](const char* phase, bool device) {
    const auto it =
        std::max_element(arm.ranks.begin(), arm.ranks.end(), [&](const auto& a, const auto& b) {
          const auto& pa = a.phases.at(phase);
          const auto& pb = b.phases.at(phase);
          return device ? pa.device_s < pb.device_s : pa.host_s < pb.host_s;
        });
    return *it;
  };
  const std::string text = zob::render_rank_section(run);
  const zob::RankResult adam = slowest("adam", false);
  const zob::RankResult gather = slowest("all_gather", true);
  EXPECT_NE(text.find(fmt::format("{:<15}{:<14}{:>13}{:>12}{:>12}", "adam", "registered", adam.rank,
                                  "-", fmt::format("{:.3f}", adam.phases.at("adam").host_s * 1e3))),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find(fmt::format("{:<15}{:<14}{:>13}{:>12}", "all_gather", "registered", gather.rank,
                            fmt::format("{:.3f}", gather.phases.at("all_gather").device_s * 1e3))),
      std::string::npos)
      << text;
  EXPECT_NE(text.find(fmt::format("bound: registered: {:.4f} s, step/bound {:.2f}",
                                  arm.bound.bound_s, arm.bound.ratio)),
            std::string::npos)
      << text;
}

TEST(Report, RegistrationPerGibAndItsLine) {
  Rng rng;
  const zob::RunResult run = rounds_run(rng, 1);
  const auto& reg = run.arms[0];
  const auto j = zob::driver_result_json(run);
  EXPECT_NEAR(j.at("registered").at("register_s_per_gib").get<double>(), reg.register_s / 3.0,
              1e-12);
  EXPECT_TRUE(j.at("unregistered").at("register_s_per_gib").is_null());
  const std::string lines = zob::render_registration_lines(run);
  EXPECT_NE(lines.find("registration: registered: 8.00 kB locked, 3.22 GB registered "
                       "(cudaHostRegister, verified) in " +
                       fmt::format("{:.4f} s ({:.3f} s/GiB)", reg.register_s, reg.register_s / 3)),
            std::string::npos)
      << lines;
  EXPECT_NE(lines.find("registration: unregistered: 8.00 kB locked, 0 B registered (none, none "
                       "registered at the driver)\n"),
            std::string::npos)
      << lines;
  // Only the driver's answer says "none registered": an arm that was never asked says nothing.
  zob::RunResult unasked = run;
  unasked.arms[1].registered_at_driver = "not-checked";
  EXPECT_NE(zob::render_registration_lines(unasked).find(
                "registration: unregistered: 8.00 kB locked, 0 B registered (none)\n"),
            std::string::npos);
}

// The hostalloc arm's runtime call comes from the backend table (the report names no backend).
TEST(Report, RuntimePinnedMemoryNamesTheBackendsCall) {
  Rng rng;
  zob::RunResult run = rounds_run(rng, 1);
  run.arms[0].runtime_pinned_bytes = 4096;
  for (const zob::BackendInfo& b : zob::kBackends) {
    run.arms[0].device = b.name;
    const std::string lines = zob::render_registration_lines(run);
    EXPECT_NE(lines.find(fmt::format("4.10 kB pinned by the runtime ({})", b.host_alloc)),
              std::string::npos)
        << lines;
  }
  EXPECT_STREQ(zob::find_backend("cuda")->host_alloc, "cudaMallocHost");
  EXPECT_STREQ(zob::find_backend("xpu")->host_alloc, "zeMemAllocHost");
}

TEST(Report, EnvironmentHeaderAndJson) {
  Rng rng;
  zob::RunResult run = rounds_run(rng, 1);
  EXPECT_EQ(zob::render_environment_header(run), "");
  EXPECT_TRUE(zob::driver_result_json(run).at("environment").is_null());
  run.has_environment = true;
  run.host = zob::collect_host_environment();
  run.device_info = {"cpu", "CPU " + rng.hex(), "rt", "drv", "", 1u << 30, -1};
  const std::string header = zob::render_environment_header(run);
  std::istringstream in(header);
  int n = 0;
  for (std::string line; std::getline(in, line); ++n) EXPECT_EQ(line.rfind("# ", 0), 0u) << line;
  EXPECT_GE(n, 5);
  EXPECT_NE(header.find(run.device_info.name), std::string::npos);
  EXPECT_NE(header.find("# pcie: n/a"), std::string::npos);
  const auto text = zob::render_stdout(run);
  EXPECT_EQ(text.rfind(header, 0), 0u);  // the header comes first
  EXPECT_EQ(zob::driver_result_json(run).at("environment").at("device").at("name"),
            run.device_info.name);
}

}  // namespace
