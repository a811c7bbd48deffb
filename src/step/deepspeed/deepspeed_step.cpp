// --schedule deepspeed: one arm's steps as DeepSpeed 0.19.8's ZeRO-3 CPU offload runs them
// (deepspeed_plan.hpp says what is reproduced, docs/schedules.md what is not), replayed on the
// Device interface with DeepSpeed's queues and host waits:
//   compute  - PyTorch's current stream: the model, the norm's device reads, and (offload_param)
//              the blocking gathers of the persistent tensors after the step;
//   h2d      - the parameter coordinator's all-gather stream: one copy per fetched tensor;
//   d2h      - the reduce-and-partition stream: each flushed gradient's D2H bf16, H2D bf16,
//              two fp32 casts and D2H fp32.
// The arithmetic is the stock schedule's (same kernels in the same order per module, the same
// Adam and casts; the gradient scaling multiplies by 1.0), so the losses and the final master
// are bitwise the stock schedule's.
#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <deque>
#include <string>
#include <vector>

#include "step/arm_harness.hpp"
#include "step/decoder/eager_decoder.hpp"
#include "step/decoder/module_math.hpp"
#include "step/deepspeed/deepspeed_plan.hpp"
#include "step/deepspeed/deepspeed_runner.hpp"
#include "step/device_adam.hpp"
#include "step/device_buffer.hpp"
#include "step/step_internal.hpp"
#include "zob/adam.hpp"
#include "zob/clock.hpp"
#include "zob/errors.hpp"
#include "zob/host_memory.hpp"
#include "zob/model.hpp"
#include "zob/thread_pool.hpp"

