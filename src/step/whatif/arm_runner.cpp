// One arm's step on one rank of N (arm_runner.hpp): ZeRO-3 CPU-offload training steps
// (docs/anatomy.md §3, docs/multi-gpu.md) on the Device interface.
//
// Queues: compute runs the model and the device casts of the copy-back; d2h casts (N = 1) or
// reduce-scatters (N > 1) each module's bf16 gradients to fp32 and copies them to the pinned
// host shard while backward goes on; h2d carries the copy-back pieces, the parameter fetches
// (offload_param) and the all-gathers (N > 1). Work crosses queues only through events, so a
// synchronous device (the CPU one) and an asynchronous one run the same program.
#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "step/arm_result_fill.hpp"
#include "step/copy_back.hpp"
#include "step/ranks/rank_placement.hpp"
#include "step/schedule_case.hpp"
#include "step/step_internal.hpp"
#include "step/whatif/arm_runner.hpp"
#include "zob/adam.hpp"
#include "zob/clock.hpp"
#include "zob/cpu_affinity.hpp"
#include "zob/errors.hpp"
#include "zob/host_memory.hpp"
#include "zob/model.hpp"
#include "zob/stats.hpp"
#include "zob/step.hpp"
#include "zob/thread_pool.hpp"

namespace zob {
namespace step_detail {

ArmRunner::ArmRunner(const RunConfig& config, Arm arm, Device& dev, AdamOrder order,
                     RankComms comms)
    : cfg_(config),
      arm_(arm),
      order_(order),
      dev_(dev),
      comm_(comms.host != nullptr ? comms.host : &single_),
      data_(comms.data != nullptr ? comms.data : comm_),
      layout_(ModelLayout::build(config.model)),
      shards_(ShardLayout::build(layout_, comm_->size())),
      shard_layout_(shard_layout_of(layout_, shards_)) {}

void ArmRunner::setup() {
  const RunConfig& c = cfg_;
  if (data_->size() != comm_->size() || data_->rank() != comm_->rank()) {
    throw UsageError("the host communicator is rank " + std::to_string(comm_->rank()) + " of " +
                     std::to_string(comm_->size()) + ", the device one rank " +
                     std::to_string(data_->rank()) + " of " + std::to_string(data_->size()));
  }
  sub_groups_ = split_sub_groups(c, shards_.total, &pieces_);
  make_pool();
  allocate_host();
  allocate_device();
  create_events();
  if (order_ == AdamOrder::overlapped) make_overlap_schedule();
  // The initial device parameters take the same path a step takes after Adam: the host bf16
  // copy of the master, and in the copy-back loop its copy to the device.
  cast_f32_to_bf16_host(master_.as<float>(), pbf16_.data(), shards_.total, *pool_);
  if (!offload()) {
    for (const SubGroup& sg : sub_groups_) copy_back(sg);
  }
  dev_.synchronize();
}

// Built before the host buffers: zeroing them faults their pages in from the pool's threads,
// so with a NUMA placement they land on the pool's node. The ranks of one host split its
// CPUs (a collective: every rank gets here).
void ArmRunner::make_pool() { pool_ = make_rank_pool(cfg_, arm_, dev_, *comm_, &placement_); }

// The host state (docs/anatomy.md §3) of this rank's shard: pinned fp32 master and gradients
// (and bf16 parameters), plain Adam states; the master gets its initial values.
void ArmRunner::allocate_host() {
  const HostMemoryMode pinned = pinned_mode_for(arm_);
  const auto S = static_cast<std::size_t>(shards_.total);
  master_ = HostBuffer(S * 4, pinned, &dev_, "fp32 master", pool_.get());
  grads_ = HostBuffer(S * 4, pinned, &dev_, "fp32 gradients", pool_.get());
  exp_avg_ = HostBuffer(S * 4, HostMemoryMode::pageable, &dev_, "Adam exp_avg", pool_.get());
  exp_avg_sq_ = HostBuffer(S * 4, HostMemoryMode::pageable, &dev_, "Adam exp_avg_sq", pool_.get());
  // Both loops: Adam fused with the cast writes the bf16 parameters here (the fetches' source,
  // or the copy-back's).
  pbf16_ = HostBuffer(S * 2, pinned, &dev_, "bf16 parameters", pool_.get());
  probe_.start(master_.as<float>(), grads_.as<float>(), exp_avg_.as<float>(),
               exp_avg_sq_.as<float>(), shards_.total, *pool_, *comm_);
  initial_master();
}

// Rank r makes only its part of each module of the initial array, the padding zero (Adam
// keeps it zero: its gradients are the sum of zero paddings).
void ArmRunner::initial_master() {
  float* master = master_.as<float>();
  if (!sharded()) {
    initial_parameters_range(layout_, cfg_.seed, 0, layout_.total, master, pool_.get());
    return;
  }
  std::fill(master, master + shards_.total, 0.0f);
  const std::int64_t r = comm_->rank();
  for (std::int64_t j = 0; j < modules(); ++j) {
    const std::int64_t lo = std::min(module(j).count, r * own(j).count);
    const std::int64_t hi = std::min(module(j).count, (r + 1) * own(j).count);
    initial_parameters_range(layout_, cfg_.seed, module(j).offset + lo, module(j).offset + hi,
                             master + own(j).offset, pool_.get());
  }
}

void ArmRunner::allocate_device() {
  const DeviceSizes ds = device_sizes(cfg_, layout_, ranks());
  params_ = DeviceBuffer(dev_, ds.params);
  shard_stage_ = DeviceBuffer(dev_, ds.shard_stage);
  for (int k = 0; k < 2; ++k) {
    param_slot_[k] = DeviceBuffer(dev_, ds.param_slot);
    grad_slot_[k] = DeviceBuffer(dev_, ds.grad_slot_bf16);
    grad_f32_[k] = DeviceBuffer(dev_, ds.grad_slot_f32);
  }
  // Data parallel: rank r trains on the micro-batch of token seed seed + r.
  math_ = ModuleMath(dev_, cfg_, layout_, cfg_.seed + static_cast<std::uint64_t>(comm_->rank()));
}

void ArmRunner::create_events() {
  const std::int64_t M = modules();
  origin_ = dev_.create_event();
  task_start_ = make_events(dev_, 2 * M);
  task_end_ = make_events(dev_, 2 * M);
  grad_ready_ = make_events(dev_, M);
  hook_done_ = make_events(dev_, M);
  d2h_start_ = make_events(dev_, M);
  d2h_copy_start_ = make_events(dev_, M);
  d2h_end_ = make_events(dev_, M);
  fetch_of_module_.assign(static_cast<std::size_t>(M), -1);
  if (fetching()) {
    fetch_start_ = make_events(dev_, 2 * M - 1);
    fetch_gather_ = make_events(dev_, 2 * M - 1);
    fetch_end_ = make_events(dev_, 2 * M - 1);
    fetch_module_.assign(static_cast<std::size_t>(2 * M - 1), -1);
  }
  if (!offload()) {
    cb_copy_start_ = make_events(dev_, pieces_);
    cb_copy_end_ = make_events(dev_, pieces_);
  }
}

void ArmRunner::make_overlap_schedule() {
  OverlapBuffers b;
  b.master = master_.as<float>();
  b.grads = grads_.as<float>();
  b.exp_avg = exp_avg_.as<float>();
  b.exp_avg_sq = exp_avg_sq_.as<float>();
  b.host_bf16 = pbf16_.as<bf16>();
  if (!offload()) b.device_params = params_.as<bf16>();
  std::vector<Piece> pieces = make_pieces(shard_layout_, cfg_.sub_group_size, cfg_.chunk_elems);
  landing_parts_ = landing_parts(shard_layout_, pieces);
  part_begin_.clear();
  for (std::int64_t j = modules() - 1; j >= 0; --j) {
    for (const LandingPart& part : landing_parts_[static_cast<std::size_t>(j)]) {
      part_begin_.push_back(part.begin);
    }
  }
  part_end_ = make_events(dev_, static_cast<std::int64_t>(part_begin_.size()));
  const OverlapEvents e{&part_end_, &part_begin_, &cb_copy_start_, &cb_copy_end_, &task_end_};
  overlap_ =
      std::make_unique<OverlapSchedule>(dev_, *pool_, shard_layout_, std::move(pieces), b, e);
}

const bf16* ArmRunner::weights(std::int64_t module) const {
  if (!fetching()) return params_.as<bf16>() + this->module(module).offset;
  return param_slot_[fetch_of(module) % 2].as<bf16>();
}

// The module's shared tensor (a tied head's embedding table): resident at its owner's offset,
// or fetched right after the module's own tensors. nullptr when it has none.
const bf16* ArmRunner::shared_weights(std::int64_t module) const {
  const ModuleSlice& m = this->module(module);
  if (m.shared.empty()) return nullptr;
  if (!fetching()) return params_.as<bf16>() + m.shared.front().offset;
  return weights(module) + padded(module);  // N = 1: the module's count
}

// A module's bf16 parameters into the next slot of the ring, on the h2d queue: its shard from
// the host (offload_param; a tied head's shared table after it, ZeRO-3's re-fetch), then the
// all-gather of every rank's shard (N > 1), the shared table's gathered after the module's.
// The slot is overwritten only after the compute that last read it has finished.
void ArmRunner::issue_fetch(std::int64_t module, StepSample& s) {
  PhaseScope in(phase_, Phase::param_fetch);
  const auto t0 = Clock::now();
  const std::int64_t f = fetches_++;
  const int slot = static_cast<int>(f % 2);
  const ModuleSlice& part = own(module);
  bf16* dst = param_slot_[slot].as<bf16>();
  if (slot_released_[slot] != nullptr) dev_.queue_wait(Queue::h2d, *slot_released_[slot]);
  dev_.record(fetch_start_[f], Queue::h2d);
  const bf16* shard = params_.as<bf16>() + part.offset;  // copy_back: resident
  if (offload()) {
    bf16* landing = sharded() ? shard_stage_.as<bf16>() : dst;
    dev_.copy_to_device(Queue::h2d, landing, pbf16_.as<bf16>() + part.offset,
                        static_cast<std::size_t>(part.count) * 2);
    std::int64_t at = part.count;  // shared tensors again, after the module's own
    for (const TensorSlice& t : this->module(module).shared) {
      // With N ranks the owner's shard (a tied head's: the embedding's), else the tensor.
      const ModuleSlice& src = sharded() ? own(shared_owner_module(layout_, t)) : ModuleSlice{};
      const std::int64_t n = sharded() ? src.count : t.count();
      dev_.copy_to_device(Queue::h2d, landing + at,
                          pbf16_.as<bf16>() + (sharded() ? src.offset : t.offset),
                          static_cast<std::size_t>(n) * 2);
      at += n;
    }
    shard = landing;
  }
  dev_.record(fetch_gather_[f], Queue::h2d);
  if (sharded()) gather_module(module, shard, dst);
  dev_.record(fetch_end_[f], Queue::h2d);
  fetch_of_module_[static_cast<std::size_t>(module)] = f;  // the one write: see fetch_of
  fetch_module_[static_cast<std::size_t>(f)] = module;
  fetch_host_s_ += seconds_since(t0);
  s.spans.push_back({"h2d", "fetch:" + this->module(module).name, 0, 0});  // times: report
}

// The all-gathers of a fetch: the module's shards into the slot, then each shared tensor's
// owner's shards right after it (shard: this rank's, staged or resident, in the same order).
void ArmRunner::gather_module(std::int64_t module, const bf16* shard, bf16* dst) {
  PhaseScope in(phase_, Phase::all_gather);
  data_->enqueue_all_gather(dev_, Queue::h2d, shard, dst,
                            static_cast<std::size_t>(own(module).count) * 2);
  const bf16* next = shard + own(module).count;
  bf16* out = dst + padded(module);
  for (const TensorSlice& t : this->module(module).shared) {
    const std::int64_t owner = shared_owner_module(layout_, t);
    if (!offload()) next = params_.as<bf16>() + own(owner).offset;  // resident shard
    data_->enqueue_all_gather(dev_, Queue::h2d, next, out,
                              static_cast<std::size_t>(own(owner).count) * 2);
    next += own(owner).count;
    out += padded(owner);
  }
}

// Module j's weight gradients are complete: their fp32 form (a cast, or with N > 1 this
// rank's shard of the rank sum) and its copy to the host go out on the d2h queue while
// compute carries on with the rest of backward.
void ArmRunner::offload_grads(std::int64_t j, bf16* g, float* g32) {
  PhaseScope in(phase_, Phase::grad_offload);
  const ModuleSlice& part = own(j);
  dev_.record(grad_ready_[j], Queue::compute);
  dev_.queue_wait(Queue::d2h, grad_ready_[j]);
  dev_.record(d2h_start_[j], Queue::d2h);
  if (sharded()) {
    PhaseScope scatter(phase_, Phase::reduce_scatter);
    data_->enqueue_reduce_scatter(dev_, Queue::d2h, g, ElemType::bf16, g32,
                                  static_cast<std::size_t>(part.count));
  } else {
    dev_.cast_bf16_to_f32(g, g32, part.count, Queue::d2h);
  }
  dev_.record(d2h_copy_start_[j], Queue::d2h);
  if (landing_parts_.empty()) {
    dev_.copy_to_host(Queue::d2h, grads_.as<float>() + part.offset, g32,
                      static_cast<std::size_t>(part.count) * 4);
  } else {  // overlap: cut where the pieces begin, each part's end an event Adam can wait on
    for (const LandingPart& lp : landing_parts_[static_cast<std::size_t>(j)]) {
      dev_.copy_to_host(Queue::d2h, grads_.as<float>() + lp.begin, g32 + (lp.begin - part.offset),
                        static_cast<std::size_t>(lp.len) * 4);
      dev_.record(part_end_[parts_landed_++], Queue::d2h);
    }
  }
  dev_.record(d2h_end_[j], Queue::d2h);
  // Compute resumes here: with unregistered memory the host was blocked in the copy above,
  // and that gap is not compute (the bound's compute_s leaves it out).
  dev_.record(hook_done_[j], Queue::compute);
}

// The bf16 parameters Adam + cast wrote, in pieces of chunk_elems straight into the device's
// parameters (no fp32 temporary, no device cast); the host waits once, for the last piece.
void ArmRunner::copy_back(const SubGroup& sg) {
  std::int64_t piece = sg.first_piece;
  for (std::int64_t off = sg.begin; off < sg.end; off += cfg_.chunk_elems, ++piece) {
    enqueue_bf16_copy_back_piece(dev_, pbf16_.as<bf16>(), params_.as<bf16>(), off,
                                 std::min(cfg_.chunk_elems, sg.end - off), piece, cb_copy_start_,
                                 cb_copy_end_);
  }
  if (piece > sg.first_piece) dev_.event_synchronize(cb_copy_end_[piece - 1]);
}

StepSample ArmRunner::run_step(int t) {
  StepSample s;
  slot_released_[0] = slot_released_[1] = nullptr;
  grad_slot_free_[0] = grad_slot_free_[1] = nullptr;
  fetches_ = 0;
  parts_landed_ = 0;
  grad_slots_used_ = 0;
  fetch_host_s_ = 0;
  if (sharded()) comm_->barrier();  // the ranks start together: the slowest sets the time
  const auto t0 = Clock::now();
  dev_.record(*origin_, Queue::compute);
  StepTimes times;
  times.forward = forward(s);
  times.backward = backward(s);
  if (overlap_) {
    optimizer_overlap(t, t0, s, times);
  } else {
    optimizer_stock(t, t0, s, times);
  }
  dev_.synchronize();
  s.loss = group_loss(*comm_, loss_host_);
  s.wall_s = seconds_since(t0);
  link_ = {};
  report_compute(s, times);
  if (fetching()) report_fetches(s);
  // Under --offload-param the host cast is part of the adam_cast phase (report_compute).
  if (!offload()) report_copy_back(s, times);
  return s;
}

// Forward, module by module; a fetched module is waited for and the next one prefetched.
// Returns the host time.
double ArmRunner::forward(StepSample& s) {
  phase_ = Phase::forward;
  const std::int64_t M = modules();
  const auto tf = Clock::now();
  if (fetching()) issue_fetch(0, s);
  for (std::int64_t j = 0; j < M; ++j) {
    if (fetching()) {
      if (j + 1 < M) issue_fetch(j + 1, s);
      dev_.queue_wait(Queue::compute, fetch_end_[fetch_of(j)]);
    }
    dev_.record(task_start_[j], Queue::compute);
    math_.forward(j, weights(j), shared_weights(j));
    dev_.record(task_end_[j], Queue::compute);
    if (fetching()) slot_released_[fetch_of(j) % 2] = &task_end_[j];
  }
  return seconds_since(tf);
}

// Backward, head first; each module's gradients stream out (offload_grads) while the rest
// of backward runs, through two gradient slots. Returns the host time.
double ArmRunner::backward(StepSample& s) {
  phase_ = Phase::backward;
  const std::int64_t M = modules();
  const auto tb = Clock::now();
  for (std::int64_t j = M - 1; j >= 0; --j) {
    const std::int64_t task = M + j;
    if (fetching()) {
      // The head is still in its slot from forward; every other module is fetched again.
      if (j - 1 >= 0) issue_fetch(j - 1, s);
      if (j != M - 1) dev_.queue_wait(Queue::compute, fetch_end_[fetch_of(j)]);
    }
    const int gslot = static_cast<int>(grad_slots_used_++ % 2);
    if (grad_slot_free_[gslot] != nullptr) dev_.queue_wait(Queue::compute, *grad_slot_free_[gslot]);
    dev_.record(task_start_[task], Queue::compute);
    bf16* g = grad_slot_[gslot].as<bf16>();
    float* g32 = grad_f32_[gslot].as<float>();
    if (padded(j) > module(j).count) {  // the reduce-scatter sums the padding too
      dev_.fill_zero(Queue::compute, g + module(j).count,
                     static_cast<std::size_t>(padded(j) - module(j).count) * 2);
    }
    math_.backward(
        j, weights(j), g, [&] { offload_grads(j, g, g32); }, shared_weights(j));
    dev_.record(task_end_[task], Queue::compute);
    grad_slot_free_[gslot] = &d2h_end_[j];
    if (fetching()) slot_released_[fetch_of(j) % 2] = &task_end_[task];
  }
  return seconds_since(tb);
}

// --schedule overlap: Adam per piece as its gradients land, overlapped with the copy-back.
void ArmRunner::optimizer_overlap(int t, Clock::time_point t0, StepSample& s, StepTimes& times) {
  phase_ = Phase::adam_cast;  // fused with the cast, with the copy-back of the pieces done
  const OverlapTimes o = overlap_->run(t, t0, s);
  times.grad_wait = o.grad_wait_s;
  times.adam = o.adam_s;
  times.copy_back = o.copy_back_s;
  // Read the loss only now: a copy into pageable memory may block the host until the
  // compute queue reaches it, which must not hold up the first piece's Adam.
  dev_.copy_to_host(Queue::compute, &loss_host_, math_.loss(), sizeof(float));
}

// --schedule stock: wait for every gradient, then per sub-group CPU Adam fused with the cast to
// bf16 and, in the copy-back loop, that sub-group's copy back to the device.
void ArmRunner::optimizer_stock(int t, Clock::time_point t0, StepSample& s, StepTimes& times) {
  phase_ = Phase::grad_offload;  // the host waits for the last gradients
  const auto tw = Clock::now();
  // The loss, long computed by now, is read with the wait.
  dev_.copy_to_host(Queue::compute, &loss_host_, math_.loss(), sizeof(float));
  dev_.synchronize();  // Adam must see every module's gradients
  times.grad_wait = seconds_since(tw);
  const AdamHyper hyper;
  for (std::size_t gi = 0; gi < sub_groups_.size(); ++gi) {
    const SubGroup& sg = sub_groups_[gi];
    const std::int64_t len = sg.end - sg.begin;
    const std::string tag = fmt::format("[{}]", gi);
    phase_ = Phase::adam_cast;
    const auto ta = Clock::now();
    // Adam fused with the cast into the pinned bf16 parameters: one pass, no separate cast.
    adam_step_cast(master_.as<float>() + sg.begin, grads_.as<float>() + sg.begin,
                   exp_avg_.as<float>() + sg.begin, exp_avg_sq_.as<float>() + sg.begin,
                   pbf16_.as<bf16>() + sg.begin, len, t, hyper, *pool_);
    const double a = seconds_since(ta);
    times.adam += a;
    s.spans.push_back({"cpu_adam", to_string(Phase::adam_cast) + tag, seconds_between(t0, ta), a});
    if (!offload()) {
      phase_ = Phase::copy_back;
      const auto tc = Clock::now();
      copy_back(sg);
      times.copy_back += seconds_since(tc);
    }
  }
}

}  // namespace step_detail
}  // namespace zob
