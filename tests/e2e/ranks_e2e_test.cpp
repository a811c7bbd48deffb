// --gpus N: the real binary with 2 and 4 rank processes per arm on the CPU device, and a rank
// killed mid-step. Harness: e2e_support.hpp. The test process is a child subreaper,
// so any process the benchmark leaves behind becomes our child and is caught by
// expect_no_leftovers.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "e2e_support.hpp"

namespace {

using namespace zob_e2e;

std::set<std::string> shm_entries() {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = e.path().filename().string();
    if (name.rfind("zob-", 0) == 0) out.insert(name);
  }
  return out;
}

bool process_exists(int pid) { return pid > 0 && (::kill(pid, 0) == 0 || errno != ESRCH); }

class Ranks : public ::testing::TestWithParam<int> {};

TEST_P(Ranks, BothArmsRunAndAgree) {
  const int n = GetParam();
  const auto before = shm_entries();
  const Result r = run_bench(tiny({"--gpus", std::to_string(n)}));
  expect_no_leftovers();
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = driver_result(r.out);
  for (const char* arm : {"registered", "unregistered"}) {
    const auto& a = j.at(arm);
    EXPECT_EQ(a.at("ok"), true);
    EXPECT_EQ(a.at("gpus"), n);
    ASSERT_EQ(a.at("ranks").size(), static_cast<std::size_t>(n));
    double slowest_sum = 0;
    for (int k = 0; k < n; ++k) {
      const auto& rk = a.at("ranks")[static_cast<std::size_t>(k)];
      EXPECT_EQ(rk.at("rank"), k);
      EXPECT_EQ(rk.at("ok"), true);
      EXPECT_EQ(rk.at("step_s").size(), 3u);
      for (const char* phase : {"forward", "backward", "all_gather", "reduce_scatter",
                                "grad_offload", "adam", "copy_back"}) {
        EXPECT_TRUE(rk.at("phases").contains(phase)) << phase;
      }
      EXPECT_FALSE(process_exists(rk.at("pid").get<int>()));
    }
    // the arm's step time is the slowest rank's, step by step
    for (std::size_t s = 0; s < 2; ++s) {
      double slowest = 0;
      for (const auto& rk : a.at("ranks"))
        slowest = std::max(slowest, rk.at("step_s")[s + 1].get<double>());
      EXPECT_DOUBLE_EQ(a.at("step_times_s")[s].get<double>(), slowest);
      slowest_sum += slowest;
    }
    EXPECT_NEAR(a.at("step_avg_s").get<double>(), slowest_sum / 2, 1e-12);
  }
  EXPECT_EQ(j.at("registered").at("param_checksum"), j.at("unregistered").at("param_checksum"));
  EXPECT_EQ(j.at("registered").at("losses"), j.at("unregistered").at("losses"));
  EXPECT_EQ(j.at("validation").at("ok"), true);
  EXPECT_EQ(shm_entries(), before);

  // The same run again: the same numbers (the reduction order is fixed).
  const Result again = run_bench(tiny({"--gpus", std::to_string(n), "--arms", "registered"}));
  expect_no_leftovers();
  ASSERT_EQ(again.rc, 0) << again.err;
  const auto j2 = driver_result(again.out);
  EXPECT_EQ(j2.at("registered").at("param_checksum"), j.at("registered").at("param_checksum"));
  EXPECT_EQ(j2.at("registered").at("losses"), j.at("registered").at("losses"));
}

INSTANTIATE_TEST_SUITE_P(E2E, Ranks, ::testing::Values(2, 4));

// Every schedule and loop with 2 and 3 ranks through the binary: the same numbers as stock
// (the schedules differ in order only; stock's N-rank result is the unit tests' reference),
// the collectives' phases per rank with device times; deepspeed is the default there too.
struct RankPlan {
  int gpus;
  bool offload;
};
class RankSchedules : public ::testing::TestWithParam<RankPlan> {};

