// The real binary, issue 26 ("a default answer with its error bar, the settings to act on it"):
// the default rounds per device (several on an accelerator, one on the CPU device), the
// verdict's interval and its coverage, the settings lines after the verdict and in
// DRIVERRESULT, the compact sweep entry, and --dry-run --skip-preflight's pre-flight line.
#include <gtest/gtest.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "e2e_support.hpp"

namespace {

using namespace zob_e2e;

// The small workload without --steps / --warmup / --repeats: what the device's defaults give.
std::vector<std::string> bare(const std::string& device, std::vector<std::string> extra = {}) {
  std::vector<std::string> args{"--device", device, "--hidden", "64", "--layers", "2",
                                "--batch",  "2",    "--seq",    "16", "--vocab",  "512"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

std::vector<std::string> lines_starting(const std::string& out, const std::string& prefix) {
  std::vector<std::string> found;
  for (const auto& l : lines_of(out)) {
    if (l.rfind(prefix, 0) == 0) found.push_back(l);
  }
  return found;
}

// The CPU device keeps one round of 2 warmup + 4 timed steps, and its settings say there is
// nothing to set; the sweep entry does not repeat the arms.
TEST(Advice, TheCpuDeviceKeepsOneRoundAndHasNoSettings) {
  for (const char* device : {"cpu", "auto"}) {  // no accelerator here: auto is the CPU device
    const Result r = run_bench(bare(device));
    expect_no_leftovers();
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto j = driver_result(r.out);
    EXPECT_EQ(j.at("repeats"), 1) << device;
    EXPECT_EQ(j.at("workload").at("steps"), 4) << device;
    EXPECT_EQ(j.at("workload").at("warmup"), 2) << device;
    const auto settings = lines_starting(r.out, "settings: ");
    ASSERT_EQ(settings.size(), 1u) << r.out;
    EXPECT_NE(settings[0].find("nothing is registered on the CPU device"), std::string::npos);
    EXPECT_EQ(j.at("settings").at("device"), "cpu");
    EXPECT_TRUE(j.at("settings").at("arm").is_null());
    ASSERT_EQ(j.at("sweep").size(), 1u);
    EXPECT_FALSE(j["sweep"][0].contains("registered"));
  }
}

// --dry-run --skip-preflight: the run would go ahead, so the pre-flight line does not say
// "refused"; without --skip-preflight it does, and exits 2.
TEST(Advice, DryRunWithSkipPreflightDoesNotSayRefused) {
  const std::vector<std::string> huge{"--device", "cpu",  "--hidden", "65536",
                                      "--layers", "1000", "--dry-run"};
  const Result refused = run_bench(huge);
  EXPECT_EQ(refused.rc, 2) << refused.err;
  ASSERT_EQ(lines_starting(refused.out, "pre-flight: refused: ").size(), 1u) << refused.out;
  auto skip = huge;
  skip.push_back("--skip-preflight");
  const Result r = run_bench(skip);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.find("refused"), std::string::npos) << r.out;
  EXPECT_EQ(lines_starting(r.out,
                           "pre-flight: skipped by --skip-preflight (the check would "
                           "refuse: ")
                .size(),
            1u)
      << r.out;
}

#ifdef ZOB_FAKE_ZE_DRIVER
const Env kXpu{{"ZE_ENABLE_ALT_DRIVERS", ZOB_FAKE_ZE_DRIVER}};
// The fake driver stages copies of memory it does not know (neither allocated through it nor
// imported) 2 ms each, as a real driver does: the registered arm's copies are faster, so three
// rounds give a conclusive verdict.
const Env kXpuStaged{{"ZE_ENABLE_ALT_DRIVERS", ZOB_FAKE_ZE_DRIVER}, {"FAKE_ZE_STAGING_US", "2000"}};

// On an accelerator (the fake Level Zero driver) the default is 3 rounds of 1 + 1 steps; the
// verdict's first line gives the median, the interval and its coverage (3 rounds: 75 %);
// the settings follow the arm that won a conclusive verdict.
TEST(Advice, AnAcceleratorDefaultsToRoundsWithAnIntervalAndSettings) {
  const Result r = run_bench(bare("xpu"), kXpuStaged, nullptr, 180);
  expect_no_leftovers();
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = driver_result(r.out);
  EXPECT_EQ(j.at("repeats"), 3);
  EXPECT_EQ(j.at("workload").at("steps"), 1);
  EXPECT_EQ(j.at("workload").at("warmup"), 1);
  EXPECT_EQ(j.at("registered").at("steps"), 1);  // v1's key: timed steps per arm run
  const auto v = j.at("verdicts").at(0);
  EXPECT_EQ(v.at("rounds"), 3);
  EXPECT_DOUBLE_EQ(v.at("interval_confidence").get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j.at("speedup_interval").at("confidence").get<double>(), 0.75);
  const auto verdicts = lines_starting(r.out, "verdict: ");
  ASSERT_FALSE(verdicts.empty()) << r.out;
  EXPECT_NE(verdicts[0].find("3 rounds, 75 % coverage"), std::string::npos) << verdicts[0];
  // Staged copies make the registered arm the faster, every round: the verdict holds.
  ASSERT_EQ(v.at("conclusive"), true) << r.out;
  EXPECT_EQ(v.at("fast"), "registered");
  const auto& s = j.at("settings");
  EXPECT_EQ(s.at("arm"), "registered");
  EXPECT_EQ(s.at("device"), "xpu");
  const auto printed = lines_starting(r.out, "settings: ");
  ASSERT_EQ(printed.size(), s.at("lines").size()) << r.out;
  for (std::size_t i = 0; i < printed.size(); ++i) {
    EXPECT_EQ(printed[i], "settings: " + s["lines"][i].get<std::string>());
  }
  EXPECT_EQ(s.at("deepspeed_has_it"), false);  // no DeepSpeed setting registers on xpu yet
  EXPECT_NE(printed[0].find("deepspeedai/DeepSpeed#8315"), std::string::npos) << printed[0];
}

// --repeats 1 stays for a quick look and says it has no interval, so no settings follow it
// (one line says why); a given --steps is kept while the rounds stay the device's.
TEST(Advice, RepeatsOneIsAQuickLookAndGivenStepsAreKept) {
  const Result quick = run_bench(bare("xpu", {"--repeats", "1"}), kXpuStaged, nullptr, 120);
  ASSERT_EQ(quick.rc, 0) << quick.err;
  const auto q = driver_result(quick.out);
  EXPECT_EQ(q.at("repeats"), 1);
  EXPECT_TRUE(q.at("verdicts").at(0).at("interval_confidence").is_null());
  EXPECT_NE(quick.out.find("(one round, no interval"), std::string::npos) << quick.out;
  const auto settings = lines_starting(quick.out, "settings: ");
  ASSERT_EQ(settings.size(), 1u) << quick.out;
  EXPECT_EQ(settings[0],
            "settings: none: the verdict is inconclusive: 1 round in which both arms completed "
            "gives no interval; run with --repeats 5 or more (no DeepSpeed setting follows from "
            "this run)");
  EXPECT_TRUE(q.at("settings").at("arm").is_null());
  EXPECT_EQ(q.at("settings").at("device"), "xpu");
  const Result steps = run_bench(bare("xpu", {"--steps", "2"}), kXpu, nullptr, 180);
  ASSERT_EQ(steps.rc, 0) << steps.err;
  const auto s = driver_result(steps.out);
  EXPECT_EQ(s.at("repeats"), 3);
  EXPECT_EQ(s.at("workload").at("steps"), 2);
  EXPECT_EQ(s.at("workload").at("warmup"), 1);
}

// Each arm the tool has, as the first comparison's winner or loser on xpu: the settings name
// the arm the verdict measured faster where the verdict holds, and none where it does not.
TEST(Advice, EveryArmPairOnXpuGetsSettingsOnlyWhenTheVerdictHolds) {
  for (const char* arms : {"registered,pageable", "registered,hostalloc"}) {
    const Result r = run_bench(bare("xpu", {"--steps", "1", "--warmup", "1", "--arms", arms}),
                               kXpuStaged, nullptr, 180);
    ASSERT_EQ(r.rc, 0) << arms << ": " << r.err;
    const auto j = driver_result(r.out);
    const auto& v = j.at("verdicts").at(0);
    const auto& s = j.at("settings");
    const auto printed = lines_starting(r.out, "settings: ");
    if (!v.at("conclusive").get<bool>()) {  // hostalloc's copies are not staged either
      EXPECT_TRUE(s.at("arm").is_null()) << arms;
      ASSERT_EQ(printed.size(), 1u) << r.out;
      EXPECT_EQ(printed[0].rfind("settings: none: the verdict is inconclusive: ", 0), 0u)
          << printed[0];
      continue;
    }
    const std::string won = v.at("fast");  // the faster arm as measured
    EXPECT_EQ(s.at("arm"), won) << arms;
    if (won == "pageable") {
      EXPECT_EQ(s.at("ds_config").at("zero_optimization.offload_optimizer.pin_memory"), false);
    } else if (won == "hostalloc") {
      EXPECT_EQ(s.at("env").at("DS_PIN_MEMORY_BACKEND"), "torch");
    } else {
      EXPECT_EQ(s.at("deepspeed_has_it"), false);
    }
  }
}
// Issue 23: the user's DeepSpeed step, projected across the saving this run measured, on the
// accelerator (three rounds: the saving's interval); and a --model run names the DeepSpeed
// host work the step does not contain, in the text and in DRIVERRESULT.
TEST(Advice, ProjectsTheUsersDeepSpeedStepAndNamesWhatIsNotContained) {
  const std::vector<std::string> args{"--device",
                                      "xpu",
                                      "--model",
                                      std::string(ZOB_SOURCE_DIR) + "/tests/models/tiny-qwen2",
                                      "--batch",
                                      "2",
                                      "--seq",
                                      "16",
                                      "--deepspeed-step",
                                      "7.5"};
  const Result r = run_bench(args, kXpuStaged, nullptr, 180);
  expect_no_leftovers();
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = driver_result(r.out);
  const auto& v = j.at("verdicts").at(0);
  ASSERT_EQ(v.at("conclusive"), true) << r.out;  // a projection only from a verdict that holds
  const auto& p = j.at("projection");
  ASSERT_TRUE(p.is_object()) << r.out;
  EXPECT_EQ(p.at("user_arm"), "unregistered");
  EXPECT_EQ(p.at("projected_arm"), "registered");
  const double saved = p.at("saved_s");
  EXPECT_LE(p.at("saved_low_s").get<double>(), saved);
  EXPECT_GE(p.at("saved_high_s").get<double>(), saved);
  // The projection's saving is the median over rounds of unregistered - registered round
  // medians, recomputed here from the arms' rounds in the same DRIVERRESULT (the verdict's
  // saved_s is a difference of averages: a different, noisier number on a loaded machine).
  std::vector<double> per_round;
  const auto& slow_rounds = j.at("unregistered").at("rounds");
  const auto& fast_rounds = j.at("registered").at("rounds");
  ASSERT_EQ(slow_rounds.size(), fast_rounds.size()) << r.out;
  for (std::size_t k = 0; k < slow_rounds.size(); ++k) {
    per_round.push_back(slow_rounds[k].at("step_median_s").get<double>() -
                        fast_rounds[k].at("step_median_s").get<double>());
  }
  ASSERT_EQ(per_round.size(), static_cast<std::size_t>(v.at("rounds").get<int>()));
  std::sort(per_round.begin(), per_round.end());
  const std::size_t n = per_round.size();
  const double median = n % 2 ? per_round[n / 2] : (per_round[n / 2 - 1] + per_round[n / 2]) / 2;
  EXPECT_NEAR(saved, median, 1e-9 + 1e-9 * std::fabs(median));
  EXPECT_DOUBLE_EQ(p.at("saved_low_s").get<double>(), per_round.front());
  EXPECT_DOUBLE_EQ(p.at("saved_high_s").get<double>(), per_round.back());
  EXPECT_DOUBLE_EQ(p.at("projected_s").get<double>(), 7.5 - saved);
  const auto printed = lines_starting(r.out, "projection: ");
  ASSERT_EQ(printed.size(), 1u) << r.out;
  EXPECT_NE(printed[0].find("your DeepSpeed step of 7.500 s (unregistered)"), std::string::npos)
      << printed[0];
  const auto& nc = j.at("not_contained");
  ASSERT_TRUE(nc.is_object()) << r.out;
  const long long layers = j.at("workload").at("layers");
  EXPECT_EQ(nc.at("deepspeed_hooked_modules").get<long long>(), 13 * layers + 6);
  const auto line = lines_starting(r.out, "not contained: ");
  ASSERT_EQ(line.size(), 1u) << r.out;
  EXPECT_NE(line[0].find(std::to_string(13 * layers + 6) + " modules"), std::string::npos);
}

#endif

// Issue 37: on the CPU device no projection follows (nothing is registered there), and a
// --deepspeed-arm that did not run is named instead of projecting with another pair's saving;
// each is one "projection: none:" line, and DRIVERRESULT's projection is null.
TEST(Advice, NoProjectionOnTheCpuDeviceNorFromAnArmThatDidNotRun) {
  struct Case {
    std::vector<std::string> extra;
    std::string says;
  };
  for (const Case& c :
       {Case{{"--deepspeed-step", "5"},
             "projection: none: nothing is registered on the CPU device; run on cuda or xpu"},
        Case{{"--deepspeed-step", "5", "--deepspeed-arm", "pageable"},
             "projection: none: --deepspeed-arm pageable is not among the arms that completed "
             "(registered, unregistered); add it to --arms (e.g. --arms registered,pageable)"}}) {
    auto args = bare("cpu", c.extra);
    args.insert(args.end(), {"--steps", "2", "--warmup", "1"});
    const Result r = run_bench(args);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(lines_starting(r.out, "projection: "), std::vector<std::string>{c.says}) << r.out;
    EXPECT_TRUE(driver_result(r.out).at("projection").is_null());
    // The settings say why not, too, and give no arm.
    const auto settings = lines_starting(r.out, "settings: ");
    ASSERT_EQ(settings.size(), 1u) << r.out;
    EXPECT_EQ(settings[0].rfind("settings: none: ", 0), 0u) << settings[0];
  }
}

// Bad input for the projection: one line naming the flag, exit 2, nothing run.
TEST(Advice, ProjectionFlagsRefuseBadValues) {
  for (const auto& bad : std::vector<std::vector<std::string>>{{"--deepspeed-step", "-1"},
                                                               {"--deepspeed-step", "fast"},
                                                               {"--deepspeed-arm", "pinned"}}) {
    const Result r = run_bench(bare("cpu", bad));
    EXPECT_EQ(r.rc, 2) << bad[0] << " " << bad[1];
    EXPECT_NE(r.err.find(bad[0]), std::string::npos) << r.err;
  }
}

}  // namespace

// A subreaper, as the other e2e binaries: arm children orphaned by a failure become ours, so
// expect_no_leftovers sees them.
int main(int argc, char** argv) {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
