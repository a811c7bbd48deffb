// ZeRO-3 over several ranks (docs/anatomy.md §3.4): the copy_back loop of
// step.cpp with each module's parameters all-gathered before use and its gradients
// reduce-scattered after its backward. The model math (kernels, their order, the casts) is
// run_arm's (module_math.hpp), so one rank reproduces run_arm bit for bit; the collectives
// add the rank sum.
//
// Two communicators: `comm_` (host memory: the step barrier, the loss, failures) and `data_`
// (the device's memory: parameter all-gathers and gradient reduce-scatters; NCCL on CUDA, the
// same shared-memory one on the CPU device). Every collective returns complete, so the host
// waits for the device before each one; on the CPU device that wait is free.
#include "step/partitioned_step.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fmt/format.h>
#include <memory>
#include <utility>

#include "step/arm_result_fill.hpp"
#include "step/device_buffer.hpp"
#include "step/module_math.hpp"
#include "step/rank_placement.hpp"
#include "step/step_internal.hpp"
#include "zob/clock.hpp"
#include "zob/adam.hpp"
#include "zob/errors.hpp"
#include "zob/host_memory.hpp"
#include "zob/step.hpp"
#include "zob/thread_pool.hpp"

namespace zob {

ShardLayout ShardLayout::build(const ModelLayout& layout, int ranks) {
  ShardLayout s;
  s.ranks = ranks;
  for (const ModuleSlice& m : layout.modules) {
    const std::int64_t per = (m.count + ranks - 1) / ranks;
    s.shard.push_back(per);
    s.offset.push_back(s.total);
    s.total += per;
  }
  return s;
}

namespace {

using Buffer = step_detail::DeviceBuffer;

class RankRunner {
 public:
  RankRunner(const RunConfig& c, Arm arm, Device& dev, Collectives& comm, Collectives& data)
      : cfg_(c), arm_(arm), dev_(dev), comm_(comm), data_(data),
        layout_(ModelLayout::build(c.model)),
        shards_(ShardLayout::build(layout_, comm.size())) {}
  ~RankRunner() {
    try {
      dev_.synchronize();
    } catch (...) {  // the error that brought us here is the one worth reporting
    }
  }
  RankRunner(const RankRunner&) = delete;
  RankRunner& operator=(const RankRunner&) = delete;

  void setup();
  StepSample run_step(int t);
  const float* master() const { return master_.as<float>(); }
  std::int64_t shard_total() const { return shards_.total; }
  int threads() const { return pool_->size(); }
  const ThreadPlacement& placement() const { return placement_; }
  const HostBuffer& master_buffer() const { return master_; }
  double register_seconds() const {
    return master_.register_seconds() + grads_.register_seconds();
  }

 private:
  std::int64_t modules() const { return static_cast<std::int64_t>(layout_.modules.size()); }
  std::int64_t padded(std::int64_t j) const {
    return shards_.shard[static_cast<std::size_t>(j)] * comm_.size();
  }
  // Host seconds of the step's phases.
  struct RankTimes {
    double gather = 0, reduce_scatter = 0, grad_offload = 0, forward = 0, backward = 0;
    double adam = 0, copy_back = 0;
    std::uint64_t gathered_elems = 0;
  };
  void allocate_host();
  void allocate_device();
  float forward(RankTimes& times);
  void backward(RankTimes& times);
  float group_loss(float local_loss);
  void optimizer(int t, Clock::time_point t0, StepSample& s, RankTimes& times);
  void report(StepSample& s, const RankTimes& times) const;
  const bf16* gather(std::int64_t j, double& gather_s);
  void backward_module(std::int64_t j, const bf16* w, bf16* g);
  void copy_back(std::int64_t begin, std::int64_t end);

