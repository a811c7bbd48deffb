// --launcher mpi (issue 7): the real binary started by mpirun on this host, CPU device. The
// MPI run of one arm must compute bitwise what the fork launcher's ranks compute; the MPI
// collectives must reduce in rank order; bad input is refused with one line. Skipped, with
// the reason, where the build has no MPI or mpirun is not installed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "e2e_support.hpp"

namespace {

using namespace zob_e2e;

std::string find_mpirun() {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string candidate = dirs.substr(start, end - start) + "/mpirun";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

// Root may run mpirun only when asked to; vader (shared memory) only, as the ranks share
// one host and a container may have no usable network interface.
std::vector<std::string> mpirun_prefix(int np) {
  return {find_mpirun(),
          "--allow-run-as-root",
          "--oversubscribe",
          "--bind-to",
          "none",
          "--mca",
          "btl",
          "self,vader",
          "-np",
          std::to_string(np)};
}

// Runs argv (argv[0] a path) to completion, at most limit_s, in a process group of its own.
Result run_program(const std::vector<std::string>& args, double limit_s = 60) {
  RunOptions o;
  o.program = args.at(0);
  o.limit_s = limit_s;
  return run_bench_with(std::vector<std::string>(args.begin() + 1, args.end()), o);
}

Result run_mpi_bench(int np, const std::vector<std::string>& bench_args) {
  auto args = mpirun_prefix(np);
  args.push_back(ZOB_BINARY);
  args.insert(args.end(), bench_args.begin(), bench_args.end());
  return run_program(args);
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class MpiE2E : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef ZOB_MPI_CHECK
    GTEST_SKIP() << "this build has no MPI (install libopenmpi-dev: scripts/deps)";
#endif
    if (find_mpirun().empty()) GTEST_SKIP() << "mpirun not found on PATH (openmpi-bin)";
  }
};

TEST_F(MpiE2E, OneArmOverMpiEqualsTheForkLauncherBitwise) {
  const std::string json_path = ::testing::TempDir() + "zob_mpi_reg.json";
  std::remove(json_path.c_str());
  const Result fork = run_bench(tiny({"--gpus", "2", "--arms", "registered"}));
  ASSERT_EQ(fork.rc, 0) << fork.err;
  const Result mpi =
      run_mpi_bench(2, tiny({"--launcher", "mpi", "--arms", "registered", "--json", json_path}));
  ASSERT_EQ(mpi.rc, 0) << mpi.err;
  const auto f = driver_result(fork.out).at("registered");
  const auto m = driver_result(mpi.out).at("registered");
  EXPECT_EQ(m.at("ok"), true);
  EXPECT_EQ(m.at("gpus"), 2);
  ASSERT_EQ(m.at("ranks").size(), 2u);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(m.at("ranks")[static_cast<std::size_t>(k)].at("rank"), k);
    EXPECT_EQ(m.at("ranks")[static_cast<std::size_t>(k)].at("ok"), true);
  }
  // Bitwise: the same shard checksums and the same fp32 losses (JSON round-trips floats).
  EXPECT_EQ(m.at("param_checksum"), f.at("param_checksum"));
  ASSERT_EQ(m.at("losses").size(), 3u);
  EXPECT_EQ(m.at("losses"), f.at("losses"));
  EXPECT_EQ(m.at("ranks")[1].at("shard_checksum"), f.at("ranks")[1].at("shard_checksum"));
  // The table and the --json file, as the fork launcher writes them, from rank 0 only.
  EXPECT_EQ(count_of(mpi.out, "DRIVERRESULT="), 1u) << mpi.out;
  EXPECT_EQ(count_of(mpi.err, "arm registered: starting"), 1u) << mpi.err;
  const auto file = nlohmann::json::parse(read_text(json_path));
  EXPECT_EQ(file.at("registered").at("param_checksum"), m.at("param_checksum"));
  std::remove(json_path.c_str());
}

