// CPU lists, the placement policy against a fake sysfs tree, and pinned ThreadPool workers.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <system_error>
#include <vector>

#include "zob/cpu_affinity.hpp"
#include "zob/errors.hpp"
#include "zob/thread_pool.hpp"

namespace zob {
namespace {

namespace fs = std::filesystem;

TEST(CpuList, RangesInTheOrderGiven) {
  EXPECT_EQ(parse_cpu_list("0-3,8,5-6"), (std::vector<int>{0, 1, 2, 3, 8, 5, 6}));
  EXPECT_EQ(parse_cpu_list(" 7 "), (std::vector<int>{7}));
  EXPECT_EQ(parse_cpu_list("2-2"), (std::vector<int>{2}));
  EXPECT_EQ(parse_cpu_list("16-23,0-7\n").size(), 16u);
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 5, 6}), "0-3,8,5-6");
  EXPECT_EQ(format_cpu_list({}), "");
  // Round trip on random lists of distinct CPUs.
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<int> cpus(64);
    for (int i = 0; i < 64; ++i) cpus[static_cast<std::size_t>(i)] = i;
    std::shuffle(cpus.begin(), cpus.end(), rng);
    cpus.resize(1 + rng() % 40);
    EXPECT_EQ(parse_cpu_list(format_cpu_list(cpus)), cpus);
  }
}

TEST(CpuList, RefusesDuplicatesAndGarbage) {
  for (const char* bad : {"", " ", "1,1", "0-3,2", "a", "1-", "-1", "3-1", "1,,2", ",1", "1,",
                          "1.5", "0x3", "99999999", "65536", "1-2-3", "+1"}) {
    EXPECT_THROW(parse_cpu_list(bad, "--cpu-affinity"), UsageError) << "'" << bad << "'";
  }
  try {
    parse_cpu_list("0-3,2", "--cpu-affinity");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("CPU 2 twice"), std::string::npos) << e.what();
  }
}

struct FakeSysfs {
  fs::path root = fs::temp_directory_path() / ("zob_sysfs_" + std::to_string(::getpid()));
  FakeSysfs() {
    fs::create_directories(root / "devices/system/node/node1");
    std::ofstream(root / "devices/system/node/node1/cpulist") << "4-5,9\n";
    fs::create_directories(root / "devices/system/node/node0");
    std::ofstream(root / "devices/system/node/node0/cpulist") << "0-3\n";
    fs::create_directories(root / "bus/pci/devices/0000:3b:00.0");
    std::ofstream(root / "bus/pci/devices/0000:3b:00.0/numa_node") << "1\n";
    fs::create_directories(root / "bus/pci/devices/0000:5e:00.0");
    std::ofstream(root / "bus/pci/devices/0000:5e:00.0/numa_node") << "-1\n";
  }
  ~FakeSysfs() { fs::remove_all(root); }
};

TEST(Placement, NumaNodeFromSysfs) {
  FakeSysfs sys;
  EXPECT_EQ(numa_node_cpus(1, sys.root), (std::vector<int>{4, 5, 9}));
  EXPECT_TRUE(numa_node_cpus(7, sys.root).empty());
  EXPECT_EQ(pci_numa_node("00000000:3B:00.0", sys.root), 1);  // CUDA's spelling
  EXPECT_EQ(pci_numa_node("0000:3b:00.0", sys.root), 1);
  EXPECT_EQ(pci_numa_node("3b:00.0", sys.root), 1);
  EXPECT_EQ(pci_numa_node("0000:5e:00.0", sys.root), -1);
  EXPECT_EQ(pci_numa_node("0000:99:00.0", sys.root), -1);
  EXPECT_EQ(pci_numa_node("../../x", sys.root), -1);
}

