// The child side: the probe (resolves --device) and one arm. Both write exactly one JSON
// document to the result fd; the parent reads it (see parent.cpp).
#include <unistd.h>

#include <time.h>

#include <fmt/format.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "driver/driver.hpp"
#include "driver/process.hpp"
#include "driver/ranks.hpp"
#include "driver/test_hooks.hpp"
#include "report/json_util.hpp"
#include "report/report.hpp"
#include "zob/errors.hpp"
#include "zob/model.hpp"
#include "zob/step.hpp"

namespace zob {

namespace {

// The reason's first words, from the error's kind ("" for an error of no known kind).
std::string failure_kind(const std::exception& e) {
  const auto* d = dynamic_cast<const DeviceError*>(&e);
  if (d == nullptr) return "";
  switch (d->kind()) {
    case DeviceErrorKind::unavailable: return "backend unavailable";
    case DeviceErrorKind::out_of_memory: return "out of memory";
    case DeviceErrorKind::registration_refused: return "host memory registration refused";
    case DeviceErrorKind::lock_refused: return "mlock refused";
    case DeviceErrorKind::runtime: return "device runtime error";
  }
  return "";
}

// --gpus all: the devices of the backend from --device-index on (the CPU device is one).
int count_devices(const std::string& backend, int first) {
  if (backend == to_string(DeviceKind::cpu)) return 1;
  int n = 1;
  while (n < 64) {
    try {
      create_device({backend, first + n});
    } catch (const std::exception&) {
      break;
    }
    ++n;
  }
  return n;
}

// Seconds since this process started (exec included): /proc/self/stat's starttime against
// CLOCK_BOOTTIME, both since boot. Clock-tick resolution (10 ms), fine for seconds of setup.
// nullopt when /proc is not there.
std::optional<double> process_age_seconds() {
  std::ifstream in("/proc/self/stat");
  std::string stat;
  if (!std::getline(in, stat)) return std::nullopt;
  const std::size_t paren = stat.rfind(')');  // the command name may hold spaces
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(paren + 2));
  std::string field;
  unsigned long long start_ticks = 0;
  for (int i = 3; i <= 22 && fields >> field; ++i) {  // field 3 is the state
    if (i == 22) start_ticks = std::stoull(field);
  }
  const long hz = ::sysconf(_SC_CLK_TCK);
  timespec now{};
  if (start_ticks == 0 || hz <= 0 || ::clock_gettime(CLOCK_BOOTTIME, &now) != 0) {
    return std::nullopt;
  }
  const double age = static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9 -
                     static_cast<double>(start_ticks) / static_cast<double>(hz);
  if (age < 0) return std::nullopt;
  return age;
}

}  // namespace

void set_arm_failure(ArmResult& r, const std::exception& e) {
  r.ok = false;
  const std::string kind = failure_kind(e);
  const std::optional<StepFailurePoint> at = step_failure_point();
  if (!at) {
    r.error = one_line(kind.empty() ? std::string(e.what()) : kind + ": " + e.what());
    return;
  }
  r.failed_step = at->step;
  r.failed_phase = to_string(at->phase);
  // A device fault in the middle of the steps: the setup had worked, so the device broke
  // while it ran (lost, an illegal address, an ECC error); the runtime's text says which.
  const bool device = dynamic_cast<const DeviceError*>(&e) != nullptr;
  r.error = one_line(
      (kind.empty() ? std::string("failed") : kind) + " in " + describe(*at) + ": " + e.what() +
      (device ? "; check the device (dmesg, nvidia-smi or xpu-smi) and run again" : ""));
}

int run_probe_child(const RunConfig& config, int result_fd) {
  nlohmann::json out;
  int code = 0;
  try {
    std::unique_ptr<Device> device;
    if (config.device == DeviceKind::automatic) {
      std::string notice;
      device = create_first_available_device(config.device_index, &notice);
      if (!notice.empty()) {
        std::fprintf(stderr, "zero3-offload-bench: notice: %s\n", one_line(notice).c_str());
      }
    } else {
      device = create_device({to_string(config.device), config.device_index});
    }
    out = {{"ok", true}, {"device_info", device->info()}};
    // Free memory with this process's context made, as an arm's will be: the pre-flight's
    // figure on a device another process shares (0: the backend cannot tell).
    out["device_free_bytes"] = test_hooks::probe_free_bytes(device->occupancy().free_bytes);
    if (config.gpus != 1) {
      // --gpus N / all: how many devices there are, and whether ranks can exchange their
      // memory (NCCL on CUDA) -- so the parent refuses before any arm starts.
      out["device_count"] = count_devices(device->info().backend, config.device_index);
      try {
        device->check_rank_collectives();
      } catch (const UsageError& e) {
        out["collectives_error"] = one_line(e.what());
        out["collectives_unavailable"] = false;
      } catch (const DeviceError& e) {
        out["collectives_error"] = one_line(e.what());
        out["collectives_unavailable"] = true;
      }
    }
  } catch (const DeviceError& e) {
    out = {{"ok", false},
           {"unavailable", e.kind() == DeviceErrorKind::unavailable},
           {"error", one_line(e.what())}};
    code = 1;
  } catch (const std::exception& e) {
    out = {{"ok", false}, {"unavailable", false}, {"error", one_line(e.what())}};
    code = 1;
  }
  write_all(result_fd, dump_json(out));
  return code;
}

int run_arm_child(const RunConfig& config, Arm arm, int result_fd) {
  const auto entered = std::chrono::steady_clock::now();
  const std::optional<double> age_at_entry = process_age_seconds();
  test_hooks::apply_child_fault(arm, result_fd);
  if (config.gpus > 1) return run_ranked_arm_child(config, arm, result_fd);  // driver/ranks.cpp
  ArmResult r;
  int code = 0;
  try {
    validate_run_config(config);
    auto device = test_hooks::fault_device(
        create_device({to_string(config.device), config.device_index}), arm);
    // Who else is on the device, before and after (the arm's own buffers are gone by then).
    const Device::Occupancy start = device->occupancy();
    r = run_arm(config, arm, *device);
    const Device::Occupancy end = device->occupancy();
    r.device_other_processes = std::max(start.other_processes, end.other_processes);
    r.device_free_bytes = start.free_bytes;
  } catch (const std::exception& e) {
    set_arm_failure(r, e);
    code = 1;
  }
  r.arm = arm;
  test_hooks::perturb_result(r);
  r.pid = static_cast<int>(::getpid());
  // Time to result: process start (exec, loading, device creation, setup, every step) to here.
  r.wall_s = age_at_entry.value_or(0.0) +
             std::chrono::duration<double>(std::chrono::steady_clock::now() - entered).count();
  if (!r.ok && r.error.empty()) {
    r.error = "the arm reported failure without a reason";
    code = 1;
  }
  write_all(result_fd, dump_json(nlohmann::json(r)));
  return code;
}

}  // namespace zob