TEST_P(RankSchedules, EveryScheduleRunsAndAgreesWithStock) {
  const RankPlan p = GetParam();
  std::vector<std::string> base = {"--gpus", std::to_string(p.gpus), "--arms", "registered"};
  if (p.offload) base.push_back("--offload-param");
  nlohmann::json stock;
  for (const char* schedule : {"stock", "overlap", "deepspeed", ""}) {
    std::vector<std::string> args = base;
    if (*schedule != '\0') args.insert(args.end(), {"--schedule", schedule});
    if (*schedule == '\0') schedule = "deepspeed";  // the default, whatever the rank count
    const Result r = run_bench(tiny(args));
    expect_no_leftovers();
    ASSERT_EQ(r.rc, 0) << schedule << ": " << r.err;
    const auto j = driver_result(r.out);
    const auto& a = j.at("registered");
    EXPECT_EQ(a.at("schedule"), schedule);
    EXPECT_NE(r.out.find("slowest rank"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("bound: registered: "), std::string::npos) << r.out;
    EXPECT_GT(a.at("bound").at("bound_s").get<double>(), 0);
    // The physical bound of the group: every rank's host bytes through the one host memory.
    EXPECT_NE(r.out.find("physical bound: registered: "), std::string::npos) << r.out;
    // The busiest of the host memory after the ranks' longest serial part, the links and the
    // compute (see schedules.md).
    const auto& b = a.at("bound");
    const double rest = b.at("host_bytes").get<double>() - b.at("serial_host_bytes").get<double>();
    EXPECT_DOUBLE_EQ(b.at("physical_s").get<double>(),
                     std::max({b.at("serial_s").get<double>() +
                                   rest / (b.at("host_gb_per_s").get<double>() * 1e9),
                               b.at("pcie_s").get<double>(), b.at("compute_s").get<double>()}));
    const std::string from = b.at("host_rate_from");
    EXPECT_EQ(from, "ranks");
    // Every rank probed 5 times before the steps and once after each timed step.
    EXPECT_EQ(b.at("probe_passes").get<int>(), 5 + a.at("steps").get<int>());
    EXPECT_DOUBLE_EQ(b.at("host_gb_per_s").get<double>(), b.at("probe_gb_per_s").get<double>());
    // stock and overlap fuse Adam with the cast to bf16 in both loops, deepspeed does not (and
    // gives the same bits: the checks against stock below).
    const bool fused = std::string(schedule) != "deepspeed";
    for (const auto& rk : a.at("ranks")) {
      EXPECT_EQ(rk.at("phases").contains("adam_cast"), fused) << schedule;
      EXPECT_EQ(rk.at("phases").contains("adam"), !fused) << schedule;
      EXPECT_EQ(rk.at("phases").contains("host_cast"), p.offload && !fused) << schedule;
    }
    ASSERT_EQ(a.at("ranks").size(), static_cast<std::size_t>(p.gpus));
    for (const auto& rk : a.at("ranks")) {
      for (const char* phase : {"all_gather", "reduce_scatter", "grad_offload"}) {
        ASSERT_TRUE(rk.at("phases").contains(phase)) << schedule << " " << phase;
        EXPECT_GE(rk.at("phases").at(phase).at("device_s").get<double>(), 0) << phase;
        EXPECT_GT(rk.at("phases").at(phase).at("bytes").get<double>(), 0) << phase;
      }
    }
    if (stock.is_null()) {
      stock = a;
      continue;
    }
    EXPECT_EQ(a.at("param_checksum"), stock.at("param_checksum")) << schedule;
    EXPECT_EQ(a.at("losses"), stock.at("losses")) << schedule;
  }
}

INSTANTIATE_TEST_SUITE_P(E2E, RankSchedules,
                         ::testing::Values(RankPlan{2, false}, RankPlan{3, false},
                                           RankPlan{2, true}, RankPlan{3, true}),
                         [](const ::testing::TestParamInfo<RankPlan>& info) {
                           return std::to_string(info.param.gpus) + "gpus_" +
                                  (info.param.offload ? "offload_param" : "copy_back");
                         });

TEST(RanksE2E, MoreRanksChangeTheResultOneRankIsThePlainRun) {
  const Result one = run_bench(tiny({"--arms", "registered"}));
  const Result one_ranked = run_bench(tiny({"--arms", "registered", "--gpus", "1"}));
  const Result two = run_bench(tiny({"--arms", "registered", "--gpus", "2"}));
  expect_no_leftovers();
  ASSERT_EQ(one.rc, 0) << one.err;
  ASSERT_EQ(two.rc, 0) << two.err;
  const auto a = driver_result(one.out).at("registered");
  EXPECT_EQ(driver_result(one_ranked.out).at("registered").at("param_checksum"),
            a.at("param_checksum"));
  const auto b = driver_result(two.out).at("registered");
  EXPECT_NE(a.at("param_checksum"), b.at("param_checksum"));  // two micro-batches, not one
  EXPECT_FALSE(a.contains("ranks"));
}

// Another process on a rank's device (ZOB_TEST_DEVICE_SHARED, as NVML's list on a GPU): the
// ranks ask the device as a one-rank arm does, and no verdict is conclusive over its work.
TEST(RanksE2E, AnotherProcessOnARanksDeviceIsNamedAndNoVerdictIsConclusive) {
  const Result alone = run_bench(tiny({"--gpus", "2"}));
  const Result shared =
      run_bench(tiny({"--gpus", "2"}), {{"ZOB_TEST_DEVICE_SHARED", "unregistered:1"}});
  expect_no_leftovers();
  ASSERT_EQ(alone.rc, 0) << alone.err;
  ASSERT_EQ(shared.rc, 0) << shared.err;  // both arms still finish
  EXPECT_EQ(alone.err.find("another process"), std::string::npos) << alone.err;
  const auto j = driver_result(shared.out);
  std::string warnings;
  for (const auto& w : j.at("warnings")) warnings += w.get<std::string>() + "\n";
  EXPECT_NE(warnings.find("1 other process on the device during arm unregistered"),
            std::string::npos)
      << warnings;
  ASSERT_FALSE(j.at("verdicts").empty()) << shared.out;
  EXPECT_EQ(j.at("verdicts")[0].at("conclusive"), false);
}

// The ranks of one arm sharing a device (ZOB_TEST_SHARE_DEVICE) see each other in its process
// list, as NVML lists them: those siblings are not other processes, one more is.
TEST(RanksE2E, ARanksSiblingsOnItsDeviceAreNotAnotherProcess) {
  const Env siblings{{"ZOB_TEST_SHARE_DEVICE", "1"}, {"ZOB_TEST_DEVICE_SHARED", "registered:1"}};
  const Env another{{"ZOB_TEST_SHARE_DEVICE", "1"}, {"ZOB_TEST_DEVICE_SHARED", "registered:2"}};
  const Result alone = run_bench(tiny({"--gpus", "2", "--arms", "registered"}), siblings);
  const Result shared = run_bench(tiny({"--gpus", "2", "--arms", "registered"}), another);
  expect_no_leftovers();
  ASSERT_EQ(alone.rc, 0) << alone.err;
  ASSERT_EQ(shared.rc, 0) << shared.err;
  EXPECT_EQ(alone.err.find("another process"), std::string::npos) << alone.err;
  // Both ranks counted their device's processes: the check ran, and says nothing is off.
  const auto a = driver_result(alone.out).at("occupancy_check");
  EXPECT_EQ(a.at("processes_counted"), true);
  EXPECT_TRUE(a.at("note").is_null());
  const auto j = driver_result(shared.out);
  std::string warnings;
  for (const auto& w : j.at("warnings")) warnings += w.get<std::string>() + "\n";
  EXPECT_NE(warnings.find("1 other process on the device during arm registered"), std::string::npos)
      << warnings;
}

struct Fault {
  std::string spec;
  std::string expect;
  // The rank died without a word (a signal): its peers say where they were waiting for it.
  bool peers_say_where = false;
};
class RankFault : public ::testing::TestWithParam<Fault> {};

TEST_P(RankFault, ArmFailsFastNamingTheRankAndLeavesNothing) {
  const auto before = shm_entries();
  const auto t0 = std::chrono::steady_clock::now();
  const auto path = std::filesystem::temp_directory_path() /
                    ("zob-ranks-e2e-" + std::to_string(::getpid()) + ".json");
  const Result r = run_bench(tiny({"--gpus", "3", "--timeout", "20", "--json", path.string()}),
                             {{"ZOB_TEST_RANK_FAULT", GetParam().spec}});
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  expect_no_leftovers();
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_LT(s, 19.0);  // not the arm's deadline: the peers were told
  std::ifstream in(path);
  const auto j = nlohmann::json::parse(in);
  std::filesystem::remove(path);
  const auto& bad = j.at("unregistered");
  EXPECT_EQ(bad.at("ok"), false);
  const std::string error = bad.at("error");
  EXPECT_NE(error.find("rank 1 of 3"), std::string::npos) << error;
  EXPECT_NE(error.find(GetParam().expect), std::string::npos) << error;
  EXPECT_NE(r.err.find("arm unregistered: rank 1 of 3"), std::string::npos) << r.err;
  if (GetParam().peers_say_where) {
    EXPECT_NE(error.find("; rank 0 was then in step "), std::string::npos) << error;
    EXPECT_GE(bad.at("failed_step").get<int>(), 1);
    EXPECT_TRUE(bad.at("failed_phase").is_string());
  }
  ASSERT_EQ(bad.at("ranks").size(), 3u);
  for (const auto& rk : bad.at("ranks")) {
    EXPECT_EQ(rk.at("ok"), false);
    EXPECT_FALSE(process_exists(rk.at("pid").get<int>())) << rk.at("pid");
  }
  EXPECT_EQ(j.at("registered").at("ok"), true);  // the other arm is unaffected
  EXPECT_EQ(shm_entries(), before);
}

INSTANTIATE_TEST_SUITE_P(E2E, RankFault,
                         // segv:7 in the set-up's collectives; kill:20 in the first step's
                         // all-gather, where the peers wait for the killed rank
                         ::testing::Values(Fault{"unregistered:1:segv:7", "SIGSEGV"},
                                           Fault{"unregistered:1:kill:20", "SIGKILL", true},
                                           Fault{"unregistered:1:exit:3", "exited with code 7"},
                                           Fault{"unregistered:1:hang:9", "did not reach"}),
                         [](const ::testing::TestParamInfo<Fault>& info) {
                           return info.param.spec.substr(15, info.param.spec.find(':', 15) - 15);
                         });

TEST(RanksE2E, GpusFlagIsValidated) {
  for (const auto& bad :
       std::vector<std::vector<std::string>>{{"--gpus", "0"},
                                             {"--gpus", "65"},
                                             {"--gpus", "two"},
                                             {"--gpus", "2", "--schedule", "fast"}}) {
    const Result r = run_bench(tiny(bad));
    EXPECT_EQ(r.rc, 2) << bad[1] << ": " << r.err;
  }
  expect_no_leftovers();
}

TEST(RanksE2E, GpusAllOnCpuIsOneRank) {
  const Result r = run_bench(tiny({"--gpus", "all", "--arms", "registered"}));
  expect_no_leftovers();
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(driver_result(r.out).at("workload").value("gpus", -1), 1);
}

}  // namespace

int main(int argc, char** argv) {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
