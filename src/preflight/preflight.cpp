#include "zob/preflight.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "zob/errors.hpp"

namespace zob {
namespace {

std::string gb(std::uint64_t bytes) {
  return fmt::format("{:.2f} GB", static_cast<double>(bytes) / 1e9);
}

bool arm_locks(Arm arm) { return arm == Arm::registered || arm == Arm::unregistered; }

}  // namespace

void preflight_check(const RunConfig& config, const MemoryPlan& plan, const HostEnvironment& host,
                     std::uint64_t device_total_bytes) {
  // Arms run one after another, so one arm's needs are what must fit.
  const std::uint64_t host_needed = plan.host_pinned_bytes + plan.host_pageable_bytes;
  if (host.mem_available > 0 && host_needed > host.mem_available) {
    throw UsageError(fmt::format(
        "pre-flight: an arm needs {} of host memory ({} pinned + {} Adam states) but MemAvailable "
        "is {}; use a smaller {} (or --skip-preflight if you know better)",
        gb(host_needed), gb(plan.host_pinned_bytes), gb(plan.host_pageable_bytes),
        gb(host.mem_available), config.model.decoder() ? "--model" : "--hidden/--layers/--vocab"));
  }
  const bool locks = std::any_of(config.arms.begin(), config.arms.end(), arm_locks);
  if (locks && !host.memlock_unlimited && !host.can_lock_without_limit &&
      plan.host_pinned_bytes > host.memlock_limit) {
    throw UsageError(fmt::format(
        "pre-flight: the registered/unregistered arms lock {} ({} bytes) but RLIMIT_MEMLOCK is {} "
        "bytes; raise it (ulimit -l unlimited, or memlock in /etc/security/limits.conf) or run "
        "only --arms pageable,hostalloc",
        gb(plan.host_pinned_bytes), plan.host_pinned_bytes, host.memlock_limit));
  }
  if (device_total_bytes > 0 && plan.device_bytes > device_total_bytes) {
    throw UsageError(fmt::format(
        "pre-flight: the step needs about {} of device memory but the device has {}; use a "
        "smaller model, batch or seq, or a smaller --chunk-elems",
        gb(plan.device_bytes), gb(device_total_bytes)));
  }
}

}  // namespace zob
