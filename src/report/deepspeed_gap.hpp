// What separates this tool's step from the one a DeepSpeed user sees, said in the output
// (docs/deepspeed.md, "Real architectures"): the host work a DeepSpeed step on transformers'
// model does that this step does not contain, and the user's own DeepSpeed step projected with
// the saving this run measured.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "report/verdict.hpp"
#include "zob/result.hpp"

namespace zob {

// Counts of the Python hooks DeepSpeed's ZeRO-3 runs per step on the Hugging Face version of a
// --model decoder: four hooks on every nn.Module that runs (13 per decoder layer — the layer,
// attention, q/k/v/o, MLP, gate/up/down, the activation, two norms — plus the causal LM, the
// model, the embedding, the final norm, the rotary embedding and lm_head), and a gradient hook
// on every parameter tensor (a tied table once). Measured beside DeepSpeed:
// results/h200/2026-12-02-deepspeed-account (319 and 371 hooked modules, 290 and 254 hooks).
struct FrameworkHooks {
  std::int64_t hooked_modules = 0;
  std::int64_t gradient_hooks = 0;
};
// nullopt for the synthetic model (its DeepSpeed counterpart is bench/deepspeed's own module).
std::optional<FrameworkHooks> deepspeed_hooks(const ModelShape& model);

// "not contained: ..." for a --model run (one line, no trailing newline); "" otherwise.
std::string not_contained_line(const RunConfig& config);
// The same as a stdout section ("" or the line and a newline).
std::string render_not_contained(const RunResult& run);
// DRIVERRESULT's "not_contained": null for the synthetic model.
nlohmann::ordered_json not_contained_json(const RunConfig& config);

// The user's DeepSpeed step (--deepspeed-step S, --deepspeed-arm) projected across the
// headline comparison: a step without registration minus the seconds this run saved, or a
// registered step plus them. nullopt when no step was given or the comparison is missing.
struct Projection {
  double user_step_s = 0;
  Arm user_arm = Arm::unregistered;  // as the run's arms: unregistered = pinned, not registered
  Arm projected_arm = Arm::registered;
  bool user_is_fast =
      false;           // the user's arm is the comparison's faster: the step gains the saving
  double saved_s = 0;  // this run's saving (median over rounds where there are)
  std::optional<double> saved_low, saved_high;
  double projected_s = 0;
  bool meaningful = true;  // false when the saving exceeds the user's step
};
// nullopt also when the run cannot project it (the user's arm did not run, the verdict does
// not hold); then `why_not`, if given, holds the reason and its fix.
std::optional<Projection> project_user_step(const RunResult& run, std::string* why_not = nullptr);
// "projection: ..." or "projection: none: <why>" with --deepspeed-step; "" without it.
std::string render_projection(const RunResult& run);
nlohmann::ordered_json projection_json(const RunResult& run);  // null without one

}  // namespace zob
