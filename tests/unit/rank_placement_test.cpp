// --gpus N: each rank's slice of the host's CPUs (cpu_slice, choose_rank_placement against a
// fake sysfs tree) and the command line's --gpus / --threads / --cpu-affinity rules.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include "cli/cli.hpp"
#include "collectives/shm_collectives.hpp"
#include "random_seed.hpp"
#include "step/ranks/rank_placement.hpp"
#include "zob/cpu_affinity.hpp"
#include "zob/errors.hpp"

namespace zob {
namespace {

namespace fs = std::filesystem;

// Node 0: CPUs 0-3; node 1: 4-7,12-15; node 2: its cpulist is missing; PCI device on node 1.
struct NodeSysfs {
  fs::path root = fs::temp_directory_path() / ("zob_rank_sysfs_" + std::to_string(::getpid()));
  NodeSysfs() {
    fs::create_directories(root / "devices/system/node/node0");
    std::ofstream(root / "devices/system/node/node0/cpulist") << "0-3\n";
    fs::create_directories(root / "devices/system/node/node1");
    std::ofstream(root / "devices/system/node/node1/cpulist") << "4-7,12-15\n";
    fs::create_directories(root / "devices/system/node/node2");
    fs::create_directories(root / "bus/pci/devices/0000:af:00.0");
    std::ofstream(root / "bus/pci/devices/0000:af:00.0/numa_node") << "1\n";
  }
  ~NodeSysfs() { fs::remove_all(root); }
};

std::vector<int> range(int lo, int hi) {  // [lo, hi]
  std::vector<int> out;
  for (int c = lo; c <= hi; ++c) out.push_back(c);
  return out;
}

// Every rank's placement for the same inputs, as the ranks themselves would compute it.
std::vector<ThreadPlacement> place_all(const std::vector<int>& affinity, int threads,
                                       const std::vector<int>& nodes,
                                       const std::vector<int>& allowed, const std::string& sysfs,
                                       std::vector<std::string>* notices = nullptr) {
  std::vector<ThreadPlacement> out;
  for (int r = 0; r < static_cast<int>(nodes.size()); ++r) {
    std::string notice;
    out.push_back(choose_rank_placement(affinity, threads, r, nodes, allowed, &notice, sysfs));
    if (notices != nullptr) notices->push_back(notice);
  }
  return out;
}

void expect_disjoint(const std::vector<ThreadPlacement>& ps) {
  std::set<int> seen;
  for (const ThreadPlacement& p : ps) {
    for (int c : std::set<int>(p.cpus.begin(), p.cpus.end())) {
      EXPECT_TRUE(seen.insert(c).second) << "CPU " << c << " in two ranks' slices";
    }
  }
}

TEST(CpuSlice, UnevenSplitsAreContiguousBalancedAndCoverTheList) {
  EXPECT_EQ(cpu_slice(range(0, 6), 3, 0), range(0, 2));
  EXPECT_EQ(cpu_slice(range(0, 6), 3, 1), range(3, 4));
  EXPECT_EQ(cpu_slice(range(0, 6), 3, 2), range(5, 6));
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int> cpus = range(0, 127);
    std::shuffle(cpus.begin(), cpus.end(), rng);
    cpus.resize(1 + rng() % 40);
    const int parts = 1 + static_cast<int>(rng() % cpus.size());
    std::vector<int> joined;
    std::size_t smallest = cpus.size(), largest = 0, previous = cpus.size();
    for (int i = 0; i < parts; ++i) {
      std::string notice;
      const std::vector<int> s = cpu_slice(cpus, parts, i, &notice);
      EXPECT_TRUE(notice.empty()) << notice;
      EXPECT_LE(s.size(), previous) << "larger slices come first";
      previous = s.size();
      smallest = std::min(smallest, s.size());
      largest = std::max(largest, s.size());
      joined.insert(joined.end(), s.begin(), s.end());
    }
    EXPECT_EQ(joined, cpus) << parts << " parts";
    EXPECT_LE(largest - smallest, 1u);
    EXPECT_GE(smallest, 1u);
  }
}

TEST(CpuSlice, MoreRanksThanCpusShareThemRoundRobinWithANotice) {
  const std::vector<int> cpus{9, 4};
  std::vector<int> got;
  for (int i = 0; i < 5; ++i) {
    std::string notice;
    const std::vector<int> s = cpu_slice(cpus, 5, i, &notice);
    ASSERT_EQ(s.size(), 1u);
    got.push_back(s[0]);
    EXPECT_NE(notice.find("5 ranks share the 2 CPUs"), std::string::npos) << notice;
  }
  EXPECT_EQ(got, (std::vector<int>{9, 4, 9, 4, 9}));
  EXPECT_TRUE(cpu_slice({}, 2, 1).empty());
  EXPECT_THROW(cpu_slice(cpus, 2, 2), std::invalid_argument);
  EXPECT_THROW(cpu_slice(cpus, 0, 0), std::invalid_argument);
  EXPECT_THROW(cpu_slice(cpus, 2, -1), std::invalid_argument);
}

TEST(RankPlacement, UnknownNodesSplitTheAllowedCpus) {
  NodeSysfs sys;
  std::mt19937 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<int> allowed;
    for (int c = 0; c < 48; ++c) {
      if (rng() % 3 != 0) allowed.push_back(c);
    }
    const int ranks = 1 + static_cast<int>(rng() % 6);
    const auto ps = place_all({}, 0, std::vector<int>(static_cast<std::size_t>(ranks), -1), allowed,
                              sys.root.string());
    std::vector<int> joined;
    for (int r = 0; r < ranks; ++r) {
      const ThreadPlacement& p = ps[static_cast<std::size_t>(r)];
      EXPECT_EQ(p.policy, "rank slice " + std::to_string(r) + "/" + std::to_string(ranks));
      joined.insert(joined.end(), p.cpus.begin(), p.cpus.end());
    }
    EXPECT_EQ(joined, allowed);  // one thread per slice CPU, slices in rank order
  }
}