namespace zob::step_detail {

DeepSpeedRunner::DeepSpeedRunner(const RunConfig& config, Arm arm, Device& dev,
                                 const DeepSpeedKnobs& knobs, RankComms comms)
    : cfg_(config),
      arm_(arm),
      dev_(dev),
      mem_(dev, config.device_memory_bytes),
      comm_(comms.host != nullptr ? comms.host : &single_),
      data_(comms.data != nullptr ? comms.data : comm_),
      layout_(ModelLayout::build(config.model)),
      plan_(build_deepspeed_plan(layout_, config.loop, knobs)),
      knobs_(knobs),
      parts_(DsPartitions::build(plan_, comm_->size(), comm_->rank())),
      residency_(plan_, static_cast<std::int64_t>(layout_.modules.size())) {}

void DeepSpeedRunner::setup() {
  if (data_->size() != comm_->size() || data_->rank() != comm_->rank()) {
    throw UsageError(
        fmt::format("the host communicator is rank {} of {}, the device one rank {} of {}",
                    comm_->rank(), comm_->size(), data_->rank(), data_->size()));
  }
  groups_ = ds_sub_groups(plan_, parts_, cfg_);
  make_pool();
  allocate_host();
  allocate_device();
  allocate_device_optimizer();
  grads_of_module_.assign(static_cast<std::size_t>(modules()), {});
  flush_of_module_.assign(static_cast<std::size_t>(modules()), {});
  for (const DsVisit& v : plan_.visits) {
    auto& g = grads_of_module_[static_cast<std::size_t>(v.module)];
    auto& f = flush_of_module_[static_cast<std::size_t>(v.module)];
    g.insert(g.end(), v.grads.begin(), v.grads.end());
    f.insert(f.end(), v.flush_before.begin(), v.flush_before.end());
  }
  create_events();

  // The state a step starts from: offload_param - the bf16 host copy of the master, with the
  // persistent tensors on the device (the previous step's _post_step); copy_back - every
  // parameter on the device (N > 1: the rank's partitions there, the persistent tensors
  // gathered, the rest gathered as the trace uses them).
  init_device_masters();
  const std::int64_t cpu = groups_.cpu_begin;
  if (offload()) {
    cast_f32_to_bf16_host(master_.as<float>(), partitions_.as<bf16>() + cpu, cpu_elems(), *pool_);
    cast_f32_to_bf16_host(master_.as<float>(), pbf16_.as<bf16>() + cpu, cpu_elems(), *pool_);
  } else {
    for (std::size_t g = groups_.on_device; g < groups_.groups.size(); ++g)
      copy_back_sub_group(groups_.groups[g]);
  }
  gather_persistent();
  dev_.synchronize();
}

// One rank: the arm's pool on its placement; N ranks of one host split its CPUs (a
// collective: every rank gets here).
void DeepSpeedRunner::make_pool() { pool_ = make_rank_pool(cfg_, arm_, dev_, *comm_, &placement_); }

void DeepSpeedRunner::allocate_host() {
  const std::int64_t P = parts_.total, C = cpu_elems();
  const HostMemoryMode pinned = pinned_mode_for(arm_);
  const auto P2 = static_cast<std::size_t>(P) * 2, C4 = static_cast<std::size_t>(C) * 4;
  // DeepSpeed's fp32 master is plain memory in both loops (stage3.py's .to(cpu).clone().float()):
  // its pin accounting holds no fp32 master under offload_param (the profile's 53 locked
  // buffers) nor in the copy-back loop, where the copy back reads it from pageable memory (2
  // locked buffers, fp32 gradients and the bf16 gradient partition, 6 B/param:
  // results/h200/2026-12-04-memory-sdpa/call2/ds-qwen05-b4-s128-cb.txt). The fp32 arrays hold
  // the CPU's sub-groups only: a device sub-group's pinned gradient buffer is moved to the
  // device at initialisation and freed (initialize_optimizer_states).
  if (C > 0) {
    master_ = HostBuffer(C4, HostMemoryMode::pageable, &dev_, "fp32 master", pool_.get());
    grads_ = HostBuffer(C4, pinned, &dev_, "fp32 gradients", pool_.get());
  }
  grads_bf16_ = HostBuffer(P2, pinned, &dev_, "bf16 gradient partition", pool_.get());
  if (C > 0) {
    exp_avg_ = HostBuffer(C4, HostMemoryMode::pageable, &dev_, "Adam exp_avg", pool_.get());
    exp_avg_sq_ = HostBuffer(C4, HostMemoryMode::pageable, &dev_, "Adam exp_avg_sq", pool_.get());
  }
  if (offload()) {
    pbf16_ = HostBuffer(P2, pinned, &dev_, "bf16 parameters", pool_.get());
    partitions_ = HostBuffer(P2, pinned, &dev_, "bf16 per-parameter partitions", pool_.get());
  }
  probe_.start(master_.as<float>(), grads_.as<float>(), exp_avg_.as<float>(),
               exp_avg_sq_.as<float>(), C, *pool_, *comm_);
  if (C > 0) initial_rank_range(groups_.cpu_begin, P, master_.as<float>());
}

void DeepSpeedRunner::allocate_device() {
  const DeviceSizes ds = device_sizes(cfg_, layout_, ranks());
  params_ = DeviceBuffer(mem_, ds.params);  // resident: the copy_back loop on one rank
  norm_scalar_ = DeviceBuffer(mem_, 256);
  allocate_param_blocks();
  if (sharded()) allocate_rank_buffers();
  // Data parallel: rank r trains on the micro-batch of token seed seed + r.
  Device& math_device =
      uses_eager_decoder(cfg_)
          ? static_cast<Device&>(*(counting_ = std::make_unique<CountingDevice>(mem_)))
          : static_cast<Device&>(mem_);
  math_ = ModuleMath(math_device, cfg_, layout_,
                     cfg_.seed + static_cast<std::uint64_t>(comm_->rank()), &mem_);
  if (counting_) init_device_ops();
}

void DeepSpeedRunner::init_device_ops() {
  link_counting_ = std::make_unique<CountingDevice>(dev_);
  const EagerOpCounts plan = eager_op_counts(cfg_);
  const std::vector<DsModuleCopies> copies = plan_.module_copies(modules());
  for (std::int64_t j = 0; j < modules(); ++j) {
    ModuleDeviceOps m;
    m.module = layout_.modules[static_cast<std::size_t>(j)].name;
    const bool head = j == modules() - 1, embedding = j == 0;
    m.plan_forward =
        embedding ? plan.embedding_forward : (head ? plan.head_forward : plan.layer_forward);
    m.plan_backward =
        embedding ? plan.embedding_backward : (head ? plan.head_backward : plan.layer_backward);
    const DsModuleCopies& c = copies[static_cast<std::size_t>(j)];
    m.plan_fetch_forward = c.fetch_forward;
    m.plan_fetch_backward = c.fetch_backward;
    m.plan_grad_d2h = c.grad_d2h;
    m.plan_grad_h2d = c.grad_h2d;
    device_ops_.push_back(m);
  }
}

void DeepSpeedRunner::count_link_copies(std::int64_t j, CopyUse use,
                                        const CountingDevice::Counts& since) {
  if (!link_counting_) return;
  const CountingDevice::Counts now = link_counting_->counts();
  ModuleDeviceOps& m = device_ops_[static_cast<std::size_t>(j)];
  switch (use) {
    case CopyUse::fetch_forward: m.fetch_forward += now.h2d - since.h2d; break;
    case CopyUse::fetch_backward: m.fetch_backward += now.h2d - since.h2d; break;
    case CopyUse::gradients:
      m.grad_d2h += now.d2h - since.d2h;
      m.grad_h2d += now.h2d - since.h2d;
      break;
  }
}

void DeepSpeedRunner::counted_math(std::int64_t j, bool forward, const std::function<void()>& run) {
  if (!counting_) {
    run();
    return;
  }
  const CountingDevice::Counts before = counting_->counts();
  run();
  const CountingDevice::Counts after = counting_->counts();
  ModuleDeviceOps& m = device_ops_[static_cast<std::size_t>(j)];
  (forward ? m.kernels_forward : m.kernels_backward) = after.kernels - before.kernels;
  (forward ? m.copies_forward : m.copies_backward) = after.copies - before.copies;
}

// Adam's result back to the device for one CPU sub-group (N > 1: into the rank's partitions,
// which the next fetches all-gather): stage3.py's fp16_partitioned_groups_flat[i].data.copy_(
// fp32 on the CPU), a blocking copy_ that PyTorch converts on the CPU (copy_requires_temporaries:
// blocking copies cast where the source is): src.to(bf16) into a fresh tensor of its CPU
// allocator, one same-dtype H2D from that pageable memory on the current stream, and the wait.
// No device temporary: the device holds only the bf16 parameters.
void DeepSpeedRunner::copy_back_sub_group(const SubGroup& sg) {
  const std::int64_t n = sg.end - sg.begin, at = sg.begin - groups_.cpu_begin;
  const auto bytes = static_cast<std::size_t>(n) * 2;
  HostBuffer staged(bytes, HostMemoryMode::pageable, nullptr, "bf16 copy-back temporary", nullptr,
                    HostPages::as_pytorch_cpu_allocator);
  cast_f32_to_bf16_host(master_.as<float>() + at, staged.as<bf16>(), n, *pool_);
  const auto piece = static_cast<std::size_t>(sg.first_piece);
  dev_.record(cb_copy_start_[piece], Queue::compute);
  dev_.copy_to_device(Queue::compute, device_params() + sg.begin, staged.data(), bytes);
  dev_.record(cb_copy_end_[piece], Queue::compute);
  dev_.event_synchronize(cb_copy_end_[piece]);  // staged goes out of scope
}

void DeepSpeedRunner::create_events() {
  const auto M = static_cast<std::size_t>(modules());
  origin_ = dev_.create_event();
  norm_read_ = dev_.create_event();
  task_start_ = make_events(dev_, 2 * M);
  task_end_ = make_events(dev_, 2 * M);
  grad_ready_ = make_events(dev_, M);
  hook_done_ = make_events(dev_, M);
  flush_start_ = make_events(dev_, plan_.flushes.size());
  flush_end_ = make_events(dev_, plan_.flushes.size());
  std::size_t fetch_copies = 0, flushed = 0;
  if (offload()) {
    fetch_copies = static_cast<std::size_t>(plan_.h2d().copies);
    for (const DsFlush& f : plan_.flushes) fetch_copies -= f.tensors.size();
  }
  for (const DsFlush& f : plan_.flushes) flushed += f.tensors.size();
  fetches_.start = make_events(dev_, fetch_copies);
  fetches_.end = make_events(dev_, fetch_copies);
  flush_copies_.start = make_events(dev_, 3 * flushed);
  flush_copies_.end = make_events(dev_, 3 * flushed);
  device_adam_start_ = make_events(dev_, groups_.on_device);
  device_adam_end_ = make_events(dev_, groups_.on_device);
  reassign_done_ = make_events(dev_, groups_.on_device);
  if (!offload()) {
    const auto np = static_cast<std::size_t>(groups_.pieces);
    cb_copy_start_ = make_events(dev_, np);
    cb_copy_end_ = make_events(dev_, np);
  }
}

void DeepSpeedRunner::copy(TimedCopies& c, Queue q, const char* track, const std::string& name,
                           bool to_device, void* dst, const void* src, std::size_t bytes) {
  DeviceEvent& start = c.start[c.used];
  DeviceEvent& end = c.end[c.used];
  Device& link = link_counting_ ? *link_counting_ : dev_;
  dev_.record(start, q);
  if (to_device) {
    link.copy_to_device(q, dst, src, bytes);
  } else {
    link.copy_to_host(q, dst, src, bytes);
  }
  dev_.record(end, q);
  c.names.push_back(name);
  c.tracks.push_back(track);
  ++c.used;
}

// One all-gather handle: a copy per tensor from the pinned bf16 buffer, on the fetch stream.
void DeepSpeedRunner::fetch(const std::vector<int>& ids) {
  PhaseScope in(phase_, sharded() ? Phase::all_gather : Phase::param_fetch);
  if (sharded()) {
    if (!ids.empty()) gather_handle(ids, Queue::h2d, "fetch:");
    return;
  }
  if (!offload()) return;  // copy_back: the partitions already live on the device
  make_live(ids, Queue::h2d);
  for (int id : ids) {
    const DsTensor& t = tensor(id);
    copy(fetches_, Queue::h2d, "h2d", "fetch:" + t.name, true, param_of(id),
         pbf16_.as<bf16>() + t.offset, static_cast<std::size_t>(t.count) * 2);
    last_fetch_ = &fetches_.end[fetches_.used - 1];
  }
}

// The plan's visits of one module from index v, in one direction: fetch, wait (the host
// synchronises the fetch stream; compute then waits for it), prefetch. Returns the next index.
std::size_t DeepSpeedRunner::run_visits(std::size_t v, bool forward) {
  const std::int64_t module = plan_.visits[v].module;
  const CountingDevice::Counts before = link_counts();
  for (; v < plan_.visits.size() && plan_.visits[v].module == module &&
         plan_.visits[v].forward == forward;
       ++v) {
    const DsVisit& visit = plan_.visits[v];
    fetch(visit.fetch);
    if (visit.waits > 0 && last_fetch_ != nullptr) {
      const auto tw = Clock::now();
      dev_.event_synchronize(*last_fetch_);
      host_.fetch_wait += seconds_between(tw, Clock::now());
    }
    if (last_fetch_ != nullptr) dev_.queue_wait(Queue::compute, *last_fetch_);
    fetch(visit.prefetch);
    // DeepSpeed releases the leaf's tensors after it ran, before the next leaf's fetch (which
    // may prefetch them again); the tool's module runs after all its leaves' visits, so its
    // blocks are freed after the module's math, if nothing made them live again meanwhile.
    const std::vector<int> idle = residency_.release(visit.released);
    to_free_.insert(to_free_.end(), idle.begin(), idle.end());
  }
  count_link_copies(module, forward ? CopyUse::fetch_forward : CopyUse::fetch_backward, before);
  return v;
}

void DeepSpeedRunner::forward() {
  phase_ = Phase::forward;
  const auto tf = Clock::now();
  std::size_t v = 0;
  while (v < plan_.visits.size() && plan_.visits[v].forward) {
    const std::int64_t j = plan_.visits[v].module;
    v = run_visits(v, true);
    dev_.record(task_start_[j], Queue::compute);
    counted_math(j, true, [&] { math_.forward(j, module_params(j), shared_weights(j)); });
    dev_.record(task_end_[j], Queue::compute);
    free_idle_blocks();
  }
  host_.forward = seconds_between(tf, Clock::now());
}

void DeepSpeedRunner::backward() {
  phase_ = Phase::backward;
  const auto tb = Clock::now();
  const std::int64_t M = modules();
  std::size_t v = 0;
  while (v < plan_.visits.size() && plan_.visits[v].forward) ++v;
  while (v < plan_.visits.size()) {
    const std::int64_t j = plan_.visits[v].module;
    v = run_visits(v, false);
    const ModuleGrads grads = allocate_grads(j);  // autograd's, one block per tensor
    dev_.record(task_start_[M + j], Queue::compute);
    counted_math(j, false, [&] {
      math_.backward(
          j, module_params(j), grads, [&] { gradient_hooks(j); }, shared_weights(j));
    });
    dev_.record(task_end_[M + j], Queue::compute);
    for (void* b : grad_block_) {
      if (b != nullptr) throw std::logic_error("deepspeed: a module's hooks did not run");
    }
    free_idle_blocks();
  }
  // independent_gradient_partition_epilogue: the rest of the bucket, then the host waits for
  // the reduce stream. No hook issues it: its copies count with the module whose hooks ran last.
  const CountingDevice::Counts before = link_counts();
  while (next_flush_ < plan_.flushes.size()) flush(plan_.flushes[next_flush_++]);
  count_link_copies(plan_.epilogue_module(), CopyUse::gradients, before);
  const std::vector<int> idle = residency_.release_all();  // release_and_reset_all
  to_free_.insert(to_free_.end(), idle.begin(), idle.end());
  free_idle_blocks();
  host_.backward = seconds_between(tb, Clock::now());
  phase_ = Phase::grad_offload;  // the host waits for the reduce stream
  const auto tw = Clock::now();
  if (!reduce_events_.empty()) dev_.event_synchronize(*reduce_events_.back());
  host_.grad_wait = seconds_between(tw, Clock::now());
}

// The module's gradients are complete: each joins the bucket (the reduce stream waits for
// compute), and a gradient that would overflow it flushes it first.
void DeepSpeedRunner::gradient_hooks(std::int64_t module) {
  const CountingDevice::Counts before = link_counts();
  dev_.record(grad_ready_[module], Queue::compute);
  dev_.queue_wait(Queue::d2h, grad_ready_[module]);
  const std::vector<int>& grads = grads_of_module_[static_cast<std::size_t>(module)];
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (flush_of_module_[static_cast<std::size_t>(module)][i]) flush(plan_.flushes[next_flush_++]);
    const DsTensor& t = tensor(grads[i]);
    if (t.module != module) throw std::logic_error("deepspeed: " + t.name + "'s hook is elsewhere");
    void*& b = grad_block_[static_cast<std::size_t>(grads[i])];
    if (b == nullptr) throw std::logic_error("deepspeed: " + t.name + "'s gradient was not made");
    add_to_bucket(grads[i], static_cast<const bf16*>(b));
    mem_.deallocate_after(b, Queue::d2h);  // the hook's copy into the bucket was its last use
    b = nullptr;
  }
  count_link_copies(module, CopyUse::gradients, before);
  // Compute resumes here: a flush from unregistered memory blocked the host, and that gap is
  // not compute (the bound's compute_s leaves it out).
  dev_.record(hook_done_[module], Queue::compute);
}

