#include "driver/dry_run.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "report/output_file.hpp"
#include "report/report.hpp"
#include "zob/errors.hpp"
#include "zob/exit_codes.hpp"
#include "zob/model.hpp"
#include "zob/preflight.hpp"
#include "zob/result.hpp"
#include "zob/step.hpp"

namespace zob {
namespace {

std::string gb(std::uint64_t bytes) {
  return fmt::format("{:.2f} GB", static_cast<double>(bytes) / 1e9);
}

// "embedding: 1 tensor, layer0..layer11: 4 tensors each, head: 1 tensor": runs of modules
// with the same tensor count folded into one entry.
std::string module_summary(const ModelLayout& layout) {
  std::string out;
  for (std::size_t i = 0; i < layout.modules.size();) {
    std::size_t j = i;
    const std::size_t n = layout.modules[i].tensors.size();
    while (j + 1 < layout.modules.size() && layout.modules[j + 1].tensors.size() == n &&
           layout.modules[j + 1].name.rfind("layer", 0) == 0 &&
           layout.modules[i].name.rfind("layer", 0) == 0) {
      ++j;
    }
    if (!out.empty()) out += ", ";
    out += j == i ? layout.modules[i].name : layout.modules[i].name + ".." + layout.modules[j].name;
    out += fmt::format(": {} tensor{}{}", n, n == 1 ? "" : "s", j == i ? "" : " each");
    if (!layout.modules[i].shared.empty()) out += " + the tied embedding table";
    i = j + 1;
  }
  return out;
}

bool locks(Arm arm) { return arm == Arm::registered || arm == Arm::unregistered; }

// "fp32 master 12.85 GB pinned, ..., bf16 per-parameter partitions 6.43 GB pinned (DeepSpeed
// never reads it after initialisation)".
std::string buffer_summary(const MemoryPlan& plan) {
  std::string out;
  for (const PlannedHostBuffer& b : plan.host_buffers) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{} {} {}{}", b.name, gb(b.bytes), b.pinned ? "pinned" : "pageable",
                       b.read_after_init ? "" : " (DeepSpeed never reads it after initialisation)");
  }
  return out;
}

std::string memlock_text(const HostEnvironment& host) {
  if (host.memlock_unlimited) return "unlimited";
  return gb(host.memlock_limit) + (host.can_lock_without_limit ? ", CAP_IPC_LOCK lifts it" : "");
}

nlohmann::ordered_json buffers_json(const MemoryPlan& plan) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const PlannedHostBuffer& b : plan.host_buffers) {
    out.push_back({{"name", b.name},
                   {"bytes", b.bytes},
                   {"pinned", b.pinned},
                   {"read_after_init", b.read_after_init}});
  }
  return out;
}

// "reduce bucket 1.00 GB, fetched parameters 2.06 GB, ...": what the device figure is made of.
std::string device_parts_text(const MemoryPlan& plan) {
  std::string out;
  for (const auto& [name, bytes] : plan.device_parts) {
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", name, gb(bytes));
  }
  return out.empty() ? "nothing" : out;
}

nlohmann::ordered_json device_parts_json(const MemoryPlan& plan) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& [name, bytes] : plan.device_parts) {
    out.push_back({{"name", name}, {"bytes", bytes}});
  }
  return out;
}

// One configuration of a sweep: its plan and whether the pre-flight check passes it.
struct PointPlan {
  RunConfig config;
  MemoryPlan plan;
  std::string refused;  // empty: fits
};

std::vector<PointPlan> plan_points(const RunConfig& config, const HostEnvironment& host,
                                   DeviceMemory device_memory) {
  std::vector<PointPlan> out;
  for (RunConfig& point : sweep_points(config)) {
    PointPlan p{point, plan_memory(point), {}};
    try {
      preflight_check(point, p.plan, host, device_memory);
    } catch (const UsageError& e) {
      const std::string why = e.what();
      p.refused = why.rfind("pre-flight: ", 0) == 0 ? why.substr(12) : why;
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::string point_label(const RunConfig& base, const RunConfig& point) {
  return SweepPoint{point.chunk_elems, point.sub_group_size, {}, point.offload_ratio}.label(
      ratio_shown(base));
}

// A sweep (or --offload-ratio below 1): what each configuration needs, so that a user can see
// which ratios fit without a GPU.
std::string points_text(const RunConfig& base, const std::vector<PointPlan>& points) {
  if (points.size() < 2 && !ratio_shown(base)) return "";
  std::string out = "per configuration (one rank; locked: the registered/unregistered arms):\n";
  for (const PointPlan& p : points) {
    out += fmt::format(
        "  {}: {} of {} sub-groups on the device, device {}, host locked {}, "
        "host mapped {}: {}\n",
        point_label(base, p.config), p.plan.device_sub_groups, p.plan.optimizer_sub_groups,
        gb(p.plan.device_bytes), gb(p.plan.host_pinned_bytes),
        gb(p.plan.host_pinned_bytes + p.plan.host_pageable_bytes),
        p.refused.empty() ? "fits" : "refused: " + p.refused);
  }
  return out;
}

nlohmann::ordered_json points_json(const std::vector<PointPlan>& points) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const PointPlan& p : points) {
    out.push_back({{"chunk_elems", p.config.chunk_elems},
                   {"sub_group_size", p.config.sub_group_size},
                   {"offload_ratio", p.config.offload_ratio},
                   {"sub_groups", p.plan.optimizer_sub_groups},
                   {"device_sub_groups", p.plan.device_sub_groups},
                   {"device_bytes", p.plan.device_bytes},
                   {"host_pinned_bytes", p.plan.host_pinned_bytes},
                   {"host_pageable_bytes", p.plan.host_pageable_bytes},
                   {"host_node_bytes", p.plan.host_node_bytes()},
                   {"fits", p.refused.empty()},
                   {"message", p.refused.empty() ? nlohmann::ordered_json(nullptr)
                                                 : nlohmann::ordered_json(p.refused)}});
  }
  return out;
}

}  // namespace

