// The arms every report reads alike (arms.hpp).
#include "report/arms.hpp"

#include <cmath>

namespace zob {

const ArmResult* find_ok_arm(const RunResult& run, Arm arm) {
  for (const auto& a : run.arms) {
    if (a.arm == arm && a.ok) return &a;
  }
  return nullptr;
}

SpeedupArms speedup_arms(const RunConfig& config) {
  if (config.compat == Compat::v2) return {Arm::pageable, Arm::registered};
  return {Arm::unregistered, Arm::registered};
}

std::string arm_key(const RunConfig& config, Arm arm) {
  if (config.compat == Compat::v1) return to_string(arm);
  switch (arm) {
    case Arm::pageable: return "unpinned";
    case Arm::registered: return "pinned";
    case Arm::unregistered: return "pinned-unregistered";
    case Arm::hostalloc: break;
  }
  return to_string(arm);
}

std::string arm_label(const RunConfig& config, Arm arm) {
  if (config.compat == Compat::v2 && arm == Arm::registered && config.ablate_register) {
    return "pinned-registered";
  }
  return arm_key(config, arm);
}

std::optional<double> speedup(const RunResult& run) {
  const SpeedupArms pair = speedup_arms(run.config);
  const ArmResult* fast = find_ok_arm(run, pair.fast);
  const ArmResult* slow = find_ok_arm(run, pair.slow);
  if (!fast || !slow) return std::nullopt;
  if (!(fast->step_avg_s > 0) || !std::isfinite(slow->step_avg_s)) return std::nullopt;
  return slow->step_avg_s / fast->step_avg_s;
}

RunResult point_result(const RunResult& run, const SweepPoint& point) {
  RunResult r;
  r.config = run.config;
  r.config.chunk_elems = point.chunk_elems;
  r.config.sub_group_size = point.sub_group_size;
  r.config.offload_ratio = point.offload_ratio;
  r.arms = point.arms;
  // The rounds kept in the run are those of the first configuration (the top level's).
  if (run.sweep.empty() || &point == &run.sweep.front()) r.rounds = run.rounds;
  r.has_environment = run.has_environment;
  r.device_info = run.device_info;
  return r;
}

bool registration_applicable(const RunResult& run) {
  for (const auto& a : run.arms) {
    if (a.ok && a.device == to_string(DeviceKind::cpu)) return false;
  }
  return run.config.device != DeviceKind::cpu;
}

std::string not_applicable_warning(const RunResult& run) {
  if (registration_applicable(run) || run.arms.empty()) return "";
  return "registration does not apply on the CPU device (nothing is registered there): the arms' "
         "speedup is noise, not a result; run on an accelerator (--device cuda or xpu)";
}

}  // namespace zob
