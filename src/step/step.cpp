// One arm: ZeRO-3 CPU-offload training steps (docs/anatomy.md §3) on the Device interface.
//
// Queues: compute runs the model and the device casts of the copy-back; d2h casts each
// module's bf16 gradients to fp32 and copies them to the pinned host partition while backward
// goes on; h2d carries the copy-back pieces and (offload_param) the parameter fetches. Work
// crosses queues only through events, so a synchronous device (the CPU one) and an
// asynchronous one run the same program.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fmt/format.h>
#include <memory>
#include <string>
#include <vector>

#include "step/arm_result_fill.hpp"
#include "step/arm_runner_common.hpp"
#include "step/device_buffer.hpp"
#include "step/module_math.hpp"
#include "step/overlap.hpp"
#include "step/step_internal.hpp"
#include "zob/clock.hpp"
#include "zob/adam.hpp"
#include "zob/cpu_affinity.hpp"
#include "zob/errors.hpp"
#include "zob/host_memory.hpp"
#include "zob/model.hpp"
#include "zob/step.hpp"
#include "zob/thread_pool.hpp"

namespace zob {
namespace {

using step_detail::DeviceBuffer;
using step_detail::Events;
using step_detail::make_events;


using step_detail::SubGroup;

class ArmRunner {
 public:
  ArmRunner(const RunConfig& config, Arm arm, Device& dev)
      : cfg_(config), arm_(arm), dev_(dev), layout_(ModelLayout::build(config.model)) {}

  // Every queue must be idle before device or host memory goes away (registered memory
  // above all): a throw in the middle of a step leaves work in flight.
  ~ArmRunner() {
    try {
      dev_.synchronize();
    } catch (...) {  // the error that brought us here is the one worth reporting
    }
  }
  ArmRunner(const ArmRunner&) = delete;
  ArmRunner& operator=(const ArmRunner&) = delete;

  void setup();
  StepSample run_step(int t);  // t: Adam step number, from 1
  const float* master() const { return master_.as<float>(); }
  std::int64_t total() const { return layout_.total; }
  int threads() const { return pool_->size(); }
  double register_seconds() const {
    return master_.register_seconds() + grads_.register_seconds() + pbf16_.register_seconds();
  }
  const HostBuffer& master_buffer() const { return master_; }
  const ThreadPlacement& placement() const { return placement_; }
  StepLinkTimes link_times() const { return link_; }  // the last step's, for the bound
  double probe_gb_per_s() const { return probe_gb_s_; }

 private:
  // Host seconds of the phases a step measures on the host clock.
  struct StepTimes {
    double forward = 0, backward = 0, grad_wait = 0, adam = 0, copy_back = 0, host_cast = 0;
  };

  bool offload() const { return cfg_.loop == Loop::offload_param; }
  std::int64_t modules() const { return static_cast<std::int64_t>(layout_.modules.size()); }
  const ModuleSlice& module(std::int64_t j) const {
    return layout_.modules[static_cast<std::size_t>(j)];
  }
  std::int64_t fetch_of(std::int64_t j) const {
    return fetch_of_module_[static_cast<std::size_t>(j)];
  }
  // Device seconds from the step's origin to e, and from a to b.
  double rel(DeviceEvent& e) const { return dev_.elapsed_seconds(*origin_, e); }
  double dur(DeviceEvent& a, DeviceEvent& b) const { return dev_.elapsed_seconds(a, b); }
  void allocate_host();
  void allocate_device();
  void create_events();
  void make_overlap_schedule();
  const bf16* weights(std::int64_t module) const;
  const bf16* shared_weights(std::int64_t module) const;
  double forward(StepSample& s);
  double backward(StepSample& s);
  void optimizer_overlap(int t, Clock::time_point t0, StepSample& s, StepTimes& times);
  void optimizer_stock(int t, Clock::time_point t0, StepSample& s, StepTimes& times);
  void report_compute(StepSample& s, const StepTimes& times);
  void report_fetches(StepSample& s, const StepTimes& times);
  void report_copy_back(StepSample& s, const StepTimes& times);
  void issue_fetch(std::int64_t module, StepSample& s);
  void offload_grads(std::int64_t j, bf16* g, float* g32);
  void copy_back(const SubGroup& sg);