int run_dry_run(const RunConfig& config, const HostEnvironment& host, const DeviceInfo& device,
                std::uint64_t device_free_bytes) {
  const DeviceMemory room{device.total_memory_bytes, device_free_bytes, device.memory_is_host_ram};
  const ModelLayout layout = ModelLayout::build(config.model);
  const MemoryPlan plan = plan_memory(config);
  std::string verdict = "fits";
  bool ok = true;
  try {
    preflight_check(config, plan, host, room);
  } catch (const UsageError& e) {
    verdict = e.what();
    ok = false;
  }
  // The run refuses a sweep any of whose configurations does not fit (parent.cpp).
  const std::vector<PointPlan> points = plan_points(config, host, room);
  // --fit skips what does not fit: its search is refused only when nothing does.
  const bool some_fit = std::any_of(points.begin(), points.end(),
                                    [](const PointPlan& p) { return p.refused.empty(); });
  for (const PointPlan& p : points) {
    if (config.fit && some_fit) break;
    if (ok && !p.refused.empty()) {
      verdict = fmt::format("pre-flight: {} (at {})", p.refused, point_label(config, p.config));
      ok = false;
    }
  }
  const std::string reason = verdict.rfind("pre-flight: ", 0) == 0 ? verdict.substr(12) : verdict;
  // With --skip-preflight nothing would be refused: the run goes ahead, so say so and show what
  // the check would have said.
  const std::string shown = ok                      ? verdict
                            : config.skip_preflight ? "skipped by --skip-preflight (the check "
                                                      "would refuse: " +
                                                          reason + ")"
                                                    : "refused: " + reason;
  const std::string model = model_name(config.model);
  const std::uint64_t device_limit = device_limit_bytes(config, room);
  std::string out = "dry run: nothing allocated, no arm started\n";
  out += fmt::format("model: {}, {} params ({:.3f} B); {}\n", model, layout.total,
                     static_cast<double>(layout.total) / 1e9, module_summary(layout));
  out += fmt::format("step: {} loop, {} schedule, {} tokens/step, device {} ({}, {}{}){}\n",
                     to_string(config.loop), to_string(config.schedule), config.tokens(),
                     device.backend, device.name, gb(device.total_memory_bytes),
                     room.free > 0 ? fmt::format(", {} free now", gb(room.free)) : "",
                     config.device_memory_bytes > 0
                         ? fmt::format(", --device-memory {}", gb(config.device_memory_bytes))
                         : "");
  out += plan.ranks > 1
             ? fmt::format("per rank (each of {}, one process and one device each):\n", plan.ranks)
             : "per rank (one process, one device):\n";
  nlohmann::ordered_json arms = nlohmann::ordered_json::object();
  for (Arm a : config.arms) {
    const std::uint64_t locked = locks(a) ? plan.host_pinned_bytes : 0;
    const std::uint64_t runtime = a == Arm::hostalloc ? plan.hostalloc_pinned_bytes : 0;
    const std::uint64_t mapped =
        (a == Arm::hostalloc ? runtime : plan.host_pinned_bytes) + plan.host_pageable_bytes;
    out += fmt::format("arm {:<14} host locked {:>10}{}, host mapped {:>10}, device {:>10}\n",
                       arm_key(config, a), gb(locked),
                       a == Arm::registered ? " (registered)"
                       : a == Arm::hostalloc
                           ? fmt::format(" ({} pinned by the runtime, powers of two)", gb(runtime))
                           : "",
                       gb(mapped), gb(plan.device_bytes));
    arms[arm_key(config, a)] = {{"host_locked_bytes", locked},
                                {"host_registered_bytes", a == Arm::registered ? locked : 0},
                                {"host_runtime_pinned_bytes", runtime},
                                {"host_mapped_bytes", mapped},
                                {"device_bytes", plan.device_bytes}};
  }
  out += fmt::format("device at its peak: {}\n", device_parts_text(plan));
  if (plan.layer_activation_bytes > 0) {
    out += fmt::format(
        "saved activations per layer: {} B, from the layer's forward to its backward (a block of "
        "the caching pool, in the device peak)\n",
        plan.layer_activation_bytes);
  }
  out += fmt::format("host buffers: {}\n", buffer_summary(plan));
  out += fmt::format(
      "memlock per process: {} needed by the registered/unregistered arms (RLIMIT_MEMLOCK {})\n",
      gb(plan.host_pinned_bytes), memlock_text(host));
  out += fmt::format("per node: host {} for {} rank{} (MemAvailable {}), device limit {}\n",
                     gb(plan.host_node_bytes()), plan.ranks, plan.ranks == 1 ? "" : "s",
                     gb(host.mem_available), gb(device_limit));
  if (room.host_ram) {
    out += fmt::format(
        "the {} device's memory is the host's RAM: host + device peak {} checked against "
        "MemAvailable\n",
        device.backend, gb(host_ram_needed(plan, room)));
  }
  const DeepSpeedEstimate est = deepspeed_estimate(config.model, std::max(config.gpus, 1),
                                                   config.loop == Loop::offload_param);
  out += fmt::format(
      "DeepSpeed's estimator (estimate_zero3_model_states_mem_needs_all_cold, offload_param={}, "
      "offload_optimizer=cpu, zero_init=1): per CPU {}, per GPU {}; model states only: it leaves "
      "out activations, the reduce bucket, gradients in flight and the allocators' rounding\n",
      config.loop == Loop::offload_param ? "cpu" : "none", gb(est.cpu_bytes), gb(est.gpu_bytes));
  const auto ops = planned_device_ops(config);
  const nlohmann::ordered_json ops_json = device_ops_plan_json(config);
  if (ops) {
    out += fmt::format(
        "device ops per step, forward / backward (deepspeed's eager decoder): embedding {} / {}, "
        "each layer {} / {}, head {} / {}\n",
        ops->embedding[0], ops->embedding[1], ops->layer[0], ops->layer[1], ops->head[0],
        ops->head[1]);
  }
  out += points_text(config, points);
  out += fmt::format("pre-flight: {} (host MemAvailable {}, device {})\n", shown,
                     gb(host.mem_available), gb(device_limit));
  // A sweep whose first configuration fits: the fix is to keep the configurations that do.
  const bool base_fits = points.empty() || points.front().refused.empty();
  const std::string would_fit =
      ok          ? ""
      : base_fits ? "the configurations above marked fits (drop the others from the lists)"
                  : what_would_fit(config, host, room);
  if (!ok) out += fmt::format("what would fit: {}\n", would_fit);
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
  if (!config.json_path.empty()) {
    // DRIVERRESULT's workload (one writer, report.cpp) plus the module count of the plan.
    nlohmann::ordered_json dry_run_workload = workload_json(config);
    dry_run_workload["modules"] = layout.modules.size();
    nlohmann::ordered_json j = {
        {"dry_run", true},
        {"workload", dry_run_workload},
        {"plan",
         {{"ranks", plan.ranks},
          {"host_pinned_bytes", plan.host_pinned_bytes},
          {"host_pageable_bytes", plan.host_pageable_bytes},
          {"host_node_bytes", plan.host_node_bytes()},
          {"device_bytes", plan.device_bytes},
          {"device_parts", device_parts_json(plan)},
          {"device_limit_bytes", device_limit},
          {"device_free_bytes", room.free},
          {"layer_activation_bytes", plan.layer_activation_bytes},
          {"host_buffers", buffers_json(plan)},
          {"arms", arms},
          {"device_ops", ops_json},
          {"configurations", points_json(points)}}},
        {"preflight",
         {{"ok", ok},
          {"skipped", config.skip_preflight},
          {"message", ok ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(verdict)},
          {"would_fit", ok ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(would_fit)}}},
        {"deepspeed_estimate",
         {{"largest_layer_params", est.largest_layer_params},
          {"cpu_bytes", est.cpu_bytes},
          {"gpu_bytes", est.gpu_bytes}}}};
    write_output_file(config.json_path, j.dump(2) + "\n");
    std::fprintf(stderr, "zero3-offload-bench: wrote the dry run's plan to %s\n",
                 config.json_path.c_str());
  }
  // --skip-preflight: the run itself would go ahead, so the dry run shows the verdict and
  // succeeds (a plan can be asked for any model on any host).
  if (!ok && config.skip_preflight) return 0;
  if (!ok) std::fprintf(stderr, "zero3-offload-bench: error: %s\n", verdict.c_str());
  return ok ? 0 : exit_code::usage;
}

}  // namespace zob