// __reduce_and_partition_ipg_grads + partition_grads for one bucket, on the reduce stream.
void DeepSpeedRunner::flush(const DsFlush& f) {
  PhaseScope in(phase_, sharded() ? Phase::reduce_scatter : Phase::grad_offload);
  const auto t0 = Clock::now();
  if (reduce_events_.size() > static_cast<std::size_t>(knobs_.max_reduce_events)) {
    dev_.event_synchronize(*reduce_events_.front());
    reduce_events_.pop_front();
  }
  const std::size_t k = next_flush_ - 1;
  check_bucket(f);
  dev_.record(flush_start_[k], Queue::d2h);
  if (sharded()) {
    flush_ranks(f);
  } else {  // reduce_scatter_coalesced's copy of the bucket (torch.cat), then per tensor
    const auto bytes = 2 * static_cast<std::size_t>(bucket_fill_);
    auto* cat = static_cast<bf16*>(mem_.allocate_on(Queue::d2h, bytes));
    dev_.copy_on_device(Queue::d2h, cat, bucket_.as<bf16>(), bytes);
    for (int id : f.tensors)
      flush_tensor_copies(id, cat + bucket_at_[static_cast<std::size_t>(id)], nullptr);
    mem_.deallocate_after(cat, Queue::d2h);
  }
  bucket_fill_ = 0;
  ++bucket_epoch_;
  dev_.record(flush_end_[k], Queue::d2h);
  reduce_events_.push_back(&flush_end_[k]);
  host_.flush += seconds_between(t0, Clock::now());
}