  const RunConfig& cfg_;
  Arm arm_;
  Device& dev_;
  ModelLayout layout_;
  std::vector<SubGroup> sub_groups_;
  std::int64_t pieces_ = 0;
  std::unique_ptr<ThreadPool> pool_;
  ThreadPlacement placement_;
  std::unique_ptr<step_detail::OverlapSchedule> overlap_;  // --schedule overlap
  StepLinkTimes link_;
  double probe_gb_s_ = 0;

  HostBuffer master_, grads_, exp_avg_, exp_avg_sq_, pbf16_;

  DeviceBuffer params_, copy_temp_, copy_temp2_;
  DeviceBuffer param_slot_[2], grad_slot_[2], grad_f32_[2];
  step_detail::ModuleMath math_;  // activations, token ids and the module kernels

  // Events, created once and re-recorded every step (each step ends with all queues idle).
  std::unique_ptr<DeviceEvent> origin_;
  Events task_start_, task_end_;  // compute: forward module j at j, backward at M + j
  Events grad_ready_, hook_done_, d2h_start_, d2h_copy_start_, d2h_end_;  // per module
  Events fetch_start_, fetch_end_;           // per fetch of a step
  Events cb_copy_start_, cb_copy_end_, cb_cast_start_, cb_cast_end_;  // per copy-back piece