TEST(RankPlacement, RanksOfANodeSplitItsAllowedCpus) {
  NodeSysfs sys;
  std::vector<int> allowed = range(0, 15);
  allowed.erase(std::find(allowed.begin(), allowed.end(), 6));  // node 1 usable: 4,5,7,12-15
  std::vector<std::string> notices;
  const auto ps = place_all({}, 0, {1, 0, 1, 0, 1}, allowed, sys.root.string(), &notices);
  EXPECT_EQ(ps[0].policy, "numa-node 1, rank slice 0/3");
  EXPECT_EQ(ps[0].cpus, (std::vector<int>{4, 5, 7}));
  EXPECT_EQ(ps[2].policy, "numa-node 1, rank slice 1/3");
  EXPECT_EQ(ps[2].cpus, (std::vector<int>{12, 13}));
  EXPECT_EQ(ps[4].cpus, (std::vector<int>{14, 15}));
  EXPECT_EQ(ps[1].policy, "numa-node 0, rank slice 0/2");
  EXPECT_EQ(ps[1].cpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(ps[3].cpus, (std::vector<int>{2, 3}));
  for (const std::string& n : notices) EXPECT_TRUE(n.empty()) << n;
  expect_disjoint(ps);
}

TEST(RankPlacement, RanksWithoutAUsableNodeTakeTheCpusNoNodeRankUses) {
  NodeSysfs sys;
  // Rank 0 on node 0; rank 1 unknown; rank 2 on node 2 (no cpulist); rank 3 on node 1, none of
  // whose CPUs is allowed.
  std::vector<std::string> notices;
  const std::vector<int> allowed = range(0, 3);
  auto ps = place_all({}, 0, {0, -1, 2, 1}, allowed, sys.root.string(), &notices);
  EXPECT_EQ(ps[0].policy, "numa-node 0, rank slice 0/1");
  EXPECT_EQ(ps[0].cpus, range(0, 3));
  // Node 0 took every allowed CPU: the others split all allowed CPUs.
  EXPECT_EQ(ps[1].policy, "rank slice 0/3");
  EXPECT_EQ(ps[2].policy, "rank slice 1/3");
  EXPECT_EQ(ps[3].policy, "rank slice 2/3");
  EXPECT_NE(notices[3].find("NUMA node 1 but none of its CPUs"), std::string::npos) << notices[3];
  expect_disjoint({ps[1], ps[2], ps[3]});

  ps = place_all({}, 0, {-1, 0, -1}, range(0, 11), sys.root.string());
  EXPECT_EQ(ps[1].cpus, range(0, 3));
  EXPECT_EQ(ps[0].cpus, range(4, 7));  // allowed minus node 0, split in two
  EXPECT_EQ(ps[2].cpus, range(8, 11));
  expect_disjoint(ps);
}

TEST(RankPlacement, ThreadsWrapAroundTheSlice) {
  NodeSysfs sys;
  std::vector<std::string> notices;
  auto ps = place_all({}, 5, {0, 0}, range(0, 15), sys.root.string(), &notices);
  EXPECT_EQ(ps[1].cpus, (std::vector<int>{2, 3, 2, 3, 2}));
  EXPECT_NE(notices[1].find("5 Adam threads on the 2 CPUs"), std::string::npos) << notices[1];
  ps = place_all({}, 1, {0, 0}, range(0, 15), sys.root.string(), &notices);
  EXPECT_EQ(ps[0].cpus, (std::vector<int>{0}));
  EXPECT_EQ(ps[1].cpus, (std::vector<int>{2}));
  // More ranks than CPUs: round-robin, said in the notice.
  notices.clear();
  ps = place_all({}, 0, {-1, -1, -1}, {6, 9}, sys.root.string(), &notices);
  EXPECT_EQ(ps[2].cpus, (std::vector<int>{6}));
  EXPECT_NE(notices[2].find("3 ranks share the 2 CPUs"), std::string::npos) << notices[2];
}

TEST(RankPlacement, CpuAffinityIsSplitInRankOrder) {
  NodeSysfs sys;
  const std::vector<int> list{12, 13, 0, 1, 2};
  // The nodes do not matter with --cpu-affinity.
  auto ps = place_all(list, 0, {1, 0}, range(0, 15), sys.root.string());
  EXPECT_EQ(ps[0].policy, "cpu-affinity, rank slice 0/2");
  EXPECT_EQ(ps[0].cpus, (std::vector<int>{12, 13, 0}));
  EXPECT_EQ(ps[1].policy, "cpu-affinity, rank slice 1/2");
  EXPECT_EQ(ps[1].cpus, (std::vector<int>{1, 2}));
  std::string notice;
  EXPECT_THROW(choose_rank_placement({3}, 0, 0, {-1, -1}, range(0, 15), &notice, sys.root.string()),
               UsageError);
  EXPECT_THROW(
      choose_rank_placement({3, 40}, 0, 0, {-1, -1}, range(0, 15), &notice, sys.root.string()),
      UsageError);
  EXPECT_THROW(choose_rank_placement({}, 0, 2, {-1, -1}, range(0, 15), &notice),
               std::invalid_argument);
}

TEST(RankPlacement, DeviceNodeFromInfoOrPciBus) {
  NodeSysfs sys;
  DeviceInfo info;
  info.numa_node = 0;
  info.pci_bus_id = "0000:af:00.0";
  EXPECT_EQ(device_numa_node(info, sys.root.string()), 0);
  info.numa_node = -1;
  EXPECT_EQ(device_numa_node(info, sys.root.string()), 1);
  info.pci_bus_id.clear();
  EXPECT_EQ(device_numa_node(info, sys.root.string()), -1);
}

CliCommand parse(std::vector<std::string> flags) {
  flags.insert(flags.begin(), "zero3-offload-bench");
  return parse_command_line(flags);
}

TEST(RankPlacementCli, ThreadsDefaultToTheSliceWithSeveralRanks) {
  EXPECT_EQ(parse({"--gpus", "2"}).run.threads, 0);
  EXPECT_EQ(parse({"--gpus", "all"}).run.threads, 0);
  EXPECT_EQ(parse({"--gpus", "2", "--threads", "3"}).run.threads, 3);
  RunConfig c;
  c.gpus = 1;
  c.threads = 0;
  c.cpu_affinity = allowed_cpu_list();
  c.cpu_affinity.resize(1);
  resolve_default_threads(c);
  EXPECT_EQ(c.threads, 1);  // --gpus all resolved to one rank: as many as the list
}

TEST(RankPlacementCli, CpuAffinityNeedsACpuPerRank) {
  const std::vector<int> allowed = allowed_cpu_list();
  ASSERT_FALSE(allowed.empty());
  const std::string one = std::to_string(allowed[0]);
  try {
    parse({"--gpus", "2", "--cpu-affinity", one});
    FAIL() << "accepted";
  } catch (const UsageError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--cpu-affinity " + one + " names 1 CPU for --gpus 2"), std::string::npos)
        << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(parse({"--gpus", "2", "--schedule", "deepspeed", "--offload-param"}));
  EXPECT_NO_THROW(parse({"--gpus", "2", "--schedule", "overlap", "--offload-param"}));
  if (allowed.size() >= 2) {
    const auto c =
        parse({"--gpus", "2", "--cpu-affinity", format_cpu_list({allowed[0], allowed[1]})}).run;
    EXPECT_EQ(c.cpu_affinity, (std::vector<int>{allowed[0], allowed[1]}));
    EXPECT_EQ(c.threads, 0);
  }
}

// --launcher mpi: ranks on several machines split only their own machine's CPUs.
TEST(RankPlacement, OnlyTheRanksOfOneMachineShareItsCpus) {
  std::mt19937_64 g(zob::test::random_seed("OnlyTheRanksOfOneMachineShareItsCpus"));
  for (int trial = 0; trial < 50; ++trial) {
    const int n = 1 + static_cast<int>(g() % 12);
    std::vector<RankLocation> where(static_cast<std::size_t>(n));
    for (auto& w : where) {
      w.machine = 1000 + g() % 3;  // up to three machines, ranks interleaved
      w.numa_node = static_cast<int>(g() % 3) - 1;
    }
    for (int r = 0; r < n; ++r) {
      const LocalRanks local = local_ranks(where, r);
      std::vector<int> expect_nodes;
      int expect_index = -1;
      for (int k = 0; k < n; ++k) {
        if (where[static_cast<std::size_t>(k)].machine !=
            where[static_cast<std::size_t>(r)].machine)
          continue;
        if (k == r) expect_index = static_cast<int>(expect_nodes.size());
        expect_nodes.push_back(where[static_cast<std::size_t>(k)].numa_node);
      }
      EXPECT_EQ(local.nodes, expect_nodes) << "rank " << r;
      EXPECT_EQ(local.index, expect_index) << "rank " << r;
    }
  }
  // Two machines of two ranks each: each rank is the 0th or 1st of its own machine.
  const std::vector<RankLocation> two{{7, 0}, {9, 0}, {7, 1}, {9, -1}};
  EXPECT_EQ(local_ranks(two, 2).index, 1);
  EXPECT_EQ(local_ranks(two, 2).nodes, (std::vector<int>{0, 1}));
  EXPECT_EQ(local_ranks(two, 1).index, 0);
  EXPECT_EQ(local_ranks(two, 1).nodes, (std::vector<int>{0, -1}));
}

TEST(RankPlacement, MachineKeyIsStableAndLocationsGatherInRankOrder) {
  EXPECT_EQ(machine_key(), machine_key());
  SingleRankCollectives one;
  const auto where = exchange_locations(one, 3);
  ASSERT_EQ(where.size(), 1u);
  EXPECT_EQ(where[0].machine, machine_key());
  EXPECT_EQ(where[0].numa_node, 3);
}

}  // namespace
}  // namespace zob