// The global norm as the profile shows it (complete_grad_norm_calculation_for_cpu_offload and
// its checks): a float64 scalar read, two 4 B writes from pageable memory, two 4 B reads (one
// of them here the loss), each followed by a host synchronisation of the compute stream.
void DeepSpeedRunner::read_norm() {
  phase_ = Phase::grad_norm;
  const auto t0 = Clock::now();
  const auto sync = [&] {
    dev_.record(*norm_read_, Queue::compute);
    dev_.event_synchronize(*norm_read_);
  };
  double norm64 = 0;
  dev_.copy_to_host(Queue::compute, &norm64, norm_scalar_.as<void>(), sizeof norm64);
  sync();
  for (void* p : norm_scalars_) mem_.deallocate_after(p, Queue::compute);  // the norms, summed
  norm_scalars_.clear();
  for (int i = 0; i < kNormWrites; ++i) {
    dev_.copy_to_device(Queue::compute, norm_scalar_.as<void>(), &norm_host_, sizeof norm_host_);
    sync();
  }
  dev_.copy_to_host(Queue::compute, &norm_host_, norm_scalar_.as<void>(), sizeof norm_host_);
  sync();
  dev_.copy_to_host(Queue::compute, &loss_host_, math_.loss(), sizeof loss_host_);
  sync();
  host_.norm = seconds_between(t0, Clock::now());
}