  // Per-step schedule state.
  DeviceEvent* slot_released_[2] = {nullptr, nullptr};  // param slot: last compute that read it
  DeviceEvent* grad_slot_free_[2] = {nullptr, nullptr}; // grad slot: last D2H that read it
  std::vector<std::int64_t> fetch_of_module_;           // fetch index holding module j
  std::int64_t fetches_ = 0;
  std::int64_t grad_slots_used_ = 0;
  double fetch_host_s_ = 0;
  float loss_host_ = 0;
};

void ArmRunner::setup() {
  const RunConfig& c = cfg_;
  sub_groups_ = step_detail::split_sub_groups(c, layout_.total, &pieces_);
  pool_ = step_detail::make_arm_pool(c, arm_, dev_, &placement_);
  allocate_host();
  allocate_device();
  create_events();
  if (c.schedule == Schedule::overlap) make_overlap_schedule();
  // The initial device parameters take the same path a step takes after Adam.
  if (offload()) {
    cast_f32_to_bf16_host(master_.as<float>(), pbf16_.data(), layout_.total, *pool_);
  } else {
    for (const SubGroup& sg : sub_groups_) copy_back(sg);
  }
  dev_.synchronize();
}

// The host state (docs/anatomy.md §3): pinned fp32 master and gradients (and bf16
// parameters), plain Adam states; the master gets its initial values.
void ArmRunner::allocate_host() {
  const HostMemoryMode pinned = pinned_mode_for(arm_);
  const auto P4 = static_cast<std::size_t>(layout_.total) * 4;
  master_ = HostBuffer(P4, pinned, &dev_, "fp32 master", pool_.get());
  grads_ = HostBuffer(P4, pinned, &dev_, "fp32 gradients", pool_.get());
  exp_avg_ = HostBuffer(P4, HostMemoryMode::pageable, &dev_, "Adam exp_avg", pool_.get());
  exp_avg_sq_ = HostBuffer(P4, HostMemoryMode::pageable, &dev_, "Adam exp_avg_sq", pool_.get());
  if (offload()) pbf16_ = HostBuffer(static_cast<std::size_t>(layout_.total) * 2, pinned, &dev_,
                                     "bf16 parameters", pool_.get());
  // exp_avg and exp_avg_sq start at zero (probe_arm_memory re-zeroes what it touched).
  probe_gb_s_ = step_detail::probe_arm_memory(master_.as<float>(), grads_.as<float>(),
                                              exp_avg_.as<float>(), exp_avg_sq_.as<float>(),
                                              layout_.total, *pool_);
  initial_parameters(layout_, cfg_.seed, master_.as<float>());
}

void ArmRunner::allocate_device() {
  const step_detail::DeviceSizes ds = step_detail::device_sizes(cfg_, layout_);
  params_ = DeviceBuffer(dev_, ds.params);
  copy_temp_ = DeviceBuffer(dev_, ds.copy_temp);
  copy_temp2_ = DeviceBuffer(dev_, ds.copy_temp_second);
  for (int k = 0; k < 2; ++k) {
    param_slot_[k] = DeviceBuffer(dev_, ds.param_slot);
    grad_slot_[k] = DeviceBuffer(dev_, ds.grad_slot_bf16);
    grad_f32_[k] = DeviceBuffer(dev_, ds.grad_slot_f32);
  }
  math_ = step_detail::ModuleMath(dev_, cfg_, layout_, cfg_.seed);
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
  if (offload()) {
    fetch_start_ = make_events(dev_, 2 * M - 1);
    fetch_end_ = make_events(dev_, 2 * M - 1);
  } else {
    cb_copy_start_ = make_events(dev_, pieces_);
    cb_copy_end_ = make_events(dev_, pieces_);
    cb_cast_start_ = make_events(dev_, pieces_);
    cb_cast_end_ = make_events(dev_, pieces_);
  }
}

void ArmRunner::make_overlap_schedule() {
  step_detail::OverlapBuffers b;
  b.master = master_.as<float>();
  b.grads = grads_.as<float>();
  b.exp_avg = exp_avg_.as<float>();
  b.exp_avg_sq = exp_avg_sq_.as<float>();
  if (offload()) {
    b.host_bf16 = pbf16_.as<bf16>();
  } else {
    b.device_params = params_.as<bf16>();
    b.temp[0] = copy_temp_.as<float>();
    b.temp[1] = copy_temp2_.as<float>();
  }
  const step_detail::OverlapEvents e{&d2h_end_, &cb_copy_start_, &cb_copy_end_, &cb_cast_start_,
                                     &cb_cast_end_};
  overlap_ = std::make_unique<step_detail::OverlapSchedule>(
      dev_, *pool_, layout_,
      step_detail::make_pieces(layout_, cfg_.sub_group_size, cfg_.chunk_elems), b, e);
}

const bf16* ArmRunner::weights(std::int64_t module) const {
  if (!offload()) return params_.as<bf16>() + this->module(module).offset;
  return param_slot_[fetch_of(module) % 2].as<bf16>();
}

// The module's shared tensor (a tied head's embedding table): resident at its owner's offset,
// or fetched right after the module's own tensors. nullptr when it has none.
const bf16* ArmRunner::shared_weights(std::int64_t module) const {
  const ModuleSlice& m = this->module(module);
  if (m.shared.empty()) return nullptr;
  if (!offload()) return params_.as<bf16>() + m.shared.front().offset;
  return weights(module) + m.count;
}

// Fetch a module's bf16 parameters into the next slot of the ring. The slot is overwritten
// only after the compute that last read it has finished.
void ArmRunner::issue_fetch(std::int64_t module, StepSample& s) {
  const ModuleSlice& m = this->module(module);
  const auto t0 = Clock::now();
  const std::int64_t f = fetches_++;
  const int slot = static_cast<int>(f % 2);
  if (slot_released_[slot] != nullptr) dev_.queue_wait(Queue::h2d, *slot_released_[slot]);
  dev_.record(fetch_start_[f], Queue::h2d);
  dev_.copy_to_device(Queue::h2d, param_slot_[slot].as<void>(),
                      pbf16_.as<bf16>() + m.offset, static_cast<std::size_t>(m.count) * 2);
  std::int64_t at = m.count;  // shared tensors again, after the module's own (ZeRO-3 re-fetch)
  for (const TensorSlice& t : m.shared) {
    dev_.copy_to_device(Queue::h2d, param_slot_[slot].as<bf16>() + at,
                        pbf16_.as<bf16>() + t.offset, static_cast<std::size_t>(t.count()) * 2);
    at += t.count();
  }
  dev_.record(fetch_end_[f], Queue::h2d);
  fetch_of_module_[static_cast<std::size_t>(module)] = f;  // the one write: see fetch_of
  fetch_host_s_ += seconds_since(t0);
  s.spans.push_back({"h2d", "fetch:" + m.name, 0, 0});  // times filled in after the step
}

// Module j's weight gradients are complete: cast and copy them out on the d2h queue while
// compute carries on with the rest of backward.
void ArmRunner::offload_grads(std::int64_t j, bf16* g, float* g32) {
  const ModuleSlice& m = module(j);
  dev_.record(grad_ready_[j], Queue::compute);
  dev_.queue_wait(Queue::d2h, grad_ready_[j]);
  dev_.record(d2h_start_[j], Queue::d2h);
  dev_.cast_bf16_to_f32(g, g32, m.count, Queue::d2h);
  dev_.record(d2h_copy_start_[j], Queue::d2h);
  dev_.copy_to_host(Queue::d2h, grads_.as<float>() + m.offset, g32,
                    static_cast<std::size_t>(m.count) * 4);
  dev_.record(d2h_end_[j], Queue::d2h);
  // Compute resumes here: with unregistered memory the host was blocked in the copy above,
  // and that gap is not compute (the bound's compute_s leaves it out).
  dev_.record(hook_done_[j], Queue::compute);
}

void ArmRunner::copy_back(const SubGroup& sg) {
  step_detail::copy_back_range(dev_, master_.as<float>(), params_.as<bf16>(), copy_temp_.as<float>(),
                               sg.begin, sg.end, cfg_.chunk_elems, sg.first_piece,
                               {&cb_copy_start_, &cb_copy_end_, &cb_cast_start_, &cb_cast_end_});
}

StepSample ArmRunner::run_step(int t) {
  StepSample s;
  slot_released_[0] = slot_released_[1] = nullptr;
  grad_slot_free_[0] = grad_slot_free_[1] = nullptr;
  fetches_ = 0;
  grad_slots_used_ = 0;
  fetch_host_s_ = 0;
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
  s.wall_s = seconds_since(t0);
  s.loss = loss_host_;
  link_ = {};
  report_compute(s, times);
  if (offload()) {
    report_fetches(s, times);
  } else {
    report_copy_back(s, times);
  }
  return s;
}

// Forward, module by module; under --offload-param each module's fetch is waited for and
// the next one is prefetched. Returns the host time.
double ArmRunner::forward(StepSample& s) {
  const std::int64_t M = modules();
  const auto tf = Clock::now();
  if (offload()) issue_fetch(0, s);
  for (std::int64_t j = 0; j < M; ++j) {
    if (offload()) {
      if (j + 1 < M) issue_fetch(j + 1, s);
      dev_.queue_wait(Queue::compute, fetch_end_[fetch_of(j)]);
    }
    dev_.record(task_start_[j], Queue::compute);
    math_.forward(j, weights(j), shared_weights(j));
    dev_.record(task_end_[j], Queue::compute);
    if (offload()) slot_released_[fetch_of(j) % 2] = &task_end_[j];
  }
  return seconds_since(tf);
}

// Backward, head first; each module's gradients stream out (offload_grads) while the rest
// of backward runs, through two gradient slots. Returns the host time.
double ArmRunner::backward(StepSample& s) {
  const std::int64_t M = modules();
  const auto tb = Clock::now();
  for (std::int64_t j = M - 1; j >= 0; --j) {
    const std::int64_t task = M + j;
    if (offload()) {
      // The head is still resident from forward; every other module is fetched again.
      if (j - 1 >= 0) issue_fetch(j - 1, s);
      if (j != M - 1) dev_.queue_wait(Queue::compute, fetch_end_[fetch_of(j)]);
    }
    const int gslot = static_cast<int>(grad_slots_used_++ % 2);
    if (grad_slot_free_[gslot] != nullptr) dev_.queue_wait(Queue::compute, *grad_slot_free_[gslot]);
    dev_.record(task_start_[task], Queue::compute);
    bf16* g = grad_slot_[gslot].as<bf16>();
    float* g32 = grad_f32_[gslot].as<float>();
    math_.backward(j, weights(j), g, [&] { offload_grads(j, g, g32); }, shared_weights(j));
    dev_.record(task_end_[task], Queue::compute);
    grad_slot_free_[gslot] = &d2h_end_[j];
    if (offload()) slot_released_[fetch_of(j) % 2] = &task_end_[task];
  }
  return seconds_since(tb);
}

// --schedule overlap: Adam per piece as its gradients land, overlapped with the copy-back.
void ArmRunner::optimizer_overlap(int t, Clock::time_point t0, StepSample& s, StepTimes& times) {
  const step_detail::OverlapTimes o = overlap_->run(t, t0, s);
  times.grad_wait = o.grad_wait_s;
  times.adam = o.adam_s;
  times.copy_back = o.copy_back_s;
  times.host_cast = o.host_cast_s;
  // Read the loss only now: a copy into pageable memory may block the host until the
  // compute queue reaches it, which must not hold up the first piece's Adam.
  dev_.copy_to_host(Queue::compute, &loss_host_, math_.loss(), sizeof(float));
}

// --schedule stock: wait for every gradient, then per sub-group CPU Adam and the way back to
// the device (copy-back, or the host cast under --offload-param).
void ArmRunner::optimizer_stock(int t, Clock::time_point t0, StepSample& s, StepTimes& times) {
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
    const auto ta = Clock::now();
    adam_step(master_.as<float>() + sg.begin, grads_.as<float>() + sg.begin,
              exp_avg_.as<float>() + sg.begin, exp_avg_sq_.as<float>() + sg.begin, len, t,
              hyper, *pool_);
    const double a = seconds_since(ta);
    times.adam += a;
    s.spans.push_back({"cpu_adam", to_string(Phase::adam) + tag, seconds_between(t0, ta), a});
    const auto tc = Clock::now();
    if (offload()) {
      cast_f32_to_bf16_host(master_.as<float>() + sg.begin, pbf16_.as<bf16>() + sg.begin, len,
                            *pool_);
      const double c = seconds_since(tc);
      times.host_cast += c;
      s.spans.push_back(
          {"cpu_adam", to_string(Phase::host_cast) + tag, seconds_between(t0, tc), c});
    } else {
      copy_back(sg);
      times.copy_back += seconds_since(tc);
    }
  }
}

// The phases every loop has (forward, backward, gradient offload, Adam) and their timeline,
// from the device events once every one of them has completed.
void ArmRunner::report_compute(StepSample& s, const StepTimes& times) {
  const std::int64_t M = modules();
  const std::int64_t P = layout_.total;
  const auto Pu = static_cast<std::uint64_t>(P);
  s.set_phase(Phase::forward, times.forward, dur(task_start_[0], task_end_[M - 1]), 0, P);
  s.set_phase(Phase::backward, times.backward, dur(task_start_[2 * M - 1], task_end_[M]), 0, P);
  PhaseSample& go = s.phase(Phase::grad_offload);
  go = PhaseSample{0, times.grad_wait, 4 * Pu, P};
  for (std::int64_t j = 0; j < M; ++j) {
    const std::string& name = module(j).name;
    const double d = dur(d2h_start_[j], d2h_end_[j]);
    go.device_s += d;
    link_.d2h_s += dur(d2h_copy_start_[j], d2h_end_[j]);
    link_.compute_s += dur(task_start_[j], task_end_[j]) + dur(task_start_[M + j], task_end_[M + j]) -
                       dur(grad_ready_[j], hook_done_[j]);
    s.spans.push_back({"d2h", "grad:" + name, rel(d2h_start_[j]), d});
    s.spans.push_back({"compute", name + ".fwd", rel(task_start_[j]),
                       dur(task_start_[j], task_end_[j])});
    s.spans.push_back({"compute", name + ".bwd", rel(task_start_[M + j]),
                       dur(task_start_[M + j], task_end_[M + j])});
  }
  s.set_phase(Phase::adam, times.adam, -1, 28 * Pu, P);
}

// --offload-param: the parameter fetches (their spans were pushed when issued) and the
// host cast.
void ArmRunner::report_fetches(StepSample& s, const StepTimes& times) {
  const std::int64_t P = layout_.total;
  PhaseSample& pf = s.phase(Phase::param_fetch);
  pf.device_s = 0;
  pf.host_s = fetch_host_s_;
  pf.params = step_detail::fetched_elements(layout_);
  pf.bytes = 2 * static_cast<std::uint64_t>(pf.params);
  std::int64_t f = 0;
  for (TraceSpan& span : s.spans) {
    if (span.track != "h2d") continue;
    const double d = dur(fetch_start_[f], fetch_end_[f]);
    span.start_s = rel(fetch_start_[f]);
    span.duration_s = d;
    pf.device_s += d;
    link_.h2d_s += d;
    ++f;
  }
  // reads fp32, writes bf16
  s.set_phase(Phase::host_cast, times.host_cast, -1, 6 * static_cast<std::uint64_t>(P), P);
}

// The copy-back loop: each piece's copy and cast.
void ArmRunner::report_copy_back(StepSample& s, const StepTimes& times) {
  const std::int64_t P = layout_.total;
  PhaseSample& cb = s.phase(Phase::copy_back);
  cb = PhaseSample{0, times.copy_back, 4 * static_cast<std::uint64_t>(P), P};
  for (std::int64_t p = 0; p < pieces_; ++p) {
    cb.device_s += dur(cb_copy_start_[p], cb_cast_end_[p]);
    link_.h2d_s += dur(cb_copy_start_[p], cb_copy_end_[p]);
    const std::string tag = fmt::format("[{}]", p);
    s.spans.push_back({"h2d", to_string(Phase::copy_back) + tag, rel(cb_copy_start_[p]),
                       dur(cb_copy_start_[p], cb_copy_end_[p])});
    s.spans.push_back({"compute", "cast" + tag, rel(cb_cast_start_[p]),
                       dur(cb_cast_start_[p], cb_cast_end_[p])});
  }
}

}  // namespace

