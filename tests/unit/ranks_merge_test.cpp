// The launcher's merge of the ranks' results: slowest rank per step, combined checksum, and a
// failure that names the rank at fault.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

#include "driver/rank_body.hpp"
#include "driver/ranks.hpp"
#include "report/json_util.hpp"
#include "step/ranks/partitioned_step.hpp"
#include "zob/model.hpp"
#include "zob/result.hpp"

namespace zob {
namespace {

RunConfig cfg(int gpus) {
  RunConfig c;
  c.model = {61, 8, 3};
  c.steps = 3;
  c.warmup = 1;
  c.batch = 3;  // the ranks' results below: 21 tokens each
  c.seq = 7;
  c.gpus = gpus;
  c.device = DeviceKind::cpu;
  return c;
}

ArmResult rank_result(int rank, const std::vector<double>& walls, const std::string& checksum) {
  ArmResult a;
  a.arm = Arm::registered;
  a.ok = true;
  a.steps = 3;
  a.warmup = 1;
  a.param_checksum = checksum;
  a.gpus = 2;
  for (double w : walls) {
    StepSample s;
    s.wall_s = w;
    s.loss = 1.5f;
    s.phases["adam"] = PhaseSample{-1, w / 2, 28, 1};
    a.samples.push_back(s);
  }
  a.pid = 100 + rank;
  a.batch = 3;
  a.seq = 7;
  a.tokens_per_step = 42;  // the group's step (RunConfig::tokens_per_step)
  return a;
}

RankOutcome outcome(int rank, const ArmResult& a) {
  RankOutcome o;
  o.rank = rank;
  o.pid = 100 + rank;
  o.output = nlohmann::json(a).dump();
  o.exited = true;
  return o;
}

TEST(RanksMerge, StepTimeIsTheSlowestRankPerStep) {
  std::mt19937 rng(99);
  std::uniform_real_distribution<double> d(0.1, 1.0);
  std::vector<double> w0, w1;
  for (int i = 0; i < 4; ++i) {
    w0.push_back(d(rng));
    w1.push_back(d(rng));
  }
  const auto m = merge_rank_results(
      cfg(2), Arm::registered,
      {outcome(0, rank_result(0, w0, "aaaa")), outcome(1, rank_result(1, w1, "bbbb"))}, -1, "");
  ASSERT_TRUE(m.ok) << m.error;
  ASSERT_EQ(m.samples.size(), 4u);
  double sum = 0, best = 1e9;
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(m.samples[i].wall_s, std::max(w0[i], w1[i]));
    if (i >= 1) {
      sum += std::max(w0[i], w1[i]);
      best = std::min(best, std::max(w0[i], w1[i]));
    }
  }
  EXPECT_DOUBLE_EQ(m.step_avg_s, sum / 3);
  EXPECT_EQ(m.step_min_s, best);
  EXPECT_EQ(m.gpus, 2);
  EXPECT_EQ(m.tokens_per_step, 42);  // data parallel: both ranks' micro-batches per step
  ASSERT_EQ(m.ranks.size(), 2u);
  EXPECT_EQ(m.ranks[1].step_s, w1);
  EXPECT_DOUBLE_EQ(m.ranks[1].phases.at("adam").host_s, (w1[1] + w1[2] + w1[3]) / 6);
  EXPECT_EQ(m.param_checksum, combine_checksums({"aaaa", "bbbb"}));
  EXPECT_NE(combine_checksums({"aaaa", "bbbb"}), combine_checksums({"bbbb", "aaaa"}));
  EXPECT_EQ(combine_checksums({"aaaa"}), "aaaa");
  // round trip through the pipe format keeps the ranks
  const ArmResult back = nlohmann::json(m).get<ArmResult>();
  ASSERT_EQ(back.ranks.size(), 2u);
  EXPECT_EQ(back.ranks[1].step_s, w1);
  EXPECT_EQ(back.gpus, 2);
}

TEST(RanksMerge, FailureNamesTheCulpritRank) {
  const auto ok0 = outcome(0, rank_result(0, {1, 1, 1, 1}, "aaaa"));
  ArmResult stopped = rank_result(2, {1}, "");
  stopped.ok = false;
  stopped.error = "rank 2: stopped because rank 1 died";
  RankOutcome o2 = outcome(2, stopped);
  o2.exit_code = 1;
  RankOutcome dead;
  dead.rank = 1;
  dead.pid = 101;
  dead.term_signal = 11;
  const auto m =
      merge_rank_results(cfg(3), Arm::registered, {ok0, dead, o2}, 1, "rank 1 of 3 killed");
  EXPECT_FALSE(m.ok);
  EXPECT_EQ(
      m.error.rfind("rank 1 of 3 (pid 101, device cpu:0) failed: killed by signal SIGSEGV", 0), 0u)
      << m.error;
  ASSERT_EQ(m.ranks.size(), 3u);
  EXPECT_TRUE(m.ranks[0].ok);
  EXPECT_FALSE(m.ranks[1].ok);
  EXPECT_FALSE(m.ranks[2].ok);
  // without a culprit from the abort flag: the first rank that failed
  RankOutcome o1 = outcome(1, stopped);
  o1.exit_code = 1;
  const auto m2 = merge_rank_results(cfg(3), Arm::registered, {ok0, o1, o2}, -1, "");
  EXPECT_EQ(m2.error.rfind("rank 1 of 3 (pid 101", 0), 0u) << m2.error;
  const auto m3 = merge_rank_results(cfg(3), Arm::registered, {ok0, o1, o2}, 2, "");
  EXPECT_EQ(m3.error.rfind("rank 2 of 3 (pid 102", 0), 0u) << m3.error;
}

// A rank killed by a signal the launcher did not send is the root cause, even when a peer's
// collective error raised the abort flag first (measured on the H200: rank 0's NCCL all-gather
// failed with "remote process exited" before rank 1's SIGKILL was reaped). The peer says where
// it was waiting.
TEST(RanksMerge, ARankKilledBySignalIsNamedOverThePeerWhoseCollectiveFailed) {
  ArmResult peer = rank_result(0, {1}, "");
  peer.ok = false;
  peer.error = "rank 0: NCCL ncclAllGather failed: remote process exited";
  peer.failed_step = 3;
  peer.failed_phase = "all_gather";
  RankOutcome o0 = outcome(0, peer);
  o0.exit_code = 1;
  RankOutcome dead;
  dead.rank = 1;
  dead.pid = 101;
  dead.term_signal = 9;
  const auto m = merge_rank_results(cfg(2), Arm::registered, {o0, dead}, 0, "");
  EXPECT_EQ(
      m.error.rfind("rank 1 of 2 (pid 101, device cpu:0) failed: killed by signal SIGKILL", 0), 0u)
      << m.error;
  EXPECT_NE(m.error.find("rank 0 was then in step 3 of"), std::string::npos) << m.error;
  EXPECT_EQ(m.failed_step, 3);
  EXPECT_EQ(m.failed_phase, "all_gather");
  // A rank the launcher itself killed (it hung after a failure) is not a root cause.
  dead.killed_by_launcher = true;
  const auto m2 = merge_rank_results(cfg(2), Arm::registered, {o0, dead}, 0, "");
  EXPECT_EQ(m2.error.rfind("rank 0 of 2", 0), 0u) << m2.error;
}

TEST(RanksMerge, CollectiveTimeoutIsHalfTheArmTimeoutAtMost120) {
  RunConfig c = cfg(2);
  EXPECT_EQ(collective_timeout_s(c), 120.0);
  c.timeout_s = 30;
  EXPECT_EQ(collective_timeout_s(c), 15.0);
  c.timeout_s = 1000;
  EXPECT_EQ(collective_timeout_s(c), 120.0);
}

// The N-rank bound: Adam of every rank's shard at the host's bandwidth (the ranks' probes,
// taken at once, summed), the busiest link of any rank, the slowest rank's compute; the ratio
// from the group's steps (the slowest rank's each step).
TEST(RanksMerge, BoundSharesTheHostMemoryAndTakesTheBusiestLink) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> d(0.01, 1.0);
  const RunConfig c = cfg(2);
  std::vector<ArmResult> ranks;
  std::vector<double> walls[2];
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 4; ++i) walls[r].push_back(d(rng));
    ArmResult a = rank_result(r, walls[r], r == 0 ? "aaaa" : "bbbb");
    a.bound.probe_gb_per_s = 10 + 50 * d(rng);
    a.bound.probe_passes = r == 0 ? 9 : 7;
    a.bound.d2h_s = d(rng);
    a.bound.h2d_s = d(rng);
    a.bound.compute_s = d(rng);
    a.bound.adam_measured_s = d(rng);
    a.bound.host_bytes = 1e6 * (30 + 10 * d(rng));
    a.bound.serial_s = 1e-3 * d(rng);
    a.bound.serial_host_bytes = 1e6 * d(rng);
    // rank 0's fastest Adam pass beat its probe, rank 1's did not: neither moves the bound
    a.bound.host_gb_per_s = a.bound.probe_gb_per_s;
    a.bound.adam_pass_gb_per_s = a.bound.probe_gb_per_s * (r == 0 ? 1 + d(rng) : 1 - 0.5 * d(rng));
    ranks.push_back(a);
  }
  const auto m =
      merge_rank_results(c, Arm::registered, {outcome(0, ranks[0]), outcome(1, ranks[1])}, -1, "");
  ASSERT_TRUE(m.ok) << m.error;
  const ShardLayout shards = ShardLayout::build(ModelLayout::build(c.model), 2);
  const double probe = ranks[0].bound.probe_gb_per_s + ranks[1].bound.probe_gb_per_s;
  const double adam = 28.0 * static_cast<double>(2 * shards.total) / (probe * 1e9);
  const double link = std::max(
      {ranks[0].bound.d2h_s, ranks[0].bound.h2d_s, ranks[1].bound.d2h_s, ranks[1].bound.h2d_s});
  const double compute = std::max(ranks[0].bound.compute_s, ranks[1].bound.compute_s);
  EXPECT_DOUBLE_EQ(m.bound.probe_gb_per_s, probe);
  EXPECT_EQ(m.bound.probe_passes, 7);  // the fewest of any rank
  EXPECT_DOUBLE_EQ(m.bound.adam_s, adam);
  EXPECT_DOUBLE_EQ(m.bound.pcie_s, link);
  EXPECT_DOUBLE_EQ(m.bound.compute_s, compute);
  EXPECT_DOUBLE_EQ(m.bound.bound_s, std::max(adam, link) + compute);
  std::vector<double> group;
  for (std::size_t i = 1; i < 4; ++i) group.push_back(std::max(walls[0][i], walls[1][i]));
  std::sort(group.begin(), group.end());
  EXPECT_DOUBLE_EQ(m.bound.ratio, group[1] / m.bound.bound_s);
  // The physical bound: every rank's host bytes through the one host memory, at the ranks'
  // probes summed (never at their Adam passes' or steps' own rates).
  const double host_bytes = ranks[0].bound.host_bytes + ranks[1].bound.host_bytes;
  const double host_rate = probe;
  EXPECT_DOUBLE_EQ(m.bound.adam_pass_gb_per_s,
                   ranks[0].bound.adam_pass_gb_per_s + ranks[1].bound.adam_pass_gb_per_s);
  EXPECT_DOUBLE_EQ(m.bound.host_bytes, host_bytes);
  EXPECT_DOUBLE_EQ(m.bound.host_gb_per_s, host_rate);
  EXPECT_DOUBLE_EQ(m.bound.host_memory_s, host_bytes / (host_rate * 1e9));
  EXPECT_EQ(m.bound.host_rate_from, "ranks");
  // The ranks' serial parts at once: the longest, then every rank's other host bytes.
  const double serial = std::max(ranks[0].bound.serial_s, ranks[1].bound.serial_s);
  const double serial_bytes = ranks[0].bound.serial_host_bytes + ranks[1].bound.serial_host_bytes;
  EXPECT_DOUBLE_EQ(m.bound.serial_s, serial);
  EXPECT_DOUBLE_EQ(m.bound.serial_host_bytes, serial_bytes);
  EXPECT_DOUBLE_EQ(
      m.bound.physical_s,
      std::max({serial + (host_bytes - serial_bytes) / (host_rate * 1e9), link, compute}));
  EXPECT_DOUBLE_EQ(m.bound.physical_ratio, group[1] / m.bound.physical_s);
  EXPECT_DOUBLE_EQ(m.bound.fastest_step_s, group[0]);
  EXPECT_EQ(m.bound.beaten, group[0] < m.bound.physical_s);
  EXPECT_EQ(m.bound.physical_verdict, m.bound.beaten ? "not known" : "holds");
}

}  // namespace
}  // namespace zob
