// The settings to act on a run (issue 26): for the arm that won the headline comparison, what a
// DeepSpeed user sets to get the same kind of host memory (pin backend, registration variable,
// ds_config pin_memory, the memlock limit for the bytes this plan locks), and on xpu what
// DeepSpeed offers there today. Printed after the verdict ("settings:" lines) and listed in
// DRIVERRESULT ("settings"), so that a verdict comes with what to do about it.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "zob/result.hpp"

namespace zob {

// What one arm on one device means in DeepSpeed's terms.
struct ArmSettings {
  Arm arm = Arm::registered;
  std::string device;            // "cuda" / "xpu"
  bool deepspeed_has_it = true;  // false: no DeepSpeed setting gives this arm on this device
  std::vector<std::pair<std::string, std::string>> env;  // environment variables to export
  bool pin_memory = true;                                // ds_config offload_*.pin_memory
  std::uint64_t memlock_bytes = 0;  // mlocked per process (0: nothing to raise)
  std::string note;                 // what is known beyond the settings, or ""
};

// The settings for `arm` on `device` ("cuda" or "xpu"); memlock_bytes as given.
ArmSettings deepspeed_settings(Arm arm, const std::string& device, std::uint64_t memlock_bytes);

// Bytes one process of the arm locked: a run's ranks each lock their share of the arm's sum.
std::uint64_t memlock_per_process(const ArmResult& a);
// The lines, and DRIVERRESULT's object, for settings `s` under config `c` (its loop and
// offload ratio give the ds_config keys): the headline winner's below, and --fit's winner.
std::vector<std::string> settings_lines(const RunConfig& c, const ArmSettings& s);
nlohmann::ordered_json settings_object(const RunConfig& c, const ArmSettings& s,
                                       const std::vector<std::string>& lines);

// The "settings:" lines for the arm that won the run's headline comparison; "" when no
// comparison completed. On the CPU device one line says there is nothing to set.
std::string render_settings_lines(const RunResult& run);
// DRIVERRESULT's "settings": the same as an object (null when no comparison completed).
nlohmann::ordered_json settings_json(const RunResult& run);

}  // namespace zob
