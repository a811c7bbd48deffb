#include "report/deepspeed_settings.hpp"

#include <fmt/format.h>

#include "report/arms.hpp"
#include "report/details.hpp"
#include "report/verdict.hpp"

namespace zob {

namespace {

// The DeepSpeed release this project measured the native backend's registration with
// (results/h200/2026-12-01-deepspeed-reference: DS_PIN_MEMORY_BACKEND=native with
// DS_PIN_MEMORY_REGISTER_DEVICE=1 / 0); registration came with deepspeedai/DeepSpeed#8283.
constexpr const char* kDeepSpeedVersion = "0.19.8";

// What is known about XPU upstream (December 2026): the registration hook exists for CUDA
// (and NPU) only; the XPU request is deepspeedai/DeepSpeed#8315 (open), its attempt #8322 was
// closed unmerged, and PyTorch's XPU host registration (pytorch/pytorch#195818) is not merged.
constexpr const char* kXpuRegistered =
    "no DeepSpeed setting registers host memory on xpu yet: its native backend registers on CUDA "
    "only, and DS_PIN_MEMORY_REGISTER_DEVICE=1 leaves the buffers mlock-only there without a "
    "word (deepspeedai/DeepSpeed#8315, open). Nearest today: DeepSpeed's default torch backend "
    "with pin_memory true, torch's own pinned host allocation, which this tool's hostalloc arm "
    "stands for (--arms registered,hostalloc compares them)";

// The first verdict is the headline pair (verdicts() puts it first); the winner is its faster
// arm by the median over rounds where there is one, else by the averages.
const Verdict* headline(const std::vector<Verdict>& vs) { return vs.empty() ? nullptr : &vs[0]; }

Arm winner_of(const Verdict& v) {
  const double shown = v.median ? *v.median : v.ratio;
  return shown >= 1.0 ? v.fast : v.slow;
}

const ArmResult* arm_result(const RunResult& run, Arm arm) {
  for (const auto& a : run.arms) {
    if (a.arm == arm) return &a;
  }
  return nullptr;
}

std::vector<std::string> config_keys(const RunConfig& c) {
  std::vector<std::string> keys{"zero_optimization.offload_optimizer.pin_memory"};
  if (c.loop == Loop::offload_param) keys.push_back("zero_optimization.offload_param.pin_memory");
  return keys;
}

// --offload-ratio below 1: the run kept part of the optimizer on the device, and DeepSpeed
// does so only when told (its default ratio is 1).
constexpr const char* kRatioKey = "zero_optimization.offload_optimizer.ratio";
bool keeps_optimizer_on_device(const RunConfig& c) {
  return c.schedule == Schedule::deepspeed && c.offload_ratio != 1.0;
}

}  // namespace

std::uint64_t memlock_per_process(const ArmResult& a) {
  const auto ranks = static_cast<std::uint64_t>(a.gpus > 1 ? a.gpus : 1);
  return (a.locked_bytes + ranks - 1) / ranks;
}

std::vector<std::string> settings_lines(const RunConfig& c, const ArmSettings& s) {
  std::vector<std::string> out;
  const std::string arm = arm_key(c, s.arm);
  if (!s.deepspeed_has_it) {
    out.push_back(fmt::format("the {} arm won on {}; {}", arm, s.device, s.note));
    return out;
  }
  out.push_back(fmt::format("to get the {} arm in DeepSpeed ({} or later, {}):", arm,
                            kDeepSpeedVersion, s.device));
  if (!s.env.empty()) {
    std::string env;
    for (const auto& [name, value] : s.env) env += fmt::format(" {}={}", name, value);
    out.push_back("  export" + env);
  }
  std::string config;
  for (const std::string& key : config_keys(c)) {
    config += fmt::format("{}{}: {}", config.empty() ? "" : ", ", key, s.pin_memory);
  }
  if (keeps_optimizer_on_device(c)) {
    config += fmt::format(", {}: {}", kRatioKey, fmt::format("{}", c.offload_ratio));
  }
  out.push_back("  ds_config " + config);
  if (s.memlock_bytes > 0) {
    out.push_back(fmt::format(
        "  memlock: {} bytes per process locked: ulimit -l {} (KiB) or unlimited; systemd "
        "LimitMEMLOCK={}; docker/podman run --ulimit memlock={}:{}",
        s.memlock_bytes, (s.memlock_bytes + 1023) / 1024, s.memlock_bytes, s.memlock_bytes,
        s.memlock_bytes));
  } else {
    out.push_back("  memlock: nothing to raise (this arm mlocks nothing itself)");
  }
  if (!s.note.empty()) out.push_back("  note: " + s.note);
  return out;
}

namespace {

std::vector<std::string> run_lines(const RunResult& run, ArmSettings* settings) {
  const std::vector<Verdict> vs = verdicts(run);
  const Verdict* v = headline(vs);
  if (v == nullptr) return {};
  // Advice only when the verdict holds: otherwise one line saying why not.
  if (const std::string why = advice_withheld(run, *v); !why.empty()) {
    return {"none: " + why + " (no DeepSpeed setting follows from this run)"};
  }
  const Arm won = winner_of(*v);
  const ArmResult* a = arm_result(run, won);
  const std::string device =
      a != nullptr && !a->device.empty() ? a->device : to_string(run.config.device);
  *settings = deepspeed_settings(won, device, a != nullptr ? memlock_per_process(*a) : 0);
  return settings_lines(run.config, *settings);
}

}  // namespace

ArmSettings deepspeed_settings(Arm arm, const std::string& device, std::uint64_t memlock_bytes) {
  ArmSettings s;
  s.arm = arm;
  s.device = device;
  s.memlock_bytes = memlock_bytes;
  const bool xpu = device == to_string(DeviceKind::xpu);
  switch (arm) {
    case Arm::registered:
      if (xpu) {
        s.deepspeed_has_it = false;
        s.note = kXpuRegistered;
        s.memlock_bytes = 0;
        break;
      }
      s.env = {{"DS_PIN_MEMORY_BACKEND", "native"}, {"DS_PIN_MEMORY_REGISTER_DEVICE", "1"}};
      break;
    case Arm::unregistered:
      s.env = {{"DS_PIN_MEMORY_BACKEND", "native"}};
      if (xpu) {
        s.note = "on xpu the native backend never registers, so it is this arm as it stands";
      } else {
        s.env.emplace_back("DS_PIN_MEMORY_REGISTER_DEVICE", "0");
      }
      break;
    case Arm::pageable:
      s.pin_memory = false;
      s.memlock_bytes = 0;
      break;
    case Arm::hostalloc:
      // DeepSpeed's default backend pins through torch's pin_memory(), the runtime's own
      // pinned allocation: what this arm measures with cudaMallocHost / zeMemAllocHost.
      s.env = {{"DS_PIN_MEMORY_BACKEND", "torch"}};
      s.memlock_bytes = 0;
      s.note = "torch (DeepSpeed's default backend) pins through the runtime's own allocation";
      break;
  }
  return s;
}

std::string render_settings_lines(const RunResult& run) {
  ArmSettings s;
  std::string out;
  for (const std::string& line : run_lines(run, &s)) out += "settings: " + line + "\n";
  return out;
}

nlohmann::ordered_json settings_json(const RunResult& run) {
  ArmSettings s;
  s.deepspeed_has_it = false;
  const std::vector<std::string> lines = run_lines(run, &s);
  if (lines.empty()) return nullptr;
  return settings_object(run.config, s, lines);
}

nlohmann::ordered_json settings_object(const RunConfig& c, const ArmSettings& s,
                                       const std::vector<std::string>& lines) {
  const bool applicable = !s.device.empty();
  nlohmann::ordered_json env = nlohmann::ordered_json::object();
  for (const auto& [name, value] : s.env) env[name] = value;
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (s.deepspeed_has_it) {
    for (const std::string& key : config_keys(c)) config[key] = s.pin_memory;
    if (keeps_optimizer_on_device(c)) config[kRatioKey] = c.offload_ratio;
  }
  const auto null_unless = [](bool cond, nlohmann::ordered_json v) {
    return cond ? std::move(v) : nlohmann::ordered_json(nullptr);
  };
  return {{"arm", null_unless(applicable, arm_key(c, s.arm))},
          {"device", applicable ? s.device : to_string(c.device)},
          {"deepspeed_has_it", s.deepspeed_has_it},
          {"deepspeed_version", null_unless(s.deepspeed_has_it, kDeepSpeedVersion)},
          {"env", env},
          {"ds_config", config},
          {"memlock_bytes", s.memlock_bytes},
          {"ulimit_l_kib", null_unless(s.memlock_bytes > 0, (s.memlock_bytes + 1023) / 1024)},
          {"note", null_unless(!s.note.empty(), s.note)},
          {"lines", lines}};
}

}  // namespace zob
