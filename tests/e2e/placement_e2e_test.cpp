// --gpus N: where each rank's CPU Adam threads run, through the real binary on the CPU device.
// The ranks of one host must split its CPUs, not each take all of them. Harness:
// e2e_support.hpp; main() (the child subreaper) is ranks_e2e_test.cpp's.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "e2e_support.hpp"

namespace {

using namespace zob_e2e;

// No --threads: each rank sizes its pool by its slice.
const std::vector<std::string> kTinyRanks{"--device", "cpu", "--hidden", "32", "--layers", "2",
                                          "--batch",  "2",   "--seq",    "8",  "--vocab",  "256",
                                          "--steps",  "1",   "--warmup", "0"};

std::vector<std::string> tiny_ranks(std::vector<std::string> extra) {
  auto args = kTinyRanks;
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

std::vector<int> cpus_of(const nlohmann::json& rank) {
  return rank.at("placement").at("cpus").get<std::vector<int>>();
}

TEST(PlacementE2E, TwoRanksSplitTheAllowedCpus) {
  const std::vector<int> allowed = allowed_cpus();
  ASSERT_FALSE(allowed.empty());
  const Result r = run_bench(tiny_ranks({"--gpus", "2"}));
  expect_no_leftovers();
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = driver_result(r.out);
  const std::set<int> ok(allowed.begin(), allowed.end());
  for (const char* arm : {"registered", "unregistered"}) {
    SCOPED_TRACE(arm);
    const auto& ranks = j.at(arm).at("ranks");
    ASSERT_EQ(ranks.size(), 2u);
    std::set<int> seen;
    for (int k = 0; k < 2; ++k) {
      const auto& rk = ranks[static_cast<std::size_t>(k)];
      const std::string policy = rk.at("placement").at("policy");
      EXPECT_NE(policy.find("rank slice " + std::to_string(k) + "/2"), std::string::npos) << policy;
      const std::vector<int> cpus = cpus_of(rk);
      ASSERT_FALSE(cpus.empty());
      const std::set<int> mine(cpus.begin(), cpus.end());
      EXPECT_EQ(mine.size(), cpus.size()) << "one Adam thread per slice CPU by default";
      for (int c : mine) {
        EXPECT_TRUE(ok.count(c)) << "CPU " << c << " is not allowed";
        if (allowed.size() >= 2) {
          EXPECT_TRUE(seen.insert(c).second) << "CPU " << c << " twice";
        }
      }
      const std::string line = "[" + std::string(arm) + " rank " + std::to_string(k) +
                               "/2] Adam threads: " + std::to_string(cpus.size()) + ", placement " +
                               policy;
      EXPECT_NE(r.err.find(line), std::string::npos) << line << "\n" << r.err;
    }
    // Neither NUMA node known on the CPU device: the two slices cover the allowed CPUs; a node
    // slice stays within them.
    const std::string policy0 = ranks[0].at("placement").at("policy");
    if (allowed.size() >= 2 && policy0.rfind("rank slice", 0) == 0) {
      EXPECT_EQ(seen, ok);
    }
    // The arm's own placement is rank 0's.
    EXPECT_EQ(j.at(arm).at("placement"), ranks[0].at("placement"));
  }
}

TEST(PlacementE2E, CpuAffinityIsSplitBetweenTheRanks) {
  const std::vector<int> allowed = allowed_cpus();
  if (allowed.size() < 2) GTEST_SKIP() << "needs two allowed CPUs";
  const std::string list = std::to_string(allowed[1]) + "," + std::to_string(allowed[0]);
  const Result r = run_bench(tiny_ranks(
      {"--gpus", "2", "--cpu-affinity", list, "--threads", "3", "--arms", "registered"}));
  expect_no_leftovers();
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = driver_result(r.out);
  const auto& ranks = j.at("registered").at("ranks");
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[0].at("placement").at("policy"), "cpu-affinity, rank slice 0/2");
  EXPECT_EQ(cpus_of(ranks[0]), std::vector<int>(3, allowed[1]));  // 3 threads on a 1-CPU slice
  EXPECT_EQ(ranks[1].at("placement").at("policy"), "cpu-affinity, rank slice 1/2");
  EXPECT_EQ(cpus_of(ranks[1]), std::vector<int>(3, allowed[0]));
  EXPECT_NE(r.err.find("3 Adam threads on the 1 CPUs"), std::string::npos) << r.err;
}

TEST(PlacementE2E, CpuAffinityShorterThanTheRanksIsRefused) {
  const std::vector<int> allowed = allowed_cpus();
  ASSERT_FALSE(allowed.empty());
  const std::string one = std::to_string(allowed[0]);
  const Result r = run_bench(tiny_ranks({"--gpus", "2", "--cpu-affinity", one}));
  expect_no_leftovers();
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  const auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find("--cpu-affinity " + one + " names 1 CPU for --gpus 2"), std::string::npos)
      << lines[0];
  // Refused by the command line: no device probe, no arm.
  EXPECT_EQ(r.err.find("zero3-offload-bench: device"), std::string::npos) << r.err;
}

}  // namespace