  const RunConfig& cfg_;
  Arm arm_;
  Device& dev_;
  Collectives& comm_;  // host memory
  Collectives& data_;  // device memory
  ModelLayout layout_;
  ShardLayout shards_;
  std::int64_t biggest_padded_ = 0;
  std::unique_ptr<ThreadPool> pool_;
  ThreadPlacement placement_;
  HostBuffer master_, grads_, exp_avg_, exp_avg_sq_;
  Buffer param_shard_, copy_temp_, gathered_[2], grad_full_, grad_shard_;
  step_detail::ModuleMath math_;  // activations, token ids and the module kernels
  int next_slot_ = 0;
};

void RankRunner::setup() {
  const RunConfig& c = cfg_;
  step_detail::check_step_config(c, "run_partitioned_arm");
  if (c.loop != Loop::copy_back) {
    throw UsageError("--gpus > 1 runs the default copy-back loop only; --offload-param with "
                     "several ranks is not implemented yet (use --gpus 1)");
  }
  if (data_.size() != comm_.size() || data_.rank() != comm_.rank()) {
    throw UsageError(fmt::format("run_partitioned_arm: the host communicator is rank {} of {}, "
                                 "the device one rank {} of {}", comm_.rank(), comm_.size(),
                                 data_.rank(), data_.size()));
  }
  for (std::int64_t m = 0; m < modules(); ++m) biggest_padded_ = std::max(biggest_padded_, padded(m));
  // The ranks of this host split its CPUs (a collective: every rank gets here). Built before
  // the host buffers, whose pages the pool's threads then first-touch on the slice's node.
  const RankAdamPlacement adam = place_rank_adam_threads(c, arm_, dev_.info(), comm_);
  placement_ = adam.placement;
  pool_ = std::make_unique<ThreadPool>(adam.threads, placement_.cpus);
  allocate_host();
  allocate_device();
  copy_back(0, shards_.total);  // the initial bf16 shard: the same path a step takes after Adam
  dev_.synchronize();
}

// The host state: this rank's shards only, the master's with its initial values.
void RankRunner::allocate_host() {
  const auto S4 = static_cast<std::size_t>(shards_.total) * 4;
  const HostMemoryMode pinned = pinned_mode_for(arm_);
  // First-touched (zeroed) by the pool, as in step.cpp; runtime-allocated memory (hostalloc)
  // is not, and is zeroed below: the master's padding must be zero.
  master_ = HostBuffer(S4, pinned, &dev_, "fp32 master shard", pool_.get());
  grads_ = HostBuffer(S4, pinned, &dev_, "fp32 gradient shard", pool_.get());
  exp_avg_ = HostBuffer(S4, HostMemoryMode::pageable, &dev_, "Adam exp_avg shard", pool_.get());
  exp_avg_sq_ = HostBuffer(S4, HostMemoryMode::pageable, &dev_, "Adam exp_avg_sq shard",
                           pool_.get());
  for (HostBuffer* b : {&master_, &grads_, &exp_avg_, &exp_avg_sq_}) {
    if (b->mode() != HostMemoryMode::device_host) continue;
    char* p = b->as<char>();
    pool_->parallel_for(static_cast<std::int64_t>(S4), [p](std::int64_t lo, std::int64_t hi) {
      std::memset(p + lo, 0, static_cast<std::size_t>(hi - lo));
    }, 4096);
  }
  // initial_parameters produces the whole array; keep this rank's part of each module.
  std::vector<float> full(static_cast<std::size_t>(layout_.total));
  initial_parameters(layout_, cfg_.seed, full.data());
  const std::int64_t r = comm_.rank();
  for (std::size_t m = 0; m < layout_.modules.size(); ++m) {
    const ModuleSlice& mod = layout_.modules[m];
    const std::int64_t lo = std::min(mod.count, r * shards_.shard[m]);
    const std::int64_t hi = std::min(mod.count, (r + 1) * shards_.shard[m]);
    std::copy(full.begin() + mod.offset + lo, full.begin() + mod.offset + hi,
              master_.as<float>() + shards_.offset[m]);
  }
}

void RankRunner::allocate_device() {
  const auto S = static_cast<std::uint64_t>(shards_.total);
  const auto biggest = static_cast<std::uint64_t>(biggest_padded_);
  param_shard_ = Buffer(dev_, S * 2);
  copy_temp_ = Buffer(dev_, 4 * std::min(static_cast<std::uint64_t>(cfg_.chunk_elems), S));
  for (auto& g : gathered_) g = Buffer(dev_, 2 * biggest);
  grad_full_ = Buffer(dev_, 2 * biggest);
  grad_shard_ = Buffer(dev_, 4 * (biggest / static_cast<std::uint64_t>(comm_.size())));
  // Data parallel: rank r's micro-batch.
  math_ = step_detail::ModuleMath(dev_, cfg_, layout_,
                                  cfg_.seed + static_cast<std::uint64_t>(comm_.rank()));
}

// Module j's full bf16 parameters (padded) in the next gather slot.
const bf16* RankRunner::gather(std::int64_t j, double& gather_s) {
  const auto t0 = Clock::now();
  const auto ju = static_cast<std::size_t>(j);
  bf16* slot = gathered_[next_slot_].as<bf16>();
  next_slot_ ^= 1;
  dev_.synchronize();  // the shard is final and nobody still reads the slot
  data_.all_gather(param_shard_.as<bf16>() + shards_.offset[ju], slot,
                   static_cast<std::size_t>(shards_.shard[ju]) * 2);
  gather_s += seconds_since(t0);
  return slot;
}

// ModuleMath::backward with the padding of g zeroed: g is complete on return.
void RankRunner::backward_module(std::int64_t j, const bf16* w, bf16* g) {
  const auto ju = static_cast<std::size_t>(j);
  const std::int64_t count = layout_.modules[ju].count;
  if (padded(j) > count) {
    dev_.fill_zero(Queue::compute, g + count, static_cast<std::size_t>(padded(j) - count) * 2);
  }
  math_.backward(j, w, g, nullptr);
}

// [begin, end) of the shard array: fp32 master -> device bf16 shard in chunk_elems pieces.
void RankRunner::copy_back(std::int64_t begin, std::int64_t end) {
  for (std::int64_t off = begin; off < end; off += cfg_.chunk_elems) {
    const std::int64_t len = std::min(cfg_.chunk_elems, end - off);
    dev_.copy_to_device(Queue::h2d, copy_temp_.as<void>(), master_.as<float>() + off,
                        static_cast<std::size_t>(len) * 4);
    dev_.synchronize();
    dev_.cast_f32_to_bf16(copy_temp_.as<float>(), param_shard_.as<bf16>() + off, len,
                          Queue::compute);
    dev_.synchronize();
  }
}

StepSample RankRunner::run_step(int t) {
  StepSample s;
  comm_.barrier();  // every rank starts the step together: the slowest one sets its time
  const auto t0 = Clock::now();
  RankTimes times;
  const float local_loss = forward(times);
  backward(times);
  const float loss = group_loss(local_loss);
  optimizer(t, t0, s, times);
  dev_.synchronize();
  s.wall_s = seconds_since(t0);
  s.loss = loss;
  report(s, times);
  return s;
}

// Forward over the gathered modules; returns this rank's loss.
float RankRunner::forward(RankTimes& times) {
  for (std::int64_t j = 0; j < modules(); ++j) {
    const bf16* w = gather(j, times.gather);
    times.gathered_elems += static_cast<std::uint64_t>(padded(j));
    const auto tf = Clock::now();
    math_.forward(j, w);
    dev_.synchronize();
    times.forward += seconds_since(tf);
  }
  float local_loss = 0;
  dev_.copy_to_host(Queue::compute, &local_loss, math_.loss(), sizeof(float));
  dev_.synchronize();
  return local_loss;
}

// Backward, head first: each module's gradients are reduce-scattered and this rank's slice
// offloaded to its fp32 gradient shard.
void RankRunner::backward(RankTimes& times) {
  for (std::int64_t j = modules() - 1; j >= 0; --j) {
    const auto ju = static_cast<std::size_t>(j);
    const bf16* w = gather(j, times.gather);
    times.gathered_elems += static_cast<std::uint64_t>(padded(j));
    const auto tb = Clock::now();
    backward_module(j, w, grad_full_.as<bf16>());
    dev_.synchronize();
    times.backward += seconds_since(tb);
    const auto tr = Clock::now();
    data_.reduce_scatter(grad_full_.as<bf16>(), ElemType::bf16, grad_shard_.as<float>(),
                         static_cast<std::size_t>(shards_.shard[ju]));
    times.reduce_scatter += seconds_since(tr);
    const auto to = Clock::now();
    dev_.copy_to_host(Queue::d2h, grads_.as<float>() + shards_.offset[ju], grad_shard_.as<void>(),
                      static_cast<std::size_t>(shards_.shard[ju]) * 4);
    dev_.synchronize();
    times.grad_offload += seconds_since(to);
  }
}

// The loss of the step: the sum over ranks, in rank order.
float RankRunner::group_loss(float local_loss) {
  std::vector<float> losses(static_cast<std::size_t>(comm_.size()));
  comm_.all_gather(&local_loss, losses.data(), sizeof(float));
  float loss = losses[0];
  for (std::size_t r = 1; r < losses.size(); ++r) loss += losses[r];
  return loss;
}

// Per sub-group of the shard: CPU Adam, then its copy-back.
void RankRunner::optimizer(int t, Clock::time_point t0, StepSample& s, RankTimes& times) {
  const AdamHyper hyper;
  const std::int64_t S = shards_.total;
  for (std::int64_t b = 0; b < S; b += cfg_.sub_group_size) {
    const std::int64_t e = std::min(S, b + cfg_.sub_group_size);
    const auto ta = Clock::now();
    adam_step(master_.as<float>() + b, grads_.as<float>() + b, exp_avg_.as<float>() + b,
              exp_avg_sq_.as<float>() + b, e - b, t, hyper, *pool_);
    times.adam += seconds_since(ta);
    s.spans.push_back({"cpu_adam", fmt::format("adam[{}]", b / cfg_.sub_group_size),
                       seconds_between(t0, ta), seconds_since(ta)});
    const auto tc = Clock::now();
    copy_back(b, e);
    times.copy_back += seconds_since(tc);
  }
}

// Host times: every phase here ends in a host wait, so host time is the phase's time.
void RankRunner::report(StepSample& s, const RankTimes& times) const {
  const std::int64_t S = shards_.total;
  const auto Su = static_cast<std::uint64_t>(S);
  const auto N = static_cast<std::uint64_t>(comm_.size());
  const std::int64_t P = layout_.total;
  const std::uint64_t gathered = times.gathered_elems;
  s.set_phase(Phase::forward, times.forward, -1, 0, P);
  s.set_phase(Phase::backward, times.backward, -1, 0, P);
  s.set_phase(Phase::all_gather, times.gather, -1, 2 * gathered * (N - 1) / N,
              static_cast<std::int64_t>(gathered));
  s.set_phase(Phase::reduce_scatter, times.reduce_scatter, -1, 2 * Su * (N - 1), S);
  s.set_phase(Phase::grad_offload, times.grad_offload, -1, 4 * Su, S);
  s.set_phase(Phase::adam, times.adam, -1, 28 * Su, S);
  s.set_phase(Phase::copy_back, times.copy_back, -1, 4 * Su, S);
}

// Host first: the peers learn of the failure there; then the device communicator, whose
// kernels might otherwise wait on this rank forever (NCCL).
void abort_both(Collectives& comm, Collectives& data, const std::string& reason) {
  comm.abort(reason);
  if (&data != &comm) data.abort(reason);
}

// A collective already failed (the host communicator knows): stop the device communicator's
// kernels too, which may be waiting on the failed peer (NCCL).
void abort_device_comm(Collectives& comm, Collectives& data, const std::string& reason) {
  if (&data != &comm) data.abort(reason);
}

}  // namespace

ArmResult run_partitioned_arm(const RunConfig& config, Arm arm, Device& device,
                              Collectives& comm, std::vector<float>* final_shard) {
  return run_partitioned_arm(config, arm, device, comm, comm, final_shard);
}

ArmResult run_partitioned_arm(const RunConfig& config, Arm arm, Device& device,
                              Collectives& comm, Collectives& data,
                              std::vector<float>* final_shard) {
  const auto t_setup = Clock::now();
  const HostMemoryCounters before = host_memory_counters();
  RankRunner runner(config, arm, device, comm, data);
  try {
    runner.setup();
  } catch (const CollectiveError& e) {
    abort_device_comm(comm, data, e.what());
    throw;
  } catch (const std::exception& e) {
    abort_both(comm, data, fmt::format("rank {} failed in setup: {}", comm.rank(), e.what()));
    throw;
  }
  const HostMemoryCounters after = host_memory_counters();

  ArmResult r = step_detail::arm_result_after_setup(
      config, arm, device,
      {.started = t_setup, .before = before, .after = after,
       .adam_threads = runner.threads(),
       .register_s = runner.register_seconds(), .master = &runner.master_buffer()});
  r.placement = runner.placement();
  r.gpus = comm.size();

  step_detail::run_timed_steps(
      r, config, fmt::format("{} rank {}/{}", to_string(arm), comm.rank(), comm.size()),
      [&](int t) {
        try {
          return runner.run_step(t);
        } catch (const CollectiveError& e) {
          abort_device_comm(comm, data, e.what());
          throw;
        } catch (const std::exception& e) {
          abort_both(comm, data,
                     fmt::format("rank {} failed in step {}: {}", comm.rank(), t, e.what()));
          throw;
        }
      });
  step_detail::finish_arm_result(r, device, runner.master(), runner.shard_total());
  if (final_shard != nullptr) {
    final_shard->assign(runner.master(), runner.master() + runner.shard_total());
  }
  return r;
}

}  // namespace zob
