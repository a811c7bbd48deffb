// Faults in the middle of the timed steps (issue 27), through the real binary: a device lost
// at step k, on the fake Level Zero driver (FAKE_ZE_LOSE_DEVICE_AT) and on the CPU device
// (the driver's test hook ZOB_TEST_DEVICE_FAULT); and a device shared with another process. Each
// checks the exit code, the one line (the runtime's text, the step, the phase, what to do),
// DRIVERRESULT's failed arm and the surviving arm's result, and that nothing is left running,
// locked or held by the driver.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "e2e_support.hpp"
#include "fault_support.hpp"

namespace {

using namespace zob_e2e;

// The parts every mid-run fault's line and DRIVERRESULT entry must have; `failed` is the arm
// that lost its device, `survivor` the one that must still be reported in full.
struct MidRunExpectation {
  std::string failed, survivor;
  int step = 0;
  std::string phase;
  std::vector<std::string> line_parts;
};

void expect_mid_run_fault(const Result& r, const MidRunExpectation& want) {
  EXPECT_EQ(r.rc, 1) << r.err;
  const std::string line = arm_error_line(r, want.failed);
  const std::string where = "in step " + std::to_string(want.step) + " of 3 (" +
                            (want.step > 1 ? "timed" : "warmup") + "), phase " + want.phase + ": ";
  EXPECT_NE(line.find(where), std::string::npos) << where << " missing from: " << line;
  for (const std::string& part : want.line_parts) {
    EXPECT_NE(line.find(part), std::string::npos) << part << " missing from: " << line;
  }
  const auto j = driver_result(r.out);
  const auto& failed = j.at(want.failed);
  EXPECT_EQ(failed.at("ok"), false);
  EXPECT_EQ(failed.at("failed_step"), want.step);
  EXPECT_EQ(failed.at("failed_phase"), want.phase);
  EXPECT_NE(failed.at("error").get<std::string>().find(where), std::string::npos);
  EXPECT_TRUE(failed.at("step_avg_s").is_null());
  const auto& kept = j.at(want.survivor);
  EXPECT_EQ(kept.at("ok"), true) << r.err;
  EXPECT_FALSE(kept.contains("failed_step"));
  EXPECT_EQ(kept.at("step_times_s").size(), 2u);
  EXPECT_EQ(kept.at("losses").size(), 3u);
  EXPECT_TRUE(j.at("speedup").is_null());
  bool row = false;
  for (const auto& l : lines_of(r.out)) {
    row = row || (l.rfind(want.failed + " ", 0) == 0 && l.find("FAILED: ") != std::string::npos);
  }
  EXPECT_TRUE(row) << "no FAILED row for " << want.failed << " in:\n" << r.out;
}

// The parent never holds locked memory, whatever its children do.
Watch parent_never_locks(long long* peak) {
  return [peak](pid_t parent) { *peak = std::max(*peak, status_kib_field(parent, "VmLck")); };
}

TEST(MidRunFault, CpuDeviceLostInATimedStepFailsThatArmOnly) {
  long long parent_locked = 0;
  RunOptions o;
  o.env = {{"ZOB_TEST_DEVICE_FAULT", "registered:embedding_forward:2"}};
  o.watch = parent_never_locks(&parent_locked);
  const Result r = run_bench_with(small(), o);
  expect_no_leftovers();
  expect_mid_run_fault(r, {"registered",
                           "unregistered",
                           2,
                           "forward",
                           {"device runtime error", "embedding_forward failed: device lost",
                            "ZOB_TEST_DEVICE_FAULT", "check the device"}});
  EXPECT_EQ(parent_locked, 0);
}

TEST(MidRunFault, CpuDeviceLostInAWarmupBackwardNamesThatStep) {
  RunOptions o;
  o.env = {{"ZOB_TEST_DEVICE_FAULT", "unregistered:embedding_backward:1"}};
  const Result r = run_bench_with(small(), o);
  expect_no_leftovers();
  expect_mid_run_fault(r, {"unregistered", "registered", 1, "backward", {"embedding_backward"}});
}

TEST(MidRunFault, UnknownDeviceFaultOperationChangesNothing) {
  // A hook that names no operation the step calls never fires: the run is a normal one.
  RunOptions o;
  o.env = {{"ZOB_TEST_DEVICE_FAULT", "registered:no_such_operation:1"}};
  const Result r = run_bench_with(small(), o);
  expect_no_leftovers();
  EXPECT_EQ(r.rc, 0) << r.err;
}

#ifdef ZOB_FAKE_ZE_DRIVER
TEST(MidRunFault, LevelZeroDeviceLostInATimedStepReleasesEverything) {
  const std::string report = temp_path("leaks-lost");
  std::filesystem::remove(report);
  long long parent_locked = 0;
  RunOptions o;
  // embedding_backward runs once per step: its 3rd launch is the last timed step's backward.
  // Only the registered arm's child loses its device, with its host memory imported.
  o.env = xpu_env(report, {{"FAKE_ZE_LOSE_DEVICE_AT", "embedding_backward:3"},
                           {"FAKE_ZE_FAULT_CMDLINE", "--internal-child registered"}});
  o.watch = parent_never_locks(&parent_locked);
  const Result r = run_bench_with(small({}, "xpu"), o);
  expect_no_leftovers();
  expect_mid_run_fault(r, {"registered",
                           "unregistered",
                           3,
                           "backward",
                           {"device runtime error", "ZE_RESULT_ERROR_DEVICE_LOST", "dmesg"}});
  EXPECT_EQ(parent_locked, 0);
  expect_driver_released_everything(report, driver_result(r.out));
  std::filesystem::remove(report);
}
// Two runs on one device (issue 27): the arms' children report the device's other users
// (Device::occupancy; here through ZOB_TEST_DEVICE_SHARED, as NVML's process list or a fall of
// the free memory would on a GPU). The run still completes, but DRIVERRESULT's warnings and the
// verdict say so, and no verdict is conclusive over another process's work.
struct Sharing {
  std::string hook;  // ZOB_TEST_DEVICE_SHARED, "" for none
  std::string says;  // in the warning and the verdict; "" when nothing may be said
};
class SharedDevice : public ::testing::TestWithParam<Sharing> {};

TEST_P(SharedDevice, AnotherProcessIsNamedAndNoVerdictIsConclusive) {
  RunOptions o;
  o.env = {{"ZE_ENABLE_ALT_DRIVERS", ZOB_FAKE_ZE_DRIVER}};
  if (!GetParam().hook.empty()) o.env.push_back({"ZOB_TEST_DEVICE_SHARED", GetParam().hook});
  const Result r = run_bench_with(small({"--repeats", "3"}, "xpu"), o);
  expect_no_leftovers();
  ASSERT_EQ(r.rc, 0) << r.err;  // both arms still finish, with correct results
  const auto j = driver_result(r.out);
  std::string warnings;
  for (const auto& w : j.at("warnings")) warnings += w.get<std::string>() + "\n";
  ASSERT_FALSE(j.at("verdicts").empty()) << r.out;
  const auto& verdict = j.at("verdicts")[0];
  const std::string text = verdict.at("text");
  if (GetParam().says.empty()) {
    EXPECT_EQ(warnings.find("another process"), std::string::npos) << warnings;
    EXPECT_EQ(text.find("another process"), std::string::npos) << text;
    return;
  }
  EXPECT_NE(warnings.find("another process used the device during the run (" + GetParam().says),
            std::string::npos)
      << warnings;
  EXPECT_NE(r.err.find("warning: another process used the device"), std::string::npos) << r.err;
  EXPECT_EQ(verdict.at("conclusive"), false);
  EXPECT_EQ(text.rfind("inconclusive: ", 0), 0u) << text;
  EXPECT_NE(text.find(GetParam().says), std::string::npos) << text;
  EXPECT_NE(r.out.find("verdict: inconclusive: "), std::string::npos) << r.out;
}

INSTANTIATE_TEST_SUITE_P(
    E2E, SharedDevice,
    ::testing::Values(
        Sharing{"", ""},
        Sharing{"unregistered:1",
                "1 other process on the device during arm unregistered (round 1)"},
        Sharing{"unregistered:-1:8589934592",
                "its free memory fell by 8.0 GiB between the start of arm registered (round 1) and "
                "of arm unregistered (round 1)"}),
    [](const ::testing::TestParamInfo<Sharing>& info) {
      return info.param.hook.empty()                             ? std::string("alone")
             : info.param.hook.find(":-1:") != std::string::npos ? std::string("free_memory")
                                                                 : std::string("processes");
    });
#else
TEST(MidRunFault, LevelZeroDeviceLost) {
  GTEST_SKIP() << "built without the Level Zero backend: no fake driver to lose a device in";
}
#endif

}  // namespace