// The "wrote ..." lines of a run, its own file prefix replaced by "<run>".
std::vector<std::string> wrote_lines(const std::string& err, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) {
    if (line.find(": wrote ") == std::string::npos) continue;
    for (auto at = line.find(prefix); at != std::string::npos; at = line.find(prefix, at)) {
      line.replace(at, prefix.size(), "<run>");
    }
    out.push_back(line);
  }
  return out;
}

// Each CSV row without its numbers: row kind, arm, phase, step.
std::vector<std::string> csv_row_names(const std::string& path) {
  std::vector<std::string> out;
  std::istringstream in(read_text(path));
  for (std::string line; std::getline(in, line);) {
    std::size_t end = 0;
    for (int commas = 0; end < line.size(); ++end) {
      if (line[end] == ',' && ++commas == 4) break;
    }
    out.push_back(line.substr(0, end));
  }
  return out;
}

// Both launchers hand their result to one reporting call (src/report/publish.hpp): the same
// files, announced in the same order, with the same rows.
TEST_F(MpiE2E, WritesEveryFileTheForkLauncherWritesInTheSameOrder) {
  const auto outputs = [](const std::string& prefix) {
    return std::vector<std::string>{"--arms",  "registered",          "--json", prefix + ".json",
                                    "--csv",   prefix + ".csv",       "--plot", prefix + ".svg",
                                    "--trace", prefix + ".trace.json"};
  };
  const std::string fork_prefix = ::testing::TempDir() + "zob_fork_files";
  const std::string mpi_prefix = ::testing::TempDir() + "zob_mpi_files";
  auto fork_args = tiny({"--gpus", "2"});
  for (const auto& a : outputs(fork_prefix)) fork_args.push_back(a);
  auto mpi_args = tiny({"--launcher", "mpi"});
  for (const auto& a : outputs(mpi_prefix)) mpi_args.push_back(a);
  const Result fork = run_bench(fork_args);
  ASSERT_EQ(fork.rc, 0) << fork.err;
  const Result mpi = run_mpi_bench(2, mpi_args);
  ASSERT_EQ(mpi.rc, 0) << mpi.err;
  const auto fork_wrote = wrote_lines(fork.err, fork_prefix);
  EXPECT_EQ(fork_wrote.size(), 4u) << fork.err;
  EXPECT_EQ(wrote_lines(mpi.err, mpi_prefix), fork_wrote) << mpi.err;
  EXPECT_EQ(csv_row_names(mpi_prefix + ".csv"), csv_row_names(fork_prefix + ".csv"));
  for (const char* ext : {".json", ".csv", ".svg", ".trace.json"}) {
    std::remove((fork_prefix + ext).c_str());
    std::remove((mpi_prefix + ext).c_str());
  }
}

TEST_F(MpiE2E, ReduceScatterOfThreeRanksIsTheRankOrderSum) {
#ifdef ZOB_MPI_CHECK
  auto args = mpirun_prefix(3);
  args.push_back(ZOB_MPI_CHECK);
  const Result r = run_program(args);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("mpi_collectives_check: 3 ranks, 16 cases per rank, 0 failures"),
            std::string::npos)
      << r.out << r.err;
#endif
}

TEST_F(MpiE2E, TwoArmsAreRefusedWithOneLine) {
  // Started directly (one rank): the refusal comes before MPI_Init.
  const Result direct = run_bench(tiny({"--launcher", "mpi"}));
  EXPECT_EQ(direct.rc, 2);
  expect_one_error_line(direct, "one mpirun per arm");
  EXPECT_NE(direct.err.find("zero3-offload-bench compare"), std::string::npos) << direct.err;
  EXPECT_TRUE(direct.out.empty()) << direct.out;
  // Under mpirun: every rank refuses, only rank 0 says so.
  const Result mpi = run_mpi_bench(2, tiny({"--launcher", "mpi"}));
  EXPECT_EQ(mpi.rc, 2) << mpi.err;
  EXPECT_EQ(count_of(mpi.err, "zero3-offload-bench: error:"), 1u) << mpi.err;
}

