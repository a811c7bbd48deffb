#include "step/arm_result_fill.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cstdio>
#include <optional>
#include <utility>

#include "zob/errors.hpp"
#include "zob/model.hpp"
#include "zob/step.hpp"

namespace zob {

ArmResult workload_result(const RunConfig& config, Arm arm, const DeviceInfo& device) {
  ArmResult r;
  r.arm = arm;
  r.device = device.backend;
  r.device_info = device;
  r.model = model_name(config.model);
  r.params = parameter_count(config.model);
  r.params_b = params_billions(r.params);
  r.batch = config.batch;
  r.seq = config.seq;
  r.tokens_per_step = config.tokens_per_step();
  r.steps = config.steps;
  r.warmup = config.warmup;
  r.loop = to_string(config.loop);
  r.schedule = to_string(config.schedule);
  r.registration = "none";
  return r;
}

namespace {
// One arm per process (the driver's children), so one slot per process.
std::optional<StepFailurePoint> g_failure_point;
}  // namespace

std::optional<StepFailurePoint> step_failure_point() { return g_failure_point; }

std::string describe(const StepFailurePoint& at) {
  return fmt::format("step {} of {} ({}), phase {}", at.step, at.steps,
                     at.timed ? "timed" : "warmup", to_string(at.phase));
}

namespace step_detail {

namespace {

// What the driver says of one buffer, in the arm's error.
std::string buffer_text(const HostBuffer& b) {
  return fmt::format("{} ({} bytes at {})", b.name(), b.size(), b.data());
}

}  // namespace

std::string check_driver_registration(Arm arm, const Device& device,
                                      const std::vector<const HostBuffer*>& buffers) {
  if (!device.registration_applicable()) return "not-applicable";
  const std::string backend = device.info().backend;
  for (const HostBuffer* b : buffers) {
    if (b == nullptr || b->data() == nullptr) continue;
    // The runtime's own allocation (hostalloc) is page-locked by the runtime, not ours to judge.
    if (b->mode() == HostMemoryMode::device_host) continue;
    const bool should = b->mode() == HostMemoryMode::registered;
    if (device.is_registered(b->data()) == should) continue;
    if (should) {
      throw DeviceError(
          DeviceErrorKind::registration_refused,
          fmt::format("{}: the driver does not report {} of arm {} as registered host memory, "
                      "although its registration returned success: the arm would time "
                      "unregistered copies; check the driver, or run --arms "
                      "unregistered,pageable to measure without registration",
                      backend, buffer_text(*b), to_string(arm)));
    }
    throw DeviceError(
        DeviceErrorKind::runtime,
        fmt::format("{}: the driver reports {} of arm {} as registered host memory, which this "
                    "arm never registers ({} memory): the arm would time registered copies "
                    "under another name; nothing may register it behind the arm's back",
                    backend, buffer_text(*b), to_string(arm), to_string(b->mode())));
  }
  switch (pinned_mode_for(arm)) {
    case HostMemoryMode::registered: return "all";
    case HostMemoryMode::device_host: return "not-applicable";
    default: return "none";
  }
}

ArmResult arm_result_after_setup(const RunConfig& config, Arm arm, const Device& device,
                                 const ArmSetup& setup) {
  ArmResult r = workload_result(config, arm, device.info());
  r.adam_threads = setup.adam_threads;
  // The arm's own buffers are all allocated by now, so the growth of the current counters is
  // this arm's peak even when an earlier arm in the same process raised the global peaks.
  r.locked_bytes = setup.after.locked_bytes - setup.before.locked_bytes;
  r.registered_bytes = setup.after.registered_bytes - setup.before.registered_bytes;
  r.register_s = setup.register_s;
  if (pinned_mode_for(arm) == HostMemoryMode::device_host) {
    // The runtime's allocation is pinned by the runtime: neither mlock nor a registration of
    // ours, but page-locked all the same (on the CPU device it is plain memory).
    const bool pinned = device.registration_applicable();
    r.registration = pinned ? "runtime-pinned" : "not-applicable";
    r.runtime_pinned_bytes =
        pinned ? setup.after.runtime_pinned_bytes - setup.before.runtime_pinned_bytes : 0;
  }
  if (pinned_mode_for(arm) == HostMemoryMode::registered) {
    const std::string& method = setup.master->registration_method();
    r.registration = method.empty() ? "not-applicable" : method;
  }
  r.registered_at_driver = check_driver_registration(arm, device, setup.buffers);
  // Asked of the driver just now, buffer by buffer: not the registration call's own answer.
  r.registration_verified = r.registered_at_driver == "all";
  r.setup_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - setup.started).count();
  return r;
}

void run_timed_steps(ArmResult& r, const RunConfig& config, const std::string& label,
                     const Phase& phase, const std::function<StepSample(int)>& run_step) {
  const int total_steps = config.warmup + config.steps;
  double sum = 0, best = 0;
  for (int i = 0; i < total_steps; ++i) {
    const bool timed = i >= config.warmup;
    StepSample s;
    try {
      s = run_step(i + 1);
    } catch (...) {
      g_failure_point = StepFailurePoint{i + 1, total_steps, timed, phase};
      throw;
    }
    // From the first step on, the time this arm has left: the steps to come at the last one's
    // time (a long CPU run is not silent about how long it takes).
    const int left = total_steps - (i + 1);
    const std::string eta = left > 0
                                ? fmt::format("  (about {:.1f} s left in this arm: {} more step{})",
                                              left * s.wall_s, left, left == 1 ? "" : "s")
                                : std::string();
    std::fprintf(stderr, "[%s] step %d/%d (%s): %.4f s  loss %.3e%s\n", label.c_str(), i + 1,
                 total_steps, timed ? "timed" : "warmup", s.wall_s, static_cast<double>(s.loss),
                 eta.c_str());
    if (timed) {
      sum += s.wall_s;
      best = (i == config.warmup) ? s.wall_s : std::min(best, s.wall_s);
    }
    r.samples.push_back(std::move(s));
  }
  if (config.steps > 0) {
    r.step_avg_s = sum / config.steps;
    r.step_min_s = best;
  }
}

void finish_arm_result(ArmResult& r, const Device& device, const float* master,
                       std::int64_t count) {
  r.gpu_peak_gb = static_cast<double>(device.memory_peak()) / 1e9;
  r.param_checksum = checksum_hex(master, count);
  r.ok = true;
}

}  // namespace step_detail
}  // namespace zob
