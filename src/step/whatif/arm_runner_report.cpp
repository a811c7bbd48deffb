// The phases and the timeline of one ArmRunner step (arm_runner.hpp), read from its device
// events once the step's final wait has returned.
#include <fmt/format.h>
#include <algorithm>
#include <string>

#include "step/step_internal.hpp"
#include "step/whatif/arm_runner.hpp"
#include "zob/step.hpp"

namespace zob::step_detail {

// The phases every loop has (forward, backward, gradient offload and with N > 1 the
// reduce-scatter, Adam) and their timeline.
void ArmRunner::report_compute(StepSample& s, const StepTimes& times) {
  const std::int64_t M = modules();
  const std::int64_t S = shards_.total;
  const auto Su = static_cast<std::uint64_t>(S);
  const auto N = static_cast<std::uint64_t>(ranks());
  s.set_phase(Phase::forward, times.forward, dur(task_start_[0], task_end_[M - 1]), 0,
              layout_.total);
  s.set_phase(Phase::backward, times.backward, dur(task_start_[2 * M - 1], task_end_[M]), 0,
              layout_.total);
  PhaseSample& go = s.phase(Phase::grad_offload);
  go = PhaseSample{0, times.grad_wait, 4 * Su, S};
  double reduce_scatter = 0;
  for (std::int64_t j = 0; j < M; ++j) {
    const std::string& name = module(j).name;
    // N = 1: the cast and the copy; N > 1: the copy (the reduce-scatter is its own phase).
    const double d = dur(sharded() ? d2h_copy_start_[j] : d2h_start_[j], d2h_end_[j]);
    go.device_s += d;
    reduce_scatter += dur(d2h_start_[j], d2h_copy_start_[j]);
    link_.d2h_s += dur(d2h_copy_start_[j], d2h_end_[j]);
    link_.compute_s += dur(task_start_[j], task_end_[j]) +
                       dur(task_start_[M + j], task_end_[M + j]) -
                       dur(grad_ready_[j], hook_done_[j]);
    if (sharded()) {
      s.spans.push_back({"d2h", "reduce_scatter:" + name, rel(d2h_start_[j]),
                         dur(d2h_start_[j], d2h_copy_start_[j])});
    }
    s.spans.push_back(
        {"d2h", "grad:" + name, rel(sharded() ? d2h_copy_start_[j] : d2h_start_[j]), d});
    s.spans.push_back(
        {"compute", name + ".fwd", rel(task_start_[j]), dur(task_start_[j], task_end_[j])});
    s.spans.push_back({"compute", name + ".bwd", rel(task_start_[M + j]),
                       dur(task_start_[M + j], task_end_[M + j])});
  }
  // The serial part (StepBound::serial_s): the forward's kernels and the first backward
  // module's (the head), without the hook's wait for its gradients' copy.
  for (std::int64_t j = 0; j < M; ++j) link_.serial_s += dur(task_start_[j], task_end_[j]);
  link_.serial_s += dur(task_start_[2 * M - 1], task_end_[2 * M - 1]) -
                    dur(grad_ready_[M - 1], hook_done_[M - 1]);
  if (sharded()) {
    // Each rank sends N - 1 of its N bf16 pieces of every module's padded gradient.
    s.set_phase(Phase::reduce_scatter, 0, reduce_scatter, 2 * Su * (N - 1), S);
  }
  // Adam is fused with the host cast (adam_step_cast): one pass that also writes the bf16
  // (2 B/param more), reported as such; no host_cast phase, no device cast.
  s.set_phase(Phase::adam_cast, times.adam, -1, 30 * Su, S);
}

// The fetched modules (their spans were pushed when issued): the host-to-device copy of the
// shard (offload_param) and the all-gather (N > 1).
void ArmRunner::report_fetches(StepSample& s) {
  const auto N = static_cast<std::uint64_t>(ranks());
  double h2d = 0, gather = 0, forward_h2d = 0;
  std::int64_t fetched = 0, gathered = 0, forward_fetched = 0;
  std::int64_t f = 0;
  for (TraceSpan& span : s.spans) {
    if (span.track != "h2d" || f >= fetches_) continue;
    const std::int64_t j = fetch_module_[static_cast<std::size_t>(f)];
    const double copy = dur(fetch_start_[f], fetch_gather_[f]);
    const double all_gather = dur(fetch_gather_[f], fetch_end_[f]);
    span.start_s = rel(fetch_start_[f]);
    span.duration_s = copy + all_gather;
    h2d += copy;
    gather += all_gather;
    const std::int64_t before = fetched;
    if (sharded()) {  // with a tied head's table
      const RankFetch rf = rank_fetch(layout_, shards_, j);
      fetched += rf.shard;
      gathered += rf.gathered;
    } else {
      fetched += module(j).fetch_count();
    }
    if (f < modules()) {  // the forward's fetches: 0 .. M-1, the backward's after them
      forward_h2d += copy;
      forward_fetched += fetched - before;
    }
    ++f;
  }
  if (offload()) {
    link_.h2d_s += h2d;
    // The forward waits for its fetches, and they read the bf16 Adam wrote last step.
    link_.serial_s = std::max(link_.serial_s, forward_h2d);
    link_.serial_host_bytes = 2.0 * static_cast<double>(forward_fetched);
    s.set_phase(Phase::param_fetch, sharded() ? 0 : fetch_host_s_, h2d,
                2 * static_cast<std::uint64_t>(fetched), fetched);
  }
  if (sharded()) {
    // The host time of a fetch is its enqueueing; N - 1 of every N gathered pieces arrive.
    const auto g = static_cast<std::uint64_t>(gathered);
    s.set_phase(Phase::all_gather, fetch_host_s_, gather, 2 * g * (N - 1) / N, gathered);
  }
}

// The copy-back loop: each piece's copy of the bf16 parameters (2 B/param).
void ArmRunner::report_copy_back(StepSample& s, const StepTimes& times) {
  const std::int64_t S = shards_.total;
  PhaseSample& cb = s.phase(Phase::copy_back);
  cb = PhaseSample{0, times.copy_back, 2 * static_cast<std::uint64_t>(S), S};
  for (std::int64_t p = 0; p < pieces_; ++p) {
    const double d = dur(cb_copy_start_[p], cb_copy_end_[p]);
    cb.device_s += d;
    link_.h2d_s += d;
    s.spans.push_back(
        {"h2d", to_string(Phase::copy_back) + fmt::format("[{}]", p), rel(cb_copy_start_[p]), d});
  }
}

}  // namespace zob::step_detail