// _post_step: the persistent tensors, released at the start of the step, are gathered again:
// one copy each on the compute stream, then the host synchronises it.
void DeepSpeedRunner::gather_persistent() {
  if (plan_.persistent.empty() || (!offload() && !sharded())) return;
  phase_ = sharded() ? Phase::all_gather : Phase::param_fetch;
  const auto t0 = Clock::now();
  if (sharded()) {  // _allgather_params_coalesced: one all-gather per tensor, one wait
    gather_persistent_ranks();
    dev_.event_synchronize(*last_fetch_);
    host_.gather += seconds_between(t0, Clock::now());
    return;
  }
  for (int id : plan_.persistent) {
    const DsTensor& t = tensor(id);
    copy(fetches_, Queue::compute, "h2d", "gather:" + t.name, true, persistent_slot(id),
         pbf16_.as<bf16>() + t.offset, static_cast<std::size_t>(t.count) * 2);
  }
  dev_.event_synchronize(fetches_.end[fetches_.used - 1]);
  host_.gather += seconds_between(t0, Clock::now());
}

StepSample DeepSpeedRunner::run_step(int t) {
  StepSample s;
  host_ = {};
  for (TimedCopies* c : {&fetches_, &flush_copies_, &gathers_, &scatters_}) {
    c->used = 0;
    c->names.clear();
    c->tracks.clear();
  }
  gather_bytes_ = scatter_bytes_ = 0;
  handles_used_ = 0;
  last_fetch_ = nullptr;
  reduce_events_.clear();
  next_flush_ = 0;
  bucket_fill_ = 0;
  to_free_.clear();
  for (ModuleDeviceOps& m : device_ops_)  // the last step's copies, like the math's counts
    m.fetch_forward = m.fetch_backward = m.grad_d2h = m.grad_h2d = 0;
  if (sharded()) comm_->barrier();  // the ranks start together: the slowest sets the time
  const auto t0 = Clock::now();
  dev_.record(*origin_, Queue::compute);
  forward();
  backward();
  read_norm();
  optimizer(t, s, t0);
  gather_persistent();
  dev_.synchronize();
  s.wall_s = seconds_between(t0, Clock::now());
  s.loss = group_loss(*comm_, loss_host_);
  report(s);
  return s;
}