TEST_F(MpiE2E, GpusDisagreeingWithTheWorldSizeIsRefused) {
  const Result r =
      run_mpi_bench(2, tiny({"--launcher", "mpi", "--arms", "registered", "--gpus", "3"}));
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_EQ(count_of(r.err, "zero3-offload-bench: error: --gpus 3 disagrees with the 2 ranks"), 1u)
      << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

// Once the arm runs, a failed rank ends the job (MPI_Abort) with its reason: a rank that
// throws, and a rank that hangs, which its peers name when their collective deadline passes
// (--timeout 2: 1 s per wait). Neither leaves mpirun waiting.
TEST_F(MpiE2E, AFailedRankEndsTheJobWithItsReason) {
  auto args = mpirun_prefix(2);
  for (const auto& [kind, says] : std::vector<std::pair<std::string, std::string>>{
           {"throw", "rank 1 of 2: test fault"}, {"hang", "did not complete within 1 s"}}) {
    std::vector<std::string> run{"-x", "ZOB_TEST_MPI_RANK_FAULT=1:" + kind, ZOB_BINARY};
    const auto bench = tiny({"--launcher", "mpi", "--arms", "registered", "--timeout", "2"});
    run.insert(run.end(), bench.begin(), bench.end());
    auto full = args;
    full.insert(full.end(), run.begin(), run.end());
    const Result r = run_program(full, 30);
    EXPECT_NE(r.rc, 0) << kind << ": " << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << kind << ": " << r.err;
    EXPECT_NE(r.err.find("ending every rank (MPI_Abort)"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("DRIVERRESULT="), std::string::npos) << r.out;
    EXPECT_LT(r.wall_s, 20) << kind;
  }
}

// The processes whose command line holds `token` (a path unique to one test run).
int processes_with(const std::string& token) {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = read_text(entry.path() / "cmdline");
    for (char& c : cmd) {
      if (c == '\0') c = ' ';
    }
    if (cmd.find(token) != std::string::npos) ++n;
  }
  return n;
}

// A rank lost inside a collective of a step (issue 27): killed outright (SIGKILL, as kill -9
// from outside), or failing there. Its peers are waiting for it in that collective, which MPI
// cannot cancel: mpirun ends the job for a killed rank (OpenMPI's line: "process rank 1 with
// PID ... exited on signal 9"), MPI_Abort for a failing one. Either way the job ends within
// the test's limit, the rank is named, no rank prints a result, and no process of the run is
// left.
TEST_F(MpiE2E, ARankLostInsideACollectiveEndsTheJob) {
  for (const auto& [kind, says] : std::vector<std::pair<std::string, std::string>>{
           {"kill", "rank 1 with PID"}, {"throw", "rank 1 failed in step 1, phase "}}) {
    const std::string token = ::testing::TempDir() + "zob_mpi_lost_" + kind + ".json";
    std::vector<std::string> run = mpirun_prefix(2);
    for (const std::string& a : {std::string("-x"), "ZOB_TEST_MPI_RANK_FAULT=1:" + kind + ":20",
                                 std::string(ZOB_BINARY)}) {
      run.push_back(a);
    }
    for (const auto& a :
         tiny({"--launcher", "mpi", "--arms", "registered", "--timeout", "20", "--json", token})) {
      run.push_back(a);
    }
    const Result r = run_program(run, 60);
    EXPECT_NE(r.rc, 0) << kind << ": " << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << kind << ": " << r.err;
    EXPECT_EQ(r.out.find("DRIVERRESULT="), std::string::npos) << r.out;
    EXPECT_FALSE(std::filesystem::exists(token)) << "a partial result file was left: " << token;
    EXPECT_EQ(processes_with(token), 0) << kind << ": a rank outlived the job";
  }
}

TEST(MpiLauncherFlag, UnknownLauncherIsRefused) {
  const Result r = run_bench(tiny({"--launcher", "ssh"}));
  EXPECT_EQ(r.rc, 2);
  expect_one_error_line(r, "--launcher: unknown launcher 'ssh'");
}

}  // namespace
