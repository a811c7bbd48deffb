#include "report/report.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <map>

#include "report/arms.hpp"
#include "report/deepspeed_gap.hpp"
#include "report/deepspeed_settings.hpp"
#include "report/details.hpp"
#include "report/fit_report.hpp"
#include "report/json_util.hpp"
#include "report/verdict.hpp"
#include "zob/errors.hpp"
#include "zob/model.hpp"
#include "zob/settings.hpp"
#include "zob/step.hpp"

namespace zob {

namespace {

// Bit patterns, not ==: two NaN losses from the same computation are "equal" here, and a
// -0.0 vs 0.0 difference is a real difference in what the arms computed.

nlohmann::ordered_json arm_json(const RunResult& run, const ArmResult& r) {
  nlohmann::ordered_json j = arm_object<nlohmann::ordered_json>(r, ArmDocument::driver_result);
  add_arm_details(j, run, r);
  if (!r.ok) {
    j["error"] = r.error;
    // Where in the steps it failed; null when it failed outside them (setup, a crash).
    j["failed_step"] = r.failed_step > 0 ? nlohmann::ordered_json(r.failed_step) : nullptr;
    j["failed_phase"] = r.failed_phase.empty() ? nlohmann::ordered_json(nullptr)
                                               : nlohmann::ordered_json(r.failed_phase);
  }
  if (run.config.compat == Compat::v1) return j;
  // v2's arm objects open with pin_memory and register (null where nothing is pinned).
  const bool pinned = r.arm != Arm::pageable;
  nlohmann::ordered_json v2 = {
      {"pin_memory", pinned},
      {"register", pinned ? nlohmann::ordered_json(r.arm != Arm::unregistered)
                          : nlohmann::ordered_json(nullptr)}};
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "register") v2[it.key()] = it.value();
  }
  return v2;
}

// A sweep configuration's arm: every field but the per-step and per-round arrays and the
// ranks, and its phases' medians without their statistics.
nlohmann::ordered_json sweep_arm_json(const RunResult& run, const ArmResult& r) {
  nlohmann::ordered_json j = arm_json(run, r);
  for (const char* key : {"step_times_s", "losses", "rounds", "ranks"}) j.erase(key);
  for (auto& [name, p] : j.at("phases").items()) {
    p.erase("host_s_stats");
    p.erase("device_s_stats");
  }
  return j;
}

// The arms of one configuration; `v` accumulates over configurations.
void validate_arm_list(const std::vector<ArmResult>& arms, Validation& v) {
  const ArmResult* ref = nullptr;
  for (const auto& a : arms) {
    if (!a.ok) continue;
    ++v.compared_arms;
    if (ref == nullptr) {
      ref = &a;
      continue;
    }
    const std::string pair = fmt::format("{} vs {}", to_string(ref->arm), to_string(a.arm));
    if (v.losses_equal) {
      if (a.samples.size() != ref->samples.size()) {
        v.losses_equal = false;
        if (v.first_difference.empty()) {
          v.first_difference =
              fmt::format("step count differs: {} has {} steps, {} has {}", to_string(ref->arm),
                          ref->samples.size(), to_string(a.arm), a.samples.size());
        }
      } else {
        for (std::size_t i = 0; i < a.samples.size(); ++i) {
          if (!same_bits(a.samples[i].loss, ref->samples[i].loss)) {
            v.losses_equal = false;
            if (v.first_difference.empty()) {
              v.first_difference = fmt::format(
                  "loss of step {} ({}) differs: {}: {:.9g}, {}: {:.9g}", i + 1,
                  static_cast<int>(i) < ref->warmup ? "warmup" : "timed", to_string(ref->arm),
                  ref->samples[i].loss, to_string(a.arm), a.samples[i].loss);
            }
            break;
          }
        }
      }
    }
    if (v.checksums_equal && a.param_checksum != ref->param_checksum) {
      v.checksums_equal = false;
      if (v.first_difference.empty()) {
        v.first_difference = fmt::format("param_checksum differs ({}): {} vs {}", pair,
                                         ref->param_checksum, a.param_checksum);
      }
    }
  }
}

}  // namespace

Validation validate_arms(const RunResult& run) {
  Validation v;
  if (run.sweep.empty()) {
    validate_arm_list(run.arms, v);
  } else {
    for (const SweepPoint& point : run.sweep) {
      const std::string before = v.first_difference;
      validate_arm_list(point.arms, v);
      if (v.first_difference != before && before.empty()) {
        v.first_difference = point.label(ratio_shown(run.config)) + ": " + v.first_difference;
      }
    }
  }
  v.first_round_difference = first_round_difference(run);
  v.rounds_equal = v.first_round_difference.empty();
  if (v.first_difference.empty()) v.first_difference = v.first_round_difference;
  return v;
}

