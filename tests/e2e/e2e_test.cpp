// Runs the real binary. The test process is a child subreaper, so any process the benchmark
// leaves behind (an orphaned arm child) becomes our child and is caught by expect_no_leftovers.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "e2e_support.hpp"

namespace {

using namespace zob_e2e;

TEST(E2E, CpuRunSucceedsWithEachArmInItsOwnProcess) {
  const Result r = run_bench(small());
  expect_no_leftovers();
  ASSERT_EQ(r.rc, 0) << r.err;
  // "# " environment header, table header, 2 arms, speedup, then the phase and registration
  // sections and DRIVERRESULT last (tests/e2e/insight_e2e_test.cpp checks those).
  auto lines = lines_of(r.out);
  while (!lines.empty() && lines[0].rfind("# ", 0) == 0) lines.erase(lines.begin());
  ASSERT_GE(lines.size(), 5u) << r.out;
  EXPECT_EQ(lines.back().rfind("DRIVERRESULT=", 0), 0u);
  EXPECT_EQ(lines[0].rfind("arm", 0), 0u);
  EXPECT_NE(lines[0].find("avg step (s)"), std::string::npos);
  EXPECT_NE(lines[0].find("device peak (GB)"), std::string::npos);  // no GPU on --device cpu
  EXPECT_EQ(lines[1].rfind("registered ", 0), 0u);
  EXPECT_EQ(lines[2].rfind("unregistered ", 0), 0u);
  EXPECT_EQ(lines[3].rfind("speedup: ", 0), 0u);
  const auto j = driver_result(r.out);
  for (const char* key : {"registered", "unregistered", "speedup", "schema_version", "workload",
                          "validation", "tool"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  for (const char* arm : {"registered", "unregistered"}) {
    for (const char* key : {"register",
                            "device",
                            "model",
                            "params_b",
                            "batch",
                            "seq",
                            "tokens_per_step",
                            "steps",
                            "step_avg_s",
                            "step_min_s",
                            "gpu_peak_gb",
                            "arm",
                            "pid",
                            "loop",
                            "step_times_s",
                            "losses",
                            "warmup",
                            "param_checksum",
                            "registration",
                            "registration_verified",
                            "locked_bytes",
                            "registered_bytes",
                            "register_s",
                            "setup_s",
                            "adam_threads",
                            "device_name"}) {
      EXPECT_TRUE(j.at(arm).contains(key)) << arm << "." << key;
    }
    EXPECT_EQ(j.at(arm).at("device"), "cpu");
    EXPECT_EQ(j.at(arm).at("model"), "synthetic-h64-l2");
    EXPECT_EQ(j.at(arm).at("losses").size(), 3u);
    EXPECT_EQ(j.at(arm).at("step_times_s").size(), 2u);
  }
  const int p1 = j.at("registered").at("pid"), p2 = j.at("unregistered").at("pid");
  EXPECT_GT(p1, 0);
  EXPECT_GT(p2, 0);
  EXPECT_NE(p1, p2);
  EXPECT_NE(p1, r.pid);
  EXPECT_NE(p2, r.pid);
  EXPECT_EQ(j.at("registered").at("param_checksum"), j.at("unregistered").at("param_checksum"));
  EXPECT_EQ(j.at("registered").at("losses"), j.at("unregistered").at("losses"));
  EXPECT_EQ(j.at("validation").at("ok"), true);
  EXPECT_EQ(j.at("workload").at("params"), 2 * 512 * 64 + 2 * (8 * 64 * 64 + 5 * 64));
}

TEST(E2E, JsonFileEqualsDriverResult) {
  const auto path =
      std::filesystem::temp_directory_path() / ("zob-e2e-" + std::to_string(::getpid()) + ".json");
  const Result r = run_bench(small({"--json", path.string()}));
  expect_no_leftovers();
  ASSERT_EQ(r.rc, 0) << r.err;
  std::ifstream in(path);
  const auto file = nlohmann::json::parse(in);
  EXPECT_EQ(file, driver_result(r.out));
  std::filesystem::remove(path);
}

TEST(E2E, BadFlagsExitTwoWithOneLine) {
  const std::vector<std::vector<std::string>> bad{
      {"--hidden", "0"},
      {"--hidden", "abc"},
      {"--steps", "0"},
      {"--arms", "registered,bogus"},
      {"--arms", "registered,registered"},
      {"--device", "tpu"},
      {"--bogus-flag"},
      {"--json", "/nonexistent-zob-dir/x.json"},
      {"--hidden", "1048576", "--layers", "100000", "--vocab", "2147483647"},
      {"adam", "--params", "-5"},
      {"--timeout", "soon"},
      {"--hidden", "65536", "--layers", "1000"}};  // needs far more host memory than any box
  for (const auto& args : bad) {
    SCOPED_TRACE(testing::PrintToString(args));
    const Result r = run_bench(args);
    EXPECT_EQ(r.rc, 2);
    EXPECT_TRUE(r.out.empty()) << r.out;
    expect_one_error_line(r, "; ");
  }
  expect_no_leftovers();
}

TEST(E2E, HelpAndVersionExitZero) {
  const Result help = run_bench({"--help"});
  EXPECT_EQ(help.rc, 0);
  EXPECT_NE(help.out.find("--offload-param"), std::string::npos);
  const Result version = run_bench({"--version"});
  EXPECT_EQ(version.rc, 0);
  EXPECT_NE(version.out.find("zero3-offload-bench"), std::string::npos);
}

TEST(E2E, CudaWithoutItsPluginExitsThree) {
  const auto empty =
      std::filesystem::temp_directory_path() / ("zob-e2e-empty-" + std::to_string(::getpid()));
  std::filesystem::create_directories(empty);
  const Result r = run_bench(small({}, "cuda"), {{"ZOB_PLUGIN_DIR", empty.string()}});
  std::filesystem::remove_all(empty);
  expect_no_leftovers();
  EXPECT_EQ(r.rc, 3);
  EXPECT_TRUE(r.out.empty()) << r.out;
  expect_one_error_line(r, "this build has no CUDA backend");
}

TEST(E2E, PluginWithoutDeviceExitsThreeWithItsReason) {
  const Result r = run_bench(small({}, "cuda"), {{"ZOB_PLUGIN_DIR", ZOB_FAKE_PLUGIN_DIR}});
  expect_no_leftovers();
  EXPECT_EQ(r.rc, 3);
  expect_one_error_line(r, "fake plugin: no CUDA device (asked for index 0)");
}

TEST(E2E, AutoFallsBackToCpuWithANotice) {
  const Result r =
      run_bench({"--device", "auto", "--hidden", "64", "--layers", "2", "--batch", "2", "--seq",
                 "16", "--vocab", "512", "--steps", "1", "--warmup", "0", "--arms", "pageable"},
                {{"ZOB_PLUGIN_DIR", ZOB_FAKE_PLUGIN_DIR}});
  expect_no_leftovers();
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("notice: no accelerator available (cuda: fake plugin"), std::string::npos)
      << r.err;
  EXPECT_EQ(driver_result(r.out).at("pageable").at("device"), "cpu");
}

struct Fault {
  const char* spec;
  const char* cause;
  std::vector<std::string> extra;
};

class E2EFault : public testing::TestWithParam<Fault> {};

TEST_P(E2EFault, FailingArmIsNamedAndTheOtherStillReported) {
  const Fault& f = GetParam();
  const std::string failing = std::string(f.spec).substr(0, std::string(f.spec).find(':'));
  const std::string other = failing == "registered" ? "unregistered" : "registered";
  const Result r = run_bench(small(f.extra), {{"ZOB_TEST_CHILD_FAULT", f.spec}});
  expect_no_leftovers();
  EXPECT_EQ(r.rc, 1) << r.err;
  const std::string named = "error: arm " + failing + ": ";
  const auto at = r.err.find(named);
  ASSERT_NE(at, std::string::npos) << r.err;
  EXPECT_NE(r.err.find(f.cause, at), std::string::npos) << r.err;
  bool row = false;
  for (const auto& line : lines_of(r.out)) {
    if (line.rfind(failing + " ", 0) == 0) {
      EXPECT_NE(line.find("FAILED: "), std::string::npos) << line;
      EXPECT_NE(line.find(f.cause), std::string::npos) << line;
      row = true;
    }
  }
  EXPECT_TRUE(row) << r.out;
  const auto j = driver_result(r.out);
  EXPECT_EQ(j.at(failing).at("ok"), false);
  EXPECT_NE(j.at(failing).at("error").get<std::string>().find(f.cause), std::string::npos);
  EXPECT_EQ(j.at(other).at("ok"), true);
  EXPECT_FALSE(j.at(other).contains("error"));
  EXPECT_TRUE(j.at("speedup").is_null());
}

INSTANTIATE_TEST_SUITE_P(
    Faults, E2EFault,
    testing::Values(Fault{"unregistered:segv", "SIGSEGV", {}},
                    Fault{"registered:exit", "exited with code 7", {}},
                    Fault{"unregistered:garbage", "malformed result", {}},
                    Fault{"registered:noresult", "exited with code 0 without a result", {}},
                    // 5 s: the healthy arm must finish within it on a loaded 2-core box
                    Fault{"registered:hang", "timed out after 5 s", {"--timeout", "5"}}),
    [](const testing::TestParamInfo<Fault>& info) {
      std::string name = info.param.spec;
      for (char& c : name) {
        if (c == ':') c = '_';
      }
      return name;
    });

class E2ESignal : public testing::TestWithParam<int> {};

std::string sig_name(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP";
}

TEST_P(E2ESignal, StopsTheRunningArmAndExitsWithTheSignalCode) {
  const int sig = GetParam();
  const Result r = run_bench(
      small(), {{"ZOB_TEST_CHILD_FAULT", "registered:hang"}},
      [sig](pid_t pid, const std::string&) {
        if (!arm_child_running(pid)) return false;
        ::kill(pid, sig);
        return true;
      },
      // Not inherited ignored (a suite run under nohup).
      60, [] { ::signal(SIGHUP, SIG_DFL); });
  expect_no_leftovers();
  EXPECT_EQ(r.rc, 128 + sig) << r.err;
  const auto j = driver_result(r.out);
  EXPECT_EQ(j.at("interrupted"), sig_name(sig));
  EXPECT_EQ(j.at("registered").at("ok"), false);
  EXPECT_NE(j.at("unregistered").at("error").get<std::string>().find("not run"), std::string::npos);
  // What did not run was not validated: no "ok" for it (issue 37).
  EXPECT_TRUE(j.at("validation").at("ok").is_null()) << j.at("validation");
  EXPECT_EQ(j.at("validation").at("compared_arms"), 0);
}

// SIGHUP (a closed terminal or ssh session) stops the run as SIGTERM does, exit 129.
INSTANTIATE_TEST_SUITE_P(Signals, E2ESignal, testing::Values(SIGINT, SIGTERM, SIGHUP),
                         [](const testing::TestParamInfo<int>& info) {
                           return sig_name(info.param);
                         });

// Under nohup (SIGHUP ignored when the benchmark starts) a hangup does not stop the run.
TEST(E2E, AnIgnoredSighupLeavesTheRunGoing) {
  bool sent = false;
  const Result r = run_bench(
      small(), {},
      [&sent](pid_t pid, const std::string&) {
        if (!arm_child_running(pid)) return false;
        ::kill(pid, SIGHUP);
        sent = true;
        return true;
      },
      60, [] { ::signal(SIGHUP, SIG_IGN); });
  expect_no_leftovers();
  EXPECT_TRUE(sent);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(driver_result(r.out).at("interrupted").is_null());
}

TEST(E2E, SecondSigintKillsAtOnce) {
  // A child that ignores the forwarded SIGINT would get a grace period; the second Ctrl-C
  // must not wait for it. (The hang fault dies on the first one; this checks the path runs.)
  int sent = 0;
  const Result r = run_bench(small(), {{"ZOB_TEST_CHILD_FAULT", "registered:hang"}},
                             [&sent](pid_t pid, const std::string&) {
                               if (!arm_child_running(pid)) return false;
                               ::kill(pid, SIGINT);
                               ::kill(pid, SIGINT);
                               sent = 2;
                               return true;
                             });
  expect_no_leftovers();
  EXPECT_EQ(sent, 2);
  EXPECT_EQ(r.rc, 130) << r.err;
}

TEST(E2E, AdamSubcommandPrintsAndExitsZero) {
  const Result r = run_bench({"adam", "--params", "100000", "--repeats", "2"});
  expect_no_leftovers();
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
}

}  // namespace

int main(int argc, char** argv) {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
