// What every arm runner shares (arm_harness.hpp): the step's size checks, the sub-groups,
// the bound's memory probe, the Adam thread pools and the ranks' loss.
#include "step/arm_harness.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "step/ranks/rank_placement.hpp"
#include "zob/adam.hpp"
#include "zob/cpu_affinity.hpp"
#include "zob/errors.hpp"
#include "zob/stats.hpp"

namespace zob::step_detail {

void check_step_config(const RunConfig& c, const char* who) {
  if (c.batch <= 0 || c.seq <= 0 || c.chunk_elems <= 0 || c.sub_group_size <= 0 || c.steps < 0 ||
      c.warmup < 0) {
    throw UsageError(std::string(who) +
                     ": batch, seq, chunk_elems and sub_group_size must be "
                     "> 0 and steps, warmup >= 0");
  }
}

std::vector<SubGroup> split_sub_groups(const RunConfig& c, std::int64_t params,
                                       std::int64_t* pieces) {
  check_step_config(c, "run_arm");
  std::vector<SubGroup> groups;
  *pieces = 0;
  for (std::int64_t b = 0; b < params; b += c.sub_group_size) {
    SubGroup sg{b, std::min(params, b + c.sub_group_size), *pieces};
    *pieces += (sg.end - sg.begin + c.chunk_elems - 1) / c.chunk_elems;
    groups.push_back(sg);
  }
  return groups;
}

void ArmMemoryProbe::start(float* master, const float* grads, float* exp_avg, float* exp_avg_sq,
                           std::int64_t params, ThreadPool& pool, Collectives& comm) {
  p_ = master;
  g_ = grads;
  m_ = exp_avg;
  v_ = exp_avg_sq;
  // 2^28 elements stream 4.3 GB per pass: many times a server's L3. At 2^26 (1.07 GB, until
  // 2026-12-02) the H200 host's 300 MB L3 kept part of it: 152.5 GB/s median against 133.2 over
  // the full arrays in the same process (results/h200/2026-12-02-host-memory), a bound the
  // step's streams can never reach.
  n_ = std::min<std::int64_t>(params, std::int64_t{1} << 28);
  params_ = params;
  pool_ = &pool;
  comm_ = &comm;
  pass_s_.clear();
  if (comm.size() > 1) comm.barrier();
  if (n_ == 0) return;  // no CPU Adam (offload_optimizer.ratio 0): nothing to probe
  memory_probe_pass_s(p_, g_, m_, v_, n_, pool);  // warm-up: pages, caches, thread wake-up
  for (int i = 0; i < 5; ++i) pass_s_.push_back(memory_probe_pass_s(p_, g_, m_, v_, n_, pool));
}

void ArmMemoryProbe::pass() {
  if (pool_ == nullptr) throw std::logic_error("ArmMemoryProbe::pass before start");
  if (comm_->size() > 1) comm_->barrier();
  if (n_ == 0) return;
  pass_s_.push_back(memory_probe_pass_s(p_, g_, m_, v_, n_, *pool_));
}

double ArmMemoryProbe::gb_per_s() const {
  return pass_s_.empty() || n_ == 0 ? 0 : static_cast<double>(n_) * 28.0 / median(pass_s_) / 1e9;
}

std::unique_ptr<ThreadPool> make_rank_pool(const RunConfig& c, Arm arm, const Device& dev,
                                           Collectives& comm, ThreadPlacement* placement) {
  if (comm.size() == 1) return make_arm_pool(c, arm, dev, placement);
  const RankAdamPlacement adam = place_rank_adam_threads(c, arm, dev.info(), comm);
  *placement = adam.placement;
  return std::make_unique<ThreadPool>(adam.threads, placement->cpus);
}

float group_loss(Collectives& comm, float local_loss) {
  if (comm.size() == 1) return local_loss;
  std::vector<float> losses(static_cast<std::size_t>(comm.size()));
  comm.all_gather(&local_loss, losses.data(), sizeof(float));
  float loss = losses[0];
  for (std::size_t r = 1; r < losses.size(); ++r) loss += losses[r];
  return loss;
}

std::unique_ptr<ThreadPool> make_arm_pool(const RunConfig& c, Arm arm, const Device& dev,
                                          ThreadPlacement* placement) {
  const int threads = c.threads > 0 ? c.threads : available_cpus();
  std::string notice;
  *placement = choose_placement(c.cpu_affinity, threads, dev.info(), allowed_cpu_list(), &notice);
  if (!notice.empty()) std::fprintf(stderr, "[%s] notice: %s\n", to_string(arm), notice.c_str());
  std::fprintf(stderr, "[%s] Adam threads: %d, placement %s%s%s\n", to_string(arm), threads,
               placement->policy.c_str(), placement->cpus.empty() ? "" : ", CPUs ",
               format_cpu_list(placement->cpus).c_str());
  return std::make_unique<ThreadPool>(threads, placement->cpus);
}

}  // namespace zob::step_detail
