#include "report/deepspeed_gap.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "report/arms.hpp"
#include "report/json_util.hpp"
#include "zob/model.hpp"

namespace zob {

namespace {

// nn.Modules of a Hugging Face decoder layer that run in forward (see the header).
constexpr std::int64_t kModulesPerLayer = 13;
// Causal LM, model, embed_tokens, final norm, rotary embedding, lm_head.
constexpr std::int64_t kModulesOutsideLayers = 6;

constexpr const char* kAssumes =
    "the host work this tool does not contain (DeepSpeed's Python, PyTorch's per-operator "
    "dispatch) is the same with and without registration; on the models measured DeepSpeed "
    "saved more than this tool (docs/deepspeed.md), so read it as the least registration gives";

}  // namespace

std::optional<FrameworkHooks> deepspeed_hooks(const ModelShape& model) {
  if (!model.decoder()) return std::nullopt;
  FrameworkHooks h;
  h.hooked_modules = kModulesPerLayer * model.layers + kModulesOutsideLayers;
  for (const ModuleSlice& m : ModelLayout::build(model).modules) {
    h.gradient_hooks += static_cast<std::int64_t>(m.tensors.size());
  }
  return h;
}

std::string not_contained_line(const RunConfig& config) {
  const auto h = deepspeed_hooks(config.model);
  if (!h) return "";
  return fmt::format(
      "not contained: DeepSpeed's Python and PyTorch's eager dispatch, which a DeepSpeed step on "
      "this architecture adds to its host time (4 hooks on each of {} modules, {} gradient "
      "hooks, per step); where each module has little GPU work they lengthen DeepSpeed's step "
      "and lower its speedup (docs/deepspeed.md, \"Real architectures\")",
      h->hooked_modules, h->gradient_hooks);
}

std::string render_not_contained(const RunResult& run) {
  const std::string line = not_contained_line(run.config);
  return line.empty() ? line : line + "\n";
}

nlohmann::ordered_json not_contained_json(const RunConfig& config) {
  const auto h = deepspeed_hooks(config.model);
  if (!h) return nullptr;
  return {{"what", "DeepSpeed's Python hooks and coordinator, PyTorch's eager dispatch"},
          {"deepspeed_hooked_modules", h->hooked_modules},
          {"deepspeed_gradient_hooks", h->gradient_hooks},
          {"docs", "docs/deepspeed.md#real-architectures---model"}};
}

namespace {

// The comparison that holds the user's arm: the headline pair when it is one of its arms, else
// the user's arm against registered; nullptr when the user's arm is in none (it did not run,
// or did not complete).
const Verdict* comparison_of(const std::vector<Verdict>& all, Arm user) {
  for (const Verdict& v : all) {
    if (v.slow == user || v.fast == user) return &v;
  }
  return nullptr;
}

std::string arms_completed(const RunResult& run) {
  std::string out;
  for (const ArmResult& a : run.arms) {
    if (a.ok) out += (out.empty() ? "" : ", ") + arm_key(run.config, a.arm);
  }
  return out.empty() ? "none" : out;
}

}  // namespace

std::optional<Projection> project_user_step(const RunResult& run, std::string* why_not) {
  const RunConfig& c = run.config;
  if (!(c.deepspeed_step_s > 0)) return std::nullopt;
  const auto refuse = [&](std::string why) {
    if (why_not != nullptr) *why_not = std::move(why);
    return std::nullopt;
  };
  const auto all = verdicts(run);
  if (all.empty()) return refuse("no two arms completed, so there is no saving to project");
  // Only from arms that ran: the user's arm must be one side of a comparison.
  const Verdict* found = comparison_of(all, c.deepspeed_arm);
  if (found == nullptr) {
    const std::string fix =
        c.compat == Compat::v2
            ? "--compat v2 runs unpinned and pinned; --ablate-register adds pinned-unregistered"
            : fmt::format("add it to --arms (e.g. --arms registered,{})",
                          to_string(c.deepspeed_arm));
    return refuse(fmt::format("--deepspeed-arm {} is not among the arms that completed ({}); {}",
                              to_string(c.deepspeed_arm), arms_completed(run), fix));
  }
  const Verdict& v = *found;
  if (std::string why = advice_withheld(run, v); !why.empty()) return refuse(std::move(why));
  Projection p;
  p.user_step_s = c.deepspeed_step_s;
  p.user_arm = c.deepspeed_arm;
  p.saved_s = v.saved_median.value_or(v.saved_s);
  p.saved_low = v.saved_low;
  p.saved_high = v.saved_high;
  p.user_is_fast = p.user_arm == v.fast;
  p.projected_arm = p.user_is_fast ? v.slow : v.fast;
  p.projected_s = p.user_is_fast ? p.user_step_s + p.saved_s : p.user_step_s - p.saved_s;
  p.meaningful = p.projected_s > 0;
  return p;
}

std::string render_projection(const RunResult& run) {
  std::string why_not;
  const auto p = project_user_step(run, &why_not);
  if (!p) return why_not.empty() ? "" : "projection: none: " + why_not + "\n";
  const RunConfig& c = run.config;
  if (!p->meaningful) {
    return fmt::format(
        "projection: none: this run saved {:.3f} s per step, more than your DeepSpeed step of "
        "{:.3f} s ({}); the run does not match your training (same --model, --batch, --seq, "
        "--offload-param?)\n",
        p->saved_s, p->user_step_s, arm_key(c, p->user_arm));
  }
  std::string range;
  if (p->saved_low && p->saved_high) {
    // The user's step gains the saving (the user's arm was the faster) or loses it; the
    // interval runs from the lower projected step to the higher.
    const double sign = p->user_is_fast ? 1.0 : -1.0;
    const double a = p->user_step_s + sign * *p->saved_low;
    const double b = p->user_step_s + sign * *p->saved_high;
    const double lo = std::min(a, b), hi = std::max(a, b);
    range = fmt::format(" (interval {:.3f}-{:.3f} s from the saving's {:.3f}-{:.3f} s)", lo, hi,
                        *p->saved_low, *p->saved_high);
  } else {
    range = " (one round, no interval)";
  }
  return fmt::format(
      "projection: your DeepSpeed step of {:.3f} s ({}) would be {:.3f} s ({}){}; "
      "assumes {}\n",
      p->user_step_s, arm_key(c, p->user_arm), p->projected_s, arm_key(c, p->projected_arm), range,
      kAssumes);
}

nlohmann::ordered_json projection_json(const RunResult& run) {
  const auto p = project_user_step(run);
  if (!p) return nullptr;
  const auto number = [](const std::optional<double>& v) {
    return v ? finite_or_null(*v) : nlohmann::json(nullptr);
  };
  return {{"user_step_s", p->user_step_s},
          {"user_arm", to_string(p->user_arm)},
          {"saved_s", finite_or_null(p->saved_s)},
          {"saved_low_s", number(p->saved_low)},
          {"saved_high_s", number(p->saved_high)},
          {"projected_arm", to_string(p->projected_arm)},
          {"projected_s", p->meaningful ? finite_or_null(p->projected_s) : nlohmann::json(nullptr)},
          {"assumes", kAssumes}};
}

}  // namespace zob