// Phases from the host clocks and the device events, once every event has completed.
void DeepSpeedRunner::report(StepSample& s) {
  const std::int64_t M = modules();
  const std::int64_t S = parts_.total;  // what this rank offloads, updates and sends back
  const auto P = static_cast<std::uint64_t>(S);
  const auto rel = [&](DeviceEvent& e) { return dev_.elapsed_seconds(*origin_, e); };
  const auto dur = [&](DeviceEvent& a, DeviceEvent& b) { return dev_.elapsed_seconds(a, b); };
  const auto phase = [&](Phase p, double host_s, double device_s, std::uint64_t bytes,
                         std::int64_t params) { s.set_phase(p, host_s, device_s, bytes, params); };
  phase(Phase::forward, host_.forward, dur(task_start_[0], task_end_[M - 1]), 0, layout_.total);
  phase(Phase::backward, host_.backward, dur(task_start_[2 * M - 1], task_end_[M]), 0,
        layout_.total);
  link_ = {};
  for (std::int64_t j = 0; j < M; ++j) {
    const std::string& name = layout_.modules[static_cast<std::size_t>(j)].name;
    link_.compute_s += dur(task_start_[j], task_end_[j]) +
                       dur(task_start_[M + j], task_end_[M + j]) -
                       dur(grad_ready_[j], hook_done_[j]);
    s.spans.push_back(
        {"compute", name + ".fwd", rel(task_start_[j]), dur(task_start_[j], task_end_[j])});
    s.spans.push_back({"compute", name + ".bwd", rel(task_start_[M + j]),
                       dur(task_start_[M + j], task_end_[M + j])});
  }
  const auto copies = [&](TimedCopies& c) {
    double total = 0;
    for (std::size_t i = 0; i < c.used; ++i) {
      const double d = dur(c.start[i], c.end[i]);
      total += d;
      (std::string(c.tracks[i]) == "h2d" ? link_.h2d_s : link_.d2h_s) += d;
      s.spans.push_back({c.tracks[i], c.names[i], rel(c.start[i]), d});
    }
    return total;
  };
  double flush_device = 0;
  for (std::size_t k = 0; k < plan_.flushes.size(); ++k)
    flush_device += dur(flush_start_[k], flush_end_[k]);
  copies(flush_copies_);
  // The CPU's sub-groups (C of the S elements; D on the device): 6 B/param leave the device
  // (bf16 + fp32) and 2 B/param come back (the bf16 round trip); the device's sub-groups make
  // the same bf16 round trip, their fp32 copy staying on the device.
  const auto C = static_cast<std::uint64_t>(cpu_elems()), D = P - C;
  phase(Phase::grad_offload, host_.flush + host_.grad_wait, flush_device, 8 * C + 4 * D, S);
  phase(Phase::grad_norm, host_.norm, -1, 8 + 4 * (kNormReads - 1) + 4 * kNormWrites, 0);
  if (C > 0) {
    phase(Phase::grad_scale, host_.scale, -1, 8 * C, cpu_elems());
    phase(Phase::adam, host_.adam, -1, 28 * C, cpu_elems());
  }
  if (D > 0) {  // the unscale (8 B/param) and torch's AdamW (device_adam.hpp)
    double device_adam = 0;
    for (std::size_t g = 0; g < groups_.on_device; ++g)
      device_adam += dur(device_adam_start_[g], device_adam_end_[g]);
    phase(Phase::device_adam, host_.device_adam, device_adam,
          8 * D + device_adamw_bytes(device_elems(), AdamHyper{}), device_elems());
  }
  if (sharded()) report_collectives(s);
  if (offload()) {
    const double fetch_device = copies(fetches_);
    const std::int64_t fetched = fetched_partition_elements();
    phase(Phase::param_fetch, host_.fetch_wait + host_.gather, fetch_device,
          2 * static_cast<std::uint64_t>(fetched), fetched);
    // The CPU's cast reads fp32 and writes bf16; the device part's reassign adds its fp32 D2H.
    phase(Phase::host_cast, host_.cast, -1, 6 * C + 10 * D, S);
  } else {
    double cb_device = 0;
    for (std::int64_t p = 0; p < groups_.pieces; ++p) {
      const double d = dur(cb_copy_start_[p], cb_copy_end_[p]);
      cb_device += d;
      link_.h2d_s += d;
      s.spans.push_back({"h2d", "copy_back[" + std::to_string(p) + "]", rel(cb_copy_start_[p]), d});
    }
    // Host memory passes: the CPU cast reads fp32 and writes bf16, the H2D reads the bf16.
    phase(Phase::copy_back, host_.copy_back, cb_device, 8 * C, S);
  }
}

ArmResult run_deepspeed_arm(const RunConfig& config, Arm arm, Device& device,
                            std::vector<float>* final_master, const DeepSpeedKnobs& knobs) {
  return run_arm_with<DeepSpeedRunner>(config, arm, device, final_master, knobs);
}

ArmResult run_deepspeed_arm(const RunConfig& config, Arm arm, Device& device,
                            std::vector<float>* final_master) {
  return run_deepspeed_arm(config, arm, device, final_master, DeepSpeedKnobs{});
}

}  // namespace zob::step_detail