TEST(Placement, Policies) {
  FakeSysfs sys;
  const std::vector<int> allowed{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::string notice;
  DeviceInfo info;
  // Unknown node: unpinned.
  ThreadPlacement p = choose_placement({}, 2, info, allowed, &notice, sys.root);
  EXPECT_EQ(p.policy, "none");
  EXPECT_TRUE(p.cpus.empty());
  EXPECT_TRUE(notice.empty());
  // Node from the PCI bus id.
  info.pci_bus_id = "00000000:3B:00.0";
  p = choose_placement({}, 3, info, allowed, &notice, sys.root);
  EXPECT_EQ(p.policy, "numa-node 1");
  EXPECT_EQ(p.cpus, (std::vector<int>{4, 5, 9}));
  EXPECT_TRUE(notice.empty());
  // DeviceInfo::numa_node wins over the bus id; more threads than CPUs wrap, with a notice.
  info.numa_node = 0;
  p = choose_placement({}, 6, info, {1, 2, 3, 7}, &notice, sys.root);
  EXPECT_EQ(p.policy, "numa-node 0");
  EXPECT_EQ(p.cpus, (std::vector<int>{1, 2, 3, 1, 2, 3}));
  EXPECT_NE(notice.find("NUMA node 0"), std::string::npos) << notice;
  // None of the node's CPUs allowed: unpinned, with a notice.
  notice.clear();
  p = choose_placement({}, 2, info, {8, 9}, &notice, sys.root);
  EXPECT_EQ(p.policy, "none");
  EXPECT_NE(notice.find("unpinned"), std::string::npos) << notice;
  // --cpu-affinity wins over everything; its first `threads` CPUs.
  p = choose_placement({9, 8, 7}, 2, info, allowed, &notice, sys.root);
  EXPECT_EQ(p.policy, "cpu-affinity");
  EXPECT_EQ(p.cpus, (std::vector<int>{9, 8}));
  EXPECT_THROW(choose_placement({9}, 2, info, allowed, &notice, sys.root), UsageError);
  EXPECT_THROW(choose_placement({9, 11}, 2, info, allowed, &notice, sys.root), UsageError);
}

TEST(Placement, ValidateNamesTheProblem) {
  EXPECT_NO_THROW(validate_cpu_affinity({}, 4, {0}));
  EXPECT_NO_THROW(validate_cpu_affinity({1, 0}, 2, {0, 1}));
  try {
    validate_cpu_affinity({0, 5}, 2, {0, 1});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("CPU 5"), std::string::npos) << e.what();
  }
  try {
    validate_cpu_affinity({0}, 2, {0, 1});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--threads"), std::string::npos) << e.what();
  }
}

TEST(PinnedPool, WorkersRunOnTheirCpu) {
  const std::vector<int> allowed = allowed_cpu_list();
  ASSERT_FALSE(allowed.empty());
  if (allowed.size() < 2) GTEST_SKIP() << "needs two allowed CPUs";
  cpu_set_t caller_before;
  ASSERT_EQ(sched_getaffinity(0, sizeof caller_before, &caller_before), 0);
  // Reversed order: worker 0 on the last CPU, so "range i ran on cpus[i]" cannot pass by luck
  // of the identity mapping.
  const std::vector<int> cpus{allowed[1], allowed[0]};
  ThreadPool pool(2, cpus);
  EXPECT_EQ(pool.size(), 2);
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> seen[2] = {-1, -1};
    std::atomic<int> covered{0};
    pool.parallel_for(
        128,
        [&](std::int64_t b, std::int64_t e) {
          seen[b / 64] = sched_getcpu();
          covered += static_cast<int>(e - b);
        },
        64);
    EXPECT_EQ(covered.load(), 128);
    EXPECT_EQ(seen[0].load(), cpus[0]);
    EXPECT_EQ(seen[1].load(), cpus[1]);
  }
  // One range (n below align) still runs on a pinned worker, never on the caller.
  std::atomic<int> where{-1};
  pool.parallel_for(
      10, [&](std::int64_t, std::int64_t) { where = sched_getcpu(); }, 64);
  EXPECT_EQ(where.load(), cpus[0]);
  // The caller's own mask is untouched.
  cpu_set_t caller_after;
  ASSERT_EQ(sched_getaffinity(0, sizeof caller_after, &caller_after), 0);
  EXPECT_TRUE(CPU_EQUAL(&caller_before, &caller_after));
}

TEST(PinnedPool, RefusesShortListsAndForeignCpus) {
  EXPECT_THROW(ThreadPool(3, std::vector<int>{0, 1}), std::invalid_argument);
  const std::vector<int> allowed = allowed_cpu_list();
  const int foreign = allowed.back() + 1;  // not online or not ours: the kernel refuses it
  if (foreign >= CPU_SETSIZE) GTEST_SKIP();
  EXPECT_THROW(ThreadPool(1, std::vector<int>{foreign}), std::system_error);
}

TEST(PinnedPool, RethrowsAndCovers) {
  const std::vector<int> allowed = allowed_cpu_list();
  ThreadPool pool(1, std::vector<int>{allowed[0]});
  std::vector<int> hits(1000, 0);
  pool.parallel_for(1000, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) ++hits[static_cast<std::size_t>(i)];
  });
  EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), 1000);
  EXPECT_THROW(
      pool.parallel_for(10, [](std::int64_t, std::int64_t) { throw std::runtime_error("x"); }),
      std::runtime_error);
}

}  // namespace
}  // namespace zob
