// Helpers of the end-to-end tests: run the real binary, collect stdout / stderr / exit code,
// act on it while it runs, and check that nothing it started is left behind. The test binary
// is a child subreaper (main() in e2e_test.cpp), so an orphaned arm child becomes our child.
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace zob_e2e {

struct Result {
  int rc = -1;
  std::string out, err;
  pid_t pid = 0;
  double wall_s = 0;  // from fork to reaping
};

using Env = std::vector<std::pair<std::string, std::string>>;
// Called while the benchmark runs: (its pid, stderr so far); returns true once it acted.
using DuringRun = std::function<bool(pid_t, const std::string&)>;
// Runs in the forked test process just before exec (limits, capabilities). Returns 0, or an
// exit code for the forked process that says what could not be set up (checked as rc).
using BeforeExec = std::function<int()>;

// Called on every poll tick (about 20 times a second) while the benchmark runs.
using Watch = std::function<void(pid_t)>;

struct RunOptions {
  Env env;
  DuringRun during;
  Watch watch;
  double limit_s = 60;
  BeforeExec before_exec;
  // Another program instead of the benchmark (args are then its arguments: e.g. mpirun with
  // the benchmark among them), started in a process group of its own, which the limit kills.
  std::string program;
};

inline Result run_bench_with(const std::vector<std::string>& args, RunOptions o) {
  const Env& env = o.env;
  const DuringRun& during = o.during;
  double limit_s = o.limit_s;
  const BeforeExec& before_exec = o.before_exec;
  int out_pipe[2], err_pipe[2];
  EXPECT_EQ(::pipe2(out_pipe, O_CLOEXEC), 0);
  EXPECT_EQ(::pipe2(err_pipe, O_CLOEXEC), 0);
  const std::string program = o.program.empty() ? std::string(ZOB_BINARY) : o.program;
  const bool own_group = !o.program.empty();
  std::vector<std::string> owned{program};
  owned.insert(owned.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : owned) argv.push_back(a.data());
  argv.push_back(nullptr);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (own_group) ::setpgid(0, 0);
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    if (before_exec) {
      if (const int code = before_exec(); code != 0) ::_exit(code);
    }
    ::execv(program.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  Result r;
  r.pid = pid;
  bool acted = during == nullptr;
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
    if (o.watch) o.watch(pid);
    if (std::chrono::steady_clock::now() - start > std::chrono::duration<double>(limit_s)) {
      ADD_FAILURE() << program << " still running after " << limit_s << " s; killing it";
      ::kill(own_group ? -pid : pid, SIGKILL);
      limit_s = 1e9;
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  EXPECT_TRUE(acted) << "the action during the run never happened";
  return r;
}

// before_exec, if set, runs in the forked test process just before exec (e.g. to lower a
// limit); it exits the forked process itself when it cannot set things up.
inline Result run_bench(const std::vector<std::string>& args, const Env& env = {},
                        const DuringRun& during = nullptr, double limit_s = 60,
                        const std::function<void()>& before_exec = nullptr) {
  BeforeExec setup;
  if (before_exec) {
    setup = [&before_exec] {
      before_exec();
      return 0;
    };
  }
  return run_bench_with(args, RunOptions{env, during, nullptr, limit_s, setup, {}});
}

// Every process the benchmark started must be gone (and reaped by it) once it has exited.
inline void expect_no_leftovers() {
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

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

inline nlohmann::json driver_result(const std::string& out) {
  for (const auto& line : lines_of(out)) {
    if (line.rfind("DRIVERRESULT=", 0) == 0) return nlohmann::json::parse(line.substr(13));
  }
  ADD_FAILURE() << "no DRIVERRESULT line in:\n" << out;
  return {};
}

inline const std::vector<std::string> kSmall{"--device", "cpu", "--hidden", "64", "--layers", "2",
                                             "--batch",  "2",   "--seq",    "16", "--vocab",  "512",
                                             "--steps",  "2",   "--warmup", "1"};

// On an accelerator --repeats defaults to several rounds; the small workload keeps one
// unless `extra` asks for more, as it fixes --steps and --warmup.
inline std::vector<std::string> small(std::vector<std::string> extra = {},
                                      const std::string& device = "cpu") {
  auto args = kSmall;
  args[1] = device;
  if (device != "cpu" && std::find(extra.begin(), extra.end(), "--repeats") == extra.end()) {
    args.insert(args.end(), {"--repeats", "1"});
  }
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// The tiniest workload of the multi-rank tests (one thread per rank: the ranks share 2 CPUs).
inline const std::vector<std::string> kTiny{"--device", "cpu", "--hidden", "32", "--layers",  "2",
                                            "--batch",  "2",   "--seq",    "8",  "--vocab",   "256",
                                            "--steps",  "2",   "--warmup", "1",  "--threads", "1"};

inline std::vector<std::string> tiny(std::vector<std::string> extra = {}) {
  auto args = kTiny;
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

inline void expect_one_error_line(const Result& r, const std::string& contains) {
  const auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0].rfind("zero3-offload-bench: error: ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(contains), std::string::npos) << lines[0];
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The direct children of `parent` (pids), from /proc.
inline std::vector<pid_t> children_of(pid_t parent) {
  std::istringstream in(read_text("/proc/" + std::to_string(parent) + "/task/" +
                                  std::to_string(parent) + "/children"));
  std::vector<pid_t> out;
  for (pid_t c; in >> c;) out.push_back(c);
  return out;
}

// The arm child of `parent` that runs `arm` ("" = any arm; the device probe never counts), or 0.
inline pid_t arm_child(pid_t parent, const std::string& arm = "") {
  for (pid_t c : children_of(parent)) {
    std::string cmd = read_text("/proc/" + std::to_string(c) + "/cmdline");
    for (char& ch : cmd) {
      if (ch == '\0') ch = ' ';
    }
    if (cmd.find("--internal-child " + arm) != std::string::npos) return c;
  }
  return 0;
}

// An arm child of `parent` is running (not just the device probe).
inline bool arm_child_running(pid_t parent) { return arm_child(parent) != 0; }

// A "Name:   value kB" field of /proc/<pid>/status in bytes; -1 when the process is gone.
inline long long status_kib_field(pid_t pid, const std::string& name) {
  std::istringstream in(read_text("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + ":", 0) == 0) return std::stoll(line.substr(name.size() + 1)) * 1024;
  }
  return -1;
}

// The signal-ignore mask of /proc/<pid>/status; 0 when the process is gone.
inline unsigned long long ignored_signals(pid_t pid) {
  std::istringstream in(read_text("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("SigIgn:", 0) == 0) return std::stoull(line.substr(7), nullptr, 16);
  }
  return 0;
}

// A fresh folder per test (the system's temp folder, `prefix`, the pid and the test's name),
// removed at the end, when no process of the run may be left.
class FreshDirTest : public testing::Test {
 protected:
  explicit FreshDirTest(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           (prefix_ + std::to_string(::getpid()) + "-" +
            testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::filesystem::remove_all(dir_);
    expect_no_leftovers();
  }
  std::filesystem::path dir_;

 private:
  std::string prefix_;
};

}  // namespace zob_e2e
