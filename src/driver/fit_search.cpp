#include "driver/fit_search.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cstdio>

#include "driver/arm_runs.hpp"
#include "driver/driver.hpp"
#include "report/details.hpp"
#include "zob/errors.hpp"
#include "zob/preflight.hpp"
#include "zob/step.hpp"
#include "zob/text.hpp"

namespace zob {

namespace {

bool arm_locks(Arm arm) { return arm == Arm::registered || arm == Arm::unregistered; }

void note(const std::string& text) { stderr_line("fit: ", text); }

std::string label_of(const FitCandidate& c) {
  return fmt::format("ratio {:g} {}", c.offload_ratio, to_string(c.arm));
}

FitCandidate plan_candidate(const RunConfig& config, double ratio, Arm arm,
                            const HostEnvironment& host, DeviceMemory device_memory) {
  const RunConfig point = fit_point(config, ratio, arm);
  const MemoryPlan plan = plan_memory(point);
  FitCandidate c;
  c.offload_ratio = ratio;
  c.arm = arm;
  c.sub_groups = plan.optimizer_sub_groups;
  c.device_sub_groups = plan.device_sub_groups;
  c.planned_device_bytes = plan.device_bytes;
  c.planned_locked_bytes = arm_locks(arm) ? plan.host_pinned_bytes : 0;
  if (config.skip_preflight) return c;
  try {
    preflight_check(point, plan, host, device_memory);
  } catch (const UsageError& e) {
    const std::string why = e.what();
    c.skipped = "does not fit: " + (why.rfind("pre-flight: ", 0) == 0 ? why.substr(12) : why);
  }
  return c;
}

}  // namespace

RunConfig fit_point(const RunConfig& config, double offload_ratio, Arm arm) {
  RunConfig c = config;
  c.offload_ratio = offload_ratio;
  c.offload_ratio_sweep.clear();
  c.arms = {arm};
  c.fit = false;  // a child runs one arm
  return c;
}

std::vector<FitCandidate> plan_fit_candidates(const RunConfig& config, const HostEnvironment& host,
                                              DeviceMemory device_memory) {
  std::vector<FitCandidate> out;
  std::vector<std::pair<std::int64_t, double>> splits;  // device sub-groups -> its first ratio
  for (const double ratio : fit_ratios(config)) {
    const std::int64_t on_device =
        plan_memory(fit_point(config, ratio, config.arms.front())).device_sub_groups;
    const auto same = std::find_if(splits.begin(), splits.end(),
                                   [&](const auto& s) { return s.first == on_device; });
    for (const Arm arm : config.arms) {
      FitCandidate c = plan_candidate(config, ratio, arm, host, device_memory);
      if (same != splits.end()) {
        c.skipped = fmt::format("same split as ratio {:g} ({} of {} sub-groups on the device)",
                                same->second, c.device_sub_groups, c.sub_groups);
      }
      out.push_back(std::move(c));
    }
    if (same == splits.end()) splits.emplace_back(on_device, ratio);
  }
  // The baseline, DeepSpeed's default (offload_optimizer.ratio 1, pin_memory false): run even
  // where it repeats a split, so that the winner is compared with what DeepSpeed does unasked.
  const auto base = std::find_if(out.begin(), out.end(), [](const FitCandidate& c) {
    return c.offload_ratio == 1.0 && c.arm == Arm::pageable;
  });
  if (base != out.end()) {
    base->baseline = true;
    if (base->skipped.rfind("same split", 0) == 0) base->skipped.clear();
  } else {
    FitCandidate c = plan_candidate(config, 1.0, Arm::pageable, host, device_memory);
    c.baseline = true;
    out.push_back(std::move(c));
  }
  return out;
}

namespace {

// A candidate whose arm ran out of device memory does not fit, whatever its plan said: the
// caching pool reserves more than the allocated bytes the plan counts when its segments
// fragment, as PyTorch's does (DeepSpeed at ratio 0.5 under the same cap ran out too:
// results/h100/2026-12-06-offload-ratio). It is reported as not fitting, runs no more rounds,
// and is no failure of the search.
void mark_out_of_memory(FitCandidate& c, const RunConfig& resolved) {
  const ArmResult& a = c.rounds.back();
  if (a.ok || a.error.rfind("out of memory", 0) != 0) return;
  c.skipped = "does not fit: ran out of device memory at run time (" + a.error + ")";
  note(fmt::format(
      "{}: planned {} on the device{}, but it ran out of device memory at run time: counted as "
      "not fitting (the pool reserves more than it allocates when its blocks fragment)",
      label_of(c), bytes_text(c.planned_device_bytes),
      resolved.device_memory_bytes > 0
          ? fmt::format(" under --device-memory {}", bytes_text(resolved.device_memory_bytes))
          : std::string()));
}

// The search's rounds: each round every runnable candidate once, in order. The budget is
// checked before each arm run of the first round and before each later round as a whole, so
// that the rounds compared stay whole: what would end past it is cut and said so.
void run_rounds(const RunConfig& resolved, const DeviceInfo& info, FitSearch& fit,
                int& stopped_by) {
  std::vector<FitCandidate*> runnable;
  for (FitCandidate& c : fit.candidates) {
    if (c.skipped.empty()) runnable.push_back(&c);
  }
  RunProgress progress;
  progress.total = static_cast<int>(runnable.size()) * fit.rounds_planned;
  const auto over_budget = [&](int arm_runs) {
    if (fit.budget_s <= 0 || progress.done == 0) return false;
    return progress.spent_s + arm_runs * (progress.spent_s / progress.done) > fit.budget_s;
  };
  for (int k = 0; k < fit.rounds_planned && stopped_by == 0; ++k) {
    if (k > 0 && over_budget(static_cast<int>(runnable.size()))) {
      fit.cut.push_back(fmt::format(
          "--fit-budget {:g} s cut round{} {} of every candidate (a round takes about {:.0f} s)",
          fit.budget_s, k + 1 < fit.rounds_planned ? "s" : "",
          k + 1 < fit.rounds_planned ? fmt::format("{}-{}", k + 1, fit.rounds_planned)
                                     : std::to_string(k + 1),
          runnable.size() * progress.spent_s / progress.done));
      break;
    }
    for (FitCandidate* c : runnable) {
      if (stopped_by != 0) break;
      if (!c->skipped.empty()) continue;  // ran out of device memory in an earlier round
      if (k == 0 && over_budget(1)) {
        c->skipped = fmt::format("cut: --fit-budget {:g} s ran out before it", fit.budget_s);
        fit.cut.push_back(label_of(*c) + ": " + c->skipped);
        continue;
      }
      const std::string label =
          fmt::format("{} (round {}/{})", label_of(*c), k + 1, fit.rounds_planned);
      c->rounds.push_back(run_arm_once(fit_point(resolved, c->offload_ratio, c->arm), c->arm, info,
                                       label, progress, stopped_by));
      mark_out_of_memory(*c, resolved);
      if (progress.done == 1) {  // the first arm run times the rest
        note(
            fmt::format("the first arm run took {:.1f} s: the search's {} arm runs take about "
                        "{:.1f} s{}",
                        progress.spent_s, progress.total, progress.spent_s * progress.total,
                        fit.budget_s > 0 ? fmt::format(" (--fit-budget {:g} s)", fit.budget_s)
                                         : std::string()));
      }
    }
    if (std::any_of(runnable.begin(), runnable.end(), [&](const FitCandidate* c) {
          return static_cast<int>(c->rounds.size()) > k;
        })) {
      fit.rounds_run = k + 1;
    }
  }
  fit.spent_s = progress.spent_s;
}

bool fits(const FitCandidate& c) { return c.skipped.rfind("does not fit", 0) != 0; }

// The sweep the standard reports read (the candidates that fit): each ratio that ran, with its arms
// combined over the rounds in the order of run.config.arms; the top level is the first of them.
void fill_sweep(const FitSearch& fit, RunResult& run) {
  // Where none that ran fitted, all that ran stay: their failures are the run's (exit 1).
  const bool any_fit =
      std::any_of(fit.candidates.begin(), fit.candidates.end(),
                  [](const FitCandidate& c) { return !c.rounds.empty() && fits(c); });
  const auto shown = [&](const FitCandidate& c) {
    return !c.rounds.empty() && (fits(c) || !any_fit);
  };
  std::vector<double> ratios;
  for (const FitCandidate& c : fit.candidates) {
    if (shown(c) && std::find(ratios.begin(), ratios.end(), c.offload_ratio) == ratios.end())
      ratios.push_back(c.offload_ratio);
  }
  for (const double ratio : ratios) {
    SweepPoint point{run.config.chunk_elems, run.config.sub_group_size, {}, ratio};
    std::vector<std::vector<ArmResult>> rounds;
    for (const Arm arm : run.config.arms) {
      for (const FitCandidate& c : fit.candidates) {
        if (c.offload_ratio != ratio || c.arm != arm || !shown(c)) continue;
        std::vector<const ArmResult*> runs;
        for (std::size_t k = 0; k < c.rounds.size(); ++k) {
          runs.push_back(&c.rounds[k]);
          if (rounds.size() <= k) rounds.resize(k + 1);
          rounds[k].push_back(c.rounds[k]);
        }
        point.arms.push_back(combine_rounds(runs));
      }
    }
    if (run.sweep.empty()) {
      run.arms = point.arms;
      run.rounds = std::move(rounds);
    }
    run.sweep.push_back(std::move(point));
  }
  if (run.sweep.size() == 1) run.sweep.clear();
  // The reports label each configuration by its ratio (ratio_shown).
  if (!ratios.empty()) {
    run.config.offload_ratio = ratios.front();
    run.config.offload_ratio_sweep = ratios.size() > 1 ? ratios : std::vector<double>{};
  }
}

void announce(const FitSearch& fit) {
  int runnable = 0;
  for (const FitCandidate& c : fit.candidates) {
    if (c.skipped.empty()) {
      ++runnable;
    } else {
      note(fmt::format("skipped {}: {}", label_of(c), c.skipped));
    }
  }
  note(fmt::format(
      "{} of {} candidates run, {} round{} (each candidate once a round, a fresh "
      "process each); the time per arm run is known after the first",
      runnable, fit.candidates.size(), fit.rounds_planned, fit.rounds_planned == 1 ? "" : "s"));
}

}  // namespace

int run_fit(const RunConfig& resolved, const DeviceInfo& info, std::uint64_t device_free_bytes,
            RunResult& run) {
  const DeviceMemory room{info.total_memory_bytes, device_free_bytes, info.memory_is_host_ram};
  FitSearch fit;
  fit.budget_s = resolved.fit_budget_s;
  fit.rounds_planned = std::max(resolved.repeats, 1);
  fit.candidates = plan_fit_candidates(resolved, run.host, room);
  const auto runs = [](const FitCandidate& c) { return c.skipped.empty(); };
  if (std::none_of(fit.candidates.begin(), fit.candidates.end(), runs)) {
    const FitCandidate& first = fit.candidates.front();
    throw UsageError(fmt::format(
        "--fit: no candidate fits ({}: {}); what would fit: {}", label_of(first), first.skipped,
        what_would_fit(fit_point(resolved, 1.0, first.arm), run.host, room)));
  }
  run.config = resolved;
  for (const FitCandidate& c : fit.candidates) {  // the arms the reports name: --arms + baseline
    if (std::find(run.config.arms.begin(), run.config.arms.end(), c.arm) == run.config.arms.end())
      run.config.arms.push_back(c.arm);
  }
  announce(fit);
  int stopped_by = 0;
  run_rounds(resolved, info, fit, stopped_by);
  fill_sweep(fit, run);
  run.fit = std::move(fit);
  if (stopped_by != 0) run.interrupted = signal_name(stopped_by);
  return report_run(run, stopped_by);
}

}  // namespace zob
