// --gpus N: the real binary with 2 and 4 rank processes per arm on the CPU device, and a rank
// killed mid-step. Harness copied from e2e_test.cpp. The test process is a child subreaper,
// so any process the benchmark leaves behind becomes our child and is caught by expect_no_leftovers.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <set>
#include <thread>

namespace {

struct Result {
  int rc = -1;
  std::string out, err;
  pid_t pid = 0;
};

using Env = std::vector<std::pair<std::string, std::string>>;
// Called while the benchmark runs: (its pid, stderr so far); returns true once it acted.
using DuringRun = std::function<bool(pid_t, const std::string&)>;

Result run_bench(const std::vector<std::string>& args, const Env& env = {},
                 const DuringRun& during = nullptr, double limit_s = 60) {
  int out_pipe[2], err_pipe[2];
  EXPECT_EQ(::pipe2(out_pipe, O_CLOEXEC), 0);
  EXPECT_EQ(::pipe2(err_pipe, O_CLOEXEC), 0);
  std::vector<std::string> owned{ZOB_BINARY};
  owned.insert(owned.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : owned) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    ::execv(ZOB_BINARY, argv.data());
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  Result r;
  r.pid = pid;
  bool acted = during == nullptr;
  const auto start = std::chrono::steady_clock::now();
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    ::poll(fds, 2, 50);
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP))) continue;
      char buf[4096];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        (i == 0 ? r.out : r.err).append(buf, static_cast<std::size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
    if (!acted) acted = during(pid, r.err);
    if (std::chrono::steady_clock::now() - start > std::chrono::duration<double>(limit_s)) {
      ADD_FAILURE() << "benchmark still running after " << limit_s << " s; killing it";
      ::kill(pid, SIGKILL);
      limit_s = 1e9;
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  EXPECT_TRUE(acted) << "the action during the run never happened";
  return r;
}

// Every process the benchmark started must be gone (and reaped by it) once it has exited.
void expect_no_leftovers() {
  for (int attempt = 0; attempt < 20; ++attempt) {
    int status = 0;
    const pid_t p = ::waitpid(-1, &status, WNOHANG);
    if (p < 0 && errno == ECHILD) return;
    if (p > 0) {
      ADD_FAILURE() << "process " << p << " was left behind (orphaned, then died)";
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::ifstream children("/proc/self/task/" + std::to_string(::getpid()) + "/children");
  std::string list((std::istreambuf_iterator<char>(children)), std::istreambuf_iterator<char>());
  ADD_FAILURE() << "processes left running: " << list;
  std::istringstream in(list);
  for (pid_t p; in >> p;) {
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

nlohmann::json driver_result(const std::string& out) {
  for (const auto& line : lines_of(out)) {
    if (line.rfind("DRIVERRESULT=", 0) == 0) return nlohmann::json::parse(line.substr(13));
  }
  ADD_FAILURE() << "no DRIVERRESULT line in:\n" << out;
  return {};
}

const std::vector<std::string> kTiny{"--device", "cpu",   "--hidden", "32", "--layers", "2",
                                     "--batch",  "2",     "--seq",    "8",  "--vocab",  "256",
                                     "--steps",  "2",     "--warmup", "1",  "--threads", "1"};

std::vector<std::string> tiny(std::vector<std::string> extra) {
  auto args = kTiny;
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

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
      for (const auto& rk : a.at("ranks")) slowest = std::max(slowest, rk.at("step_s")[s + 1].get<double>());
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

TEST(RanksE2E, MoreRanksChangeTheResultOneRankIsThePlainRun) {
  const Result one = run_bench(tiny({"--arms", "registered"}));
  const Result one_ranked = run_bench(tiny({"--arms", "registered", "--gpus", "1"}));
  const Result two = run_bench(tiny({"--arms", "registered", "--gpus", "2"}));
  expect_no_leftovers();
  ASSERT_EQ(one.rc, 0) << one.err;
  ASSERT_EQ(two.rc, 0) << two.err;
  const auto a = driver_result(one.out).at("registered");
  EXPECT_EQ(driver_result(one_ranked.out).at("registered").at("param_checksum"), a.at("param_checksum"));
  const auto b = driver_result(two.out).at("registered");
  EXPECT_NE(a.at("param_checksum"), b.at("param_checksum"));  // two micro-batches, not one
  EXPECT_FALSE(a.contains("ranks"));
}

struct Fault {
  std::string spec;
  std::string expect;
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
  ASSERT_EQ(bad.at("ranks").size(), 3u);
  for (const auto& rk : bad.at("ranks")) {
    EXPECT_EQ(rk.at("ok"), false);
    EXPECT_FALSE(process_exists(rk.at("pid").get<int>())) << rk.at("pid");
  }
  EXPECT_EQ(j.at("registered").at("ok"), true);  // the other arm is unaffected
  EXPECT_EQ(shm_entries(), before);
}

INSTANTIATE_TEST_SUITE_P(E2E, RankFault,
                         ::testing::Values(Fault{"unregistered:1:segv:7", "SIGSEGV"},
                                           Fault{"unregistered:1:exit:3", "exited with code 7"},
                                           Fault{"unregistered:1:hang:9", "did not reach"}),
                         [](const ::testing::TestParamInfo<Fault>& info) {
                           return info.param.spec.substr(15, info.param.spec.find(':', 15) - 15);
                         });

TEST(RanksE2E, GpusFlagIsValidated) {
  for (const auto& bad : std::vector<std::vector<std::string>>{
           {"--gpus", "0"}, {"--gpus", "65"}, {"--gpus", "two"},
           {"--gpus", "2", "--offload-param"}, {"--gpus", "2", "--schedule", "overlap"}}) {
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