namespace step_detail {

void copy_back_range(Device& dev, const float* master, bf16* device_params, float* temp,
                     std::int64_t begin, std::int64_t end, std::int64_t chunk_elems,
                     std::int64_t first_piece, const CopyBackEvents& ev) {
  DeviceEvent* last_cast = nullptr;
  std::int64_t piece = first_piece;
  for (std::int64_t off = begin; off < end; off += chunk_elems, ++piece) {
    const std::int64_t len = std::min(chunk_elems, end - off);
    const std::int64_t p = piece;
    if (last_cast != nullptr) dev.queue_wait(Queue::h2d, *last_cast);
    dev.record((*ev.copy_start)[p], Queue::h2d);
    dev.copy_to_device(Queue::h2d, temp, master + off, static_cast<std::size_t>(len) * 4);
    dev.record((*ev.copy_end)[p], Queue::h2d);
    dev.queue_wait(Queue::compute, (*ev.copy_end)[p]);
    dev.record((*ev.cast_start)[p], Queue::compute);
    dev.cast_f32_to_bf16(temp, device_params + off, len, Queue::compute);
    dev.record((*ev.cast_end)[p], Queue::compute);
    last_cast = &(*ev.cast_end)[p];
  }
  if (last_cast != nullptr) dev.event_synchronize(*last_cast);
}

ArmResult run_arm_capture(const RunConfig& config, Arm arm, Device& device,
                          std::vector<float>* final_master) {
  if (config.schedule == Schedule::deepspeed) return run_deepspeed_arm(config, arm, device, final_master);
  return run_arm_with<ArmRunner>(config, arm, device, final_master);
}

void check_step_config(const RunConfig& c, const char* who) {
  if (c.batch <= 0 || c.seq <= 0 || c.chunk_elems <= 0 || c.sub_group_size <= 0 ||
      c.steps < 0 || c.warmup < 0) {
    throw UsageError(std::string(who) + ": batch, seq, chunk_elems and sub_group_size must be "
                     "> 0 and steps, warmup >= 0");
  }
}

std::vector<SubGroup> split_sub_groups(const RunConfig& c, std::int64_t params, std::int64_t* pieces) {
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

double probe_arm_memory(float* master, const float* grads, float* exp_avg, float* exp_avg_sq,
                        std::int64_t params, ThreadPool& pool) {
  const std::int64_t n = std::min<std::int64_t>(params, std::int64_t{1} << 26);
  const double gb_per_s = memory_probe_gb_per_s(master, grads, exp_avg, exp_avg_sq, n, pool);
  // The probe added grads into the Adam states; grads need not be zero (runtime-allocated host
  // memory is not first-touched), so the states start again from zero. The master is
  // initialised after this, and every gradient is written before Adam reads it.
  pool.parallel_for(n, [&](std::int64_t b, std::int64_t e) {
    std::memset(exp_avg + b, 0, static_cast<std::size_t>(e - b) * sizeof(float));
    std::memset(exp_avg_sq + b, 0, static_cast<std::size_t>(e - b) * sizeof(float));
  });
  return gb_per_s;
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

}  // namespace step_detail

ArmResult run_arm(const RunConfig& config, Arm arm, Device& device) {
  return step_detail::run_arm_capture(config, arm, device, nullptr);
}

}  // namespace zob
