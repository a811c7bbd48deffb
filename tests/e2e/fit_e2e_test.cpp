// Issue 38, --fit: the search for the fastest DeepSpeed settings that fit, through the real
// binary on the CPU device. The model is split into three sub-groups of 4M elements (16 MB
// of fp32 each, so each device tensor has a caching-pool segment of its own): ratio 1 keeps
// none on the device, 0.9 none either (the same split), 0.5 one, 0 all three.
#include <gtest/gtest.h>
#include <sys/prctl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "e2e_support.hpp"
#include "fault_support.hpp"

namespace {

using namespace zob_e2e;

std::vector<std::string> fit_run(std::vector<std::string> extra) {
  std::vector<std::string> args{
      "--device",   "cpu",       "--hidden",         "512",     "--layers", "4", "--batch",  "1",
      "--seq",      "16",        "--vocab",          "1024",    "--steps",  "2", "--warmup", "1",
      "--schedule", "deepspeed", "--sub-group-size", "4000000", "--fit"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

const nlohmann::json* candidate(const nlohmann::json& fit, double ratio, const std::string& arm) {
  for (const auto& c : fit.at("candidates")) {
    if (c.at("offload_ratio").get<double>() == ratio && c.at("arm") == arm) return &c;
  }
  return nullptr;
}

// The dry run's device bytes per ratio (--fit --dry-run plans the search's ratios).
std::vector<std::uint64_t> planned_device(const std::string& ratios, const std::string& json) {
  const Result r = run_bench(fit_run({"--offload-ratio", ratios, "--dry-run", "--json", json}));
  EXPECT_EQ(r.rc, 0) << r.err;
  std::vector<std::uint64_t> out;
  const auto doc = nlohmann::json::parse(read_text(json));  // outlives the loop below
  for (const auto& p : doc.at("plan").at("configurations")) out.push_back(p.at("device_bytes"));
  return out;
}

// Without --offload-ratio the dry run plans the default ratios; under a device limit that
// ratio 0 does not fit, the dry run still passes (the search skips it) and marks it.
TEST(Fit, TheDryRunPlansTheDefaultRatios) {
  const std::string json = temp_path("fit-dry.json");
  const std::vector<std::uint64_t> device = planned_device("1,0.75,0.5,0.25,0", json);
  ASSERT_EQ(device.size(), 5u);
  const std::string limit = std::to_string((device[3] + device[4]) / 2);
  const Result r = run_bench(fit_run({"--dry-run", "--device-memory", limit, "--json", json}));
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto points = nlohmann::json::parse(read_text(json)).at("plan").at("configurations");
  ASSERT_EQ(points.size(), 5u);
  std::vector<double> ratios;
  for (const auto& p : points) ratios.push_back(p.at("offload_ratio"));
  EXPECT_EQ(ratios, (std::vector<double>{1.0, 0.75, 0.5, 0.25, 0.0}));
  EXPECT_FALSE(points[4].at("fits").get<bool>()) << points[4];
  EXPECT_TRUE(points[3].at("fits").get<bool>()) << points[3];
  EXPECT_EQ(points[4].at("device_sub_groups"), points[4].at("sub_groups"));
  EXPECT_EQ(points[0].at("device_sub_groups"), 0);
}

// Each candidate carries its ratio's plan; a ratio that does not fit is skipped before any arm
// with the pre-flight's reason, a ratio with an earlier one's split is skipped as that, the
// baseline (ratio 1, pageable) runs beside --arms, and the rest run every round.
TEST(Fit, SkipsWhatDoesNotFitAndRepeatsNoSplit) {
  const std::string json = temp_path("fit-skip.json");
  const std::vector<std::uint64_t> device = planned_device("1,0.9,0.5,0", json);
  ASSERT_EQ(device.size(), 4u);
  // Ratio 0 adds two sub-groups' 16 B/param of state (less the copy-back chunk it no longer
  // needs): just below its plan, ratio 0.5 still runs, its pool's reserved segments included.
  ASSERT_GT(device[3], device[2] + 40'000'000u);
  const std::string limit = std::to_string(device[3] - 1);
  const Result r = run_bench(fit_run({"--offload-ratio", "1,0.9,0.5,0", "--device-memory", limit,
                                      "--repeats", "2", "--json", json}),
                             {}, nullptr, 170);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto fit = nlohmann::json::parse(read_text(json)).at("fit");
  ASSERT_EQ(fit.at("candidates").size(), 9u) << fit;  // 4 ratios x 2 arms + the baseline
  for (const std::string arm : {"registered", "unregistered"}) {
    SCOPED_TRACE(arm);
    const auto* one = candidate(fit, 1.0, arm);
    const auto* same = candidate(fit, 0.9, arm);
    const auto* half = candidate(fit, 0.5, arm);
    const auto* none = candidate(fit, 0.0, arm);
    ASSERT_TRUE(one && same && half && none);
    EXPECT_EQ(one->at("planned_device_bytes"), device[0]);
    EXPECT_EQ(half->at("planned_device_bytes"), device[2]);
    EXPECT_EQ(none->at("planned_device_bytes"), device[3]);
    EXPECT_TRUE(one->at("skipped").is_null()) << *one;
    EXPECT_EQ(one->at("rounds_ok"), 2) << *one;
    EXPECT_EQ(half->at("rounds_ok"), 2) << *half;
    EXPECT_EQ(half->at("device_sub_groups"), 1) << *half;
    EXPECT_EQ(same->at("rounds"), 0);
    EXPECT_EQ(same->at("skipped").get<std::string>().rfind("same split as ratio 1", 0), 0u)
        << *same;
    EXPECT_EQ(none->at("rounds"), 0);
    EXPECT_NE(none->at("skipped").get<std::string>().find("does not fit: an arm needs"),
              std::string::npos)
        << *none;
    // The measured peak of what ran stays within the limit the plan held it to.
    EXPECT_LE(half->at("gpu_peak_gb").get<double>() * 1e9, std::stod(limit)) << *half;
    EXPECT_LT(half->at("planned_locked_bytes").get<std::uint64_t>(),
              one->at("planned_locked_bytes").get<std::uint64_t>());
  }
  const auto* base = candidate(fit, 1.0, "pageable");
  ASSERT_NE(base, nullptr);
  EXPECT_TRUE(base->at("baseline").get<bool>());
  EXPECT_EQ(base->at("rounds_ok"), 2);
  EXPECT_EQ(base->at("planned_locked_bytes"), 0);
  EXPECT_NE(r.err.find("fit: skipped ratio 0 registered: does not fit"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("the search's 10 arm runs take about"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("fit: 0.9    registered"), std::string::npos) << r.out;
}

// A candidate that is plainly slower (its steps made ten times as long by a test hook) is not the
// winner; the winner is the fastest candidate of the table, and the settings printed and in
// DRIVERRESULT are its arm's, after a margin over the baseline whose interval excludes 1.0.
TEST(Fit, TheWinnerIsTheFastestAndTheSettingsAreItsArms) {
  const std::string json = temp_path("fit-winner.json");
  const Result r = run_bench(fit_run({"--offload-ratio", "1", "--repeats", "3", "--json", json}),
                             {{"ZOB_TEST_CHILD_FAULT", "pageable:slow"}}, nullptr, 170);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(read_text(json));
  const auto& fit = j.at("fit");
  const auto& cands = fit.at("candidates");
  ASSERT_TRUE(fit.at("winner").is_number()) << fit;
  const auto& won = cands.at(fit.at("winner").get<std::size_t>());
  int ran = 0;
  for (const auto& c : cands) {
    if (c.at("step_s").is_null()) continue;
    ++ran;
    EXPECT_LE(won.at("step_s"), c.at("step_s")) << c;
  }
  EXPECT_EQ(ran, 3) << fit;  // --offload-ratio 1 alone: registered, unregistered, the baseline
  EXPECT_NE(won.at("arm"), "pageable");
  const auto& margin = fit.at("over_baseline");
  ASSERT_TRUE(margin.is_object()) << fit;
  EXPECT_TRUE(margin.at("conclusive").get<bool>()) << margin;
  EXPECT_GT(margin.at("interval_low").get<double>(), 1.0) << margin;
  EXPECT_TRUE(fit.at("settings_withheld").is_null());
  const auto& s = j.at("settings");
  EXPECT_EQ(s.at("arm"), won.at("arm"));
  EXPECT_EQ(s.at("ds_config").at("zero_optimization.offload_optimizer.pin_memory"), true);
  EXPECT_FALSE(s.at("ds_config").contains("zero_optimization.offload_optimizer.ratio"));
  EXPECT_EQ(s.at("env").at("DS_PIN_MEMORY_REGISTER_DEVICE"),
            won.at("arm") == "registered" ? "1" : "0");
  EXPECT_EQ(s.at("memlock_bytes"), won.at("locked_bytes"));
  for (const auto& line : s.at("lines")) {
    EXPECT_NE(r.out.find("settings: " + line.get<std::string>() + "\n"), std::string::npos)
        << line << "\n"
        << r.out;
  }
  EXPECT_NE(r.out.find("fit: winner: ratio 1, " + won.at("arm").get<std::string>()),
            std::string::npos)
      << r.out;
}

// One round gives no interval: no settings follow, and the line says why.
TEST(Fit, OneRoundWithholdsTheSettings) {
  const std::string json = temp_path("fit-one.json");
  const Result r = run_bench(fit_run({"--offload-ratio", "1", "--repeats", "1", "--json", json}),
                             {{"ZOB_TEST_CHILD_FAULT", "pageable:slow"}}, nullptr, 120);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(read_text(json));
  EXPECT_TRUE(j.at("settings").at("arm").is_null()) << j.at("settings");
  EXPECT_NE(j.at("fit").at("settings_withheld").get<std::string>().find("one round"),
            std::string::npos);
  EXPECT_NE(r.out.find("settings: none: one round gives no interval"), std::string::npos) << r.out;
}

// A budget the first arm run already spends: the rest of the first round and every later
// round are cut, each said so, and no settings follow from the one candidate that ran.
TEST(Fit, TheBudgetCutsAndSaysWhat) {
  const std::string json = temp_path("fit-budget.json");
  const Result r = run_bench(
      fit_run({"--offload-ratio", "1", "--repeats", "3", "--fit-budget", "0.001", "--json", json}),
      {}, nullptr, 120);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto fit = nlohmann::json::parse(read_text(json)).at("fit");
  EXPECT_EQ(fit.at("rounds_run"), 1);
  int ran = 0, cut = 0;
  for (const auto& c : fit.at("candidates")) {
    ran += c.at("rounds").get<int>();
    if (c.at("skipped").is_string() && c.at("skipped").get<std::string>().rfind("cut:", 0) == 0)
      ++cut;
  }
  EXPECT_EQ(ran, 1) << fit;
  EXPECT_EQ(cut, 2) << fit;
  EXPECT_EQ(fit.at("cut").size(), 3u) << fit;  // two candidates, then rounds 2-3 of all
  EXPECT_NE(r.out.find("fit: cut: --fit-budget 0.001 s cut rounds 2-3"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("fit: cut: ratio 1 unregistered: cut: --fit-budget"), std::string::npos)
      << r.out;
  EXPECT_FALSE(fit.at("settings_withheld").is_null());
}

// A candidate the plan let through (--skip-preflight: nothing is skipped from the plan) that
// runs out of device memory does not fit: reported so, run no more rounds, left out of the
// standard reports, and no failure of the search (exit 0), the winner one of the rest.
TEST(Fit, RunningOutOfDeviceMemoryIsNotFitting) {
  const std::string json = temp_path("fit-oom.json");
  const std::vector<std::uint64_t> device = planned_device("1,0.5", json);
  ASSERT_EQ(device.size(), 2u);
  ASSERT_GT(device[1], device[0] + 40'000'000u);  // one sub-group's 16 B/param on the device
  const std::string limit = std::to_string(device[1] - 1);
  const Result r =
      run_bench(fit_run({"--offload-ratio", "1,0.5", "--arms", "registered", "--device-memory",
                         limit, "--skip-preflight", "--repeats", "2", "--json", json}),
                {}, nullptr, 170);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(read_text(json));
  const auto& fit = j.at("fit");
  const auto* half = candidate(fit, 0.5, "registered");
  const auto* one = candidate(fit, 1.0, "registered");
  ASSERT_TRUE(half && one) << fit;
  EXPECT_EQ(half->at("rounds"), 1) << *half;  // not run again in round 2
  EXPECT_EQ(half->at("rounds_ok"), 0) << *half;
  EXPECT_EQ(half->at("skipped").get<std::string>().rfind(
                "does not fit: ran out of device memory at run time (out of memory", 0),
            0u)
      << *half;
  EXPECT_EQ(one->at("rounds_ok"), 2) << *one;
  ASSERT_TRUE(fit.at("winner").is_number()) << fit;
  EXPECT_EQ(fit.at("candidates").at(fit.at("winner").get<std::size_t>()).at("offload_ratio"), 1.0);
  for (const auto& point : j.at("sweep")) {  // ratio 0.5 is in no report but fit's
    EXPECT_EQ(point.at("offload_ratio"), 1.0) << j.at("sweep");
  }
  EXPECT_EQ(j.at("workload").at("offload_ratio"), 1.0);
  EXPECT_NE(r.err.find("fit: ratio 0.5 registered: planned"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("skipped: does not fit: ran out of device memory"), std::string::npos)
      << r.out;
}

// Refused before any arm: a schedule without the ratio, a second sweep, nothing that fits.
TEST(Fit, BadInputIsOneLineAndExitTwo) {
  Result r = run_bench(fit_run({"--schedule", "stock"}));
  EXPECT_EQ(r.rc, 2) << r.err;
  expect_one_error_line(r, "add --schedule deepspeed");
  r = run_bench(fit_run({"--chunk-elems", "1000,2000"}));
  EXPECT_EQ(r.rc, 2) << r.err;
  expect_one_error_line(r, "give one value of each");
  r = run_bench(fit_run({"--device-memory", "1MB"}));
  EXPECT_EQ(r.rc, 2) << r.err;
  expect_one_error_line(r, "--fit: no candidate fits (ratio 1 registered: does not fit");
  EXPECT_EQ(r.out.find("DRIVERRESULT="), std::string::npos) << r.out;
}

}  // namespace

int main(int argc, char** argv) {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // the arms' children are reaped here, not by init
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
