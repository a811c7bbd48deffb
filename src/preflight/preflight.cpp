#include "zob/preflight.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "zob/errors.hpp"

namespace zob {
namespace {

std::string gb(std::uint64_t bytes) {
  return fmt::format("{:.2f} GB", static_cast<double>(bytes) / 1e9);
}

// bytes in GB, or in bytes where `other` would print the same: "needs 1.00 GB but allows
// 1.00 GB" says nothing.
std::string gb_apart(std::uint64_t bytes, std::uint64_t other) {
  return gb(bytes) == gb(other) ? fmt::format("{} bytes", bytes) : gb(bytes);
}

bool arm_locks(Arm arm) { return arm == Arm::registered || arm == Arm::unregistered; }

// "an arm" or "each of the 4 ranks of an arm": whose figure a message gives.
std::string whose(const MemoryPlan& plan) {
  return plan.ranks > 1 ? fmt::format("each of the {} ranks of an arm", plan.ranks) : "an arm";
}

}  // namespace

std::uint64_t device_limit_bytes(const RunConfig& config, DeviceMemory device) {
  std::uint64_t limit = 0;
  for (const std::uint64_t b : {config.device_memory_bytes, device.total, device.free}) {
    if (b > 0) limit = limit == 0 ? b : std::min(limit, b);
  }
  return limit;
}

std::uint64_t host_ram_needed(const MemoryPlan& plan, DeviceMemory device) {
  if (!device.host_ram) return plan.host_node_bytes();
  // The planned (allocated) peak: the caching pool's reserved-but-unallocated bytes come on top
  // and are not counted (docs/running.md, "Pre-flight").
  return plan.host_node_bytes() + plan.device_bytes * static_cast<std::uint64_t>(plan.ranks);
}

namespace {

// Which bound device_limit_bytes took: "--device-memory allows 24.00 GB", "the device has
// 80.00 GB", "the device has 10.41 GB free (of 85.02 GB: other processes hold the rest, and
// the context a process makes)".
std::string device_limit_text(const RunConfig& config, DeviceMemory device, std::uint64_t limit,
                              std::uint64_t needed) {
  if (config.device_memory_bytes > 0 && limit == config.device_memory_bytes) {
    return "--device-memory allows " + gb_apart(limit, needed);
  }
  if (device.free > 0 && limit == device.free && device.free < device.total) {
    return fmt::format(
        "the device has {} free now (of {}: other processes and a process's own context hold "
        "the rest)",
        gb_apart(limit, needed), gb(device.total));
  }
  return "the device has " + gb_apart(limit, needed);
}

void check_host_memory(const RunConfig& config, const MemoryPlan& plan, const HostEnvironment& host,
                       DeviceMemory device) {
  // Arms run one after another, so one arm's needs are what must fit; its ranks run at once,
  // all on this node (plan.ranks of them), each a process of its own.
  const std::uint64_t host_needed = host_ram_needed(plan, device);
  const std::uint64_t device_share = host_needed - plan.host_node_bytes();
  if (host.mem_available == 0 || host_needed <= host.mem_available) return;
  const std::string device_part =
      device_share == 0 ? ""
                        : fmt::format(" + {} of device memory at its planned peak, the same RAM",
                                      gb(device_share));
  throw UsageError(fmt::format(
      "pre-flight: {} {} of host memory ({} pinned + {} Adam states{}{}) but MemAvailable "
      "is {}; use a smaller {}{} (or --skip-preflight if you know better)",
      plan.ranks > 1 ? fmt::format("an arm's {} ranks need", plan.ranks) : "an arm needs",
      gb(host_needed), gb(plan.host_pinned_bytes), gb(plan.host_pageable_bytes),
      plan.ranks > 1 ? " per rank" : "", device_part, gb(host.mem_available),
      config.model.decoder() ? "--model" : "--hidden/--layers/--vocab",
      device_share > 0 ? ", --batch or --seq" : ""));
}

}  // namespace

void preflight_check(const RunConfig& config, const MemoryPlan& plan, const HostEnvironment& host,
                     DeviceMemory device) {
  check_host_memory(config, plan, host, device);
  // RLIMIT_MEMLOCK is per process: each rank locks its own share.
  const bool locks = std::any_of(config.arms.begin(), config.arms.end(), arm_locks);
  if (locks && !host.memlock_unlimited && !host.can_lock_without_limit &&
      plan.host_pinned_bytes > host.memlock_limit) {
    throw UsageError(fmt::format(
        "pre-flight: the registered/unregistered arms lock {} ({} bytes) in {} but "
        "RLIMIT_MEMLOCK (per process) is {} bytes; raise it (ulimit -l unlimited, or memlock in "
        "/etc/security/limits.conf) or run only --arms pageable,hostalloc",
        gb(plan.host_pinned_bytes), plan.host_pinned_bytes,
        plan.ranks > 1 ? "each rank's process" : "the arm's process", host.memlock_limit));
  }
  const std::uint64_t limit = device_limit_bytes(config, device);
  if (limit > 0 && plan.device_bytes > limit) {
    throw UsageError(fmt::format(
        "pre-flight: {} needs {} of device memory at its peak but {}; use a smaller model, "
        "--batch or --seq{}",
        whose(plan), gb_apart(plan.device_bytes, limit),
        device_limit_text(config, device, limit, plan.device_bytes),
        std::string(config.loop == Loop::copy_back
                        ? ", or --offload-param (parameters fetched per module)"
                        : "") +
            (config.offload_ratio < 1.0
                 ? fmt::format(", or a higher --offload-ratio than {:g} (fewer sub-groups' "
                               "optimizer state on the device)",
                               config.offload_ratio)
                 : "")));
  }
}

}  // namespace zob