nlohmann::ordered_json workload_json(const RunConfig& c) {
  nlohmann::ordered_json w = nlohmann::ordered_json::object();
  for (const char* key : kWorkloadKeys) {
    const std::string_view k = key;
    // The derived keys (kWorkloadDerivedKeys); every other key is a setting's.
    if (k == "model") {
      w[key] = model_name(c.model);
    } else if (k == "architecture") {
      w[key] = model_architecture_json(c.model);
    } else if (k == "tokens_per_step") {
      w[key] = c.tokens_per_step();
    } else if (k == "params") {
      w[key] = parameter_count(c.model);
    } else if (k == "decoder") {  // --decoder resolved: which kernels ran, not what was asked
      const char* used = decoder_kernels_used(c);
      w[key] = used != nullptr ? nlohmann::json(used) : nlohmann::json(nullptr);
    } else {
      w[key] = setting_of_key(k).write(c);
    }
  }
  return w;
}

nlohmann::ordered_json device_ops_plan_json(const RunConfig& config) {
  const auto ops = planned_device_ops(config);
  if (!ops) return nullptr;
  const auto pair = [](const std::int64_t(&v)[2]) {
    return nlohmann::ordered_json::array({v[0], v[1]});
  };
  return {
      {"embedding", pair(ops->embedding)}, {"layer", pair(ops->layer)}, {"head", pair(ops->head)}};
}

nlohmann::ordered_json driver_result_json(const RunResult& run) {
  const RunConfig& c = run.config;
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  // The script's keys first, in its order: v1 its two arms then "speedup"; v2 "unpinned",
  // "pinned", "speedup", then "pinned-unregistered".
  const auto s = speedup(run);
  for (const auto& a : run.arms) {
    if (c.compat == Compat::v2 && a.arm == Arm::unregistered) continue;
    j[arm_key(c, a.arm)] = arm_json(run, a);
  }
  j["speedup"] = s ? finite_or_null(*s) : nlohmann::json(nullptr);
  for (const auto& a : run.arms) {
    if (c.compat == Compat::v2 && a.arm == Arm::unregistered)
      j[arm_key(c, a.arm)] = arm_json(run, a);
  }
  j["schema_version"] = kSchemaVersion;
  j["workload"] = workload_json(c);
  if (const auto ops = device_ops_plan_json(c); !ops.is_null()) j["device_ops_plan"] = ops;
  const Validation v = validate_arms(run);
  // An interrupted run validated only what ran: no "ok" for the arms that did not.
  bool all_ran = true;
  for (const auto& a : run.arms) all_ran = all_ran && a.ok;
  j["validation"] = {
      {"ok", run.interrupted.empty() || all_ran ? nlohmann::json(v.ok()) : nlohmann::json(nullptr)},
      {"checksums_equal", v.checksums_equal},
      {"losses_equal", v.losses_equal},
      {"rounds_equal", v.rounds_equal},
      {"compared_arms", v.compared_arms},
      {"first_difference",
       v.first_difference.empty() ? nlohmann::json(nullptr) : nlohmann::json(v.first_difference)}};
  // One entry per configuration (one in all when there is no sweep); the top-level arm keys
  // and speedup above are those of the first (compatibility).
  nlohmann::ordered_json sweep = nlohmann::ordered_json::array();
  const std::vector<SweepPoint> points =
      run.sweep.empty()
          ? std::vector<SweepPoint>{{c.chunk_elems, c.sub_group_size, run.arms, c.offload_ratio}}
          : run.sweep;
  for (const SweepPoint& point : points) {
    nlohmann::ordered_json e = {{"chunk_elems", point.chunk_elems},
                                {"sub_group_size", point.sub_group_size},
                                {"offload_ratio", point.offload_ratio}};
    const RunResult part = point_result(run, point);
    // Compact: the top-level arms hold every field of the first configuration; a sweep of
    // many configurations would otherwise repeat them all (16.7 KB for four). Without a sweep
    // the one entry names no arms at all: they are the top-level ones, and repeating them
    // doubled a two-arm DRIVERRESULT (~15 KB).
    if (!run.sweep.empty()) {
      for (const auto& a : point.arms) e[arm_key(c, a.arm)] = sweep_arm_json(part, a);
    }
    const auto ps = speedup(part);
    e["speedup"] = ps ? finite_or_null(*ps) : nlohmann::json(nullptr);
    sweep.push_back(std::move(e));
  }
  j["sweep"] = std::move(sweep);
  j["tool"] = {{"name", "zero3-offload-bench"}, {"version", run.tool_version}};
  j["host"] = {{"hostname", run.hostname}};
  j["started_utc"] = run.started_utc;
  j["interrupted"] =
      run.interrupted.empty() ? nlohmann::json(nullptr) : nlohmann::json(run.interrupted);
  add_run_details(j, run);
  j["registration_applicable"] = registration_applicable(run);
  j["occupancy_check"] = occupancy_check_json(run);
  j["verdicts"] = verdicts_json(run);
  j["settings"] = run.fit ? fit_settings_json(run) : settings_json(run);
  j["not_contained"] = not_contained_json(run.config);
  j["projection"] = run.fit ? nlohmann::ordered_json(nullptr) : projection_json(run);
  j["fit"] = fit_json(run);
  return j;
}

}  // namespace zob
