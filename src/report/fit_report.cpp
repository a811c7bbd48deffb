#include "report/fit_report.hpp"

#include <fmt/format.h>
#include <algorithm>

#include "report/arms.hpp"
#include "report/deepspeed_settings.hpp"
#include "report/details.hpp"
#include "zob/stats.hpp"

namespace zob {

namespace {

std::string gb(double bytes) { return bytes_text(static_cast<std::uint64_t>(bytes)); }

double round_median(const ArmResult& a) { return median(a.timed_step_s()); }

FitRow row_of(const FitCandidate& c) {
  FitRow r;
  r.candidate = &c;
  std::vector<double> medians;
  for (const ArmResult& a : c.rounds) {
    if (!a.ok) {
      if (r.error.empty()) r.error = a.error;
      continue;
    }
    medians.push_back(round_median(a));
    r.gpu_peak_gb = std::max(r.gpu_peak_gb, a.gpu_peak_gb);
    r.gpu_reserved_peak_gb = std::max(r.gpu_reserved_peak_gb, a.gpu_reserved_peak_gb);
    r.locked_bytes = std::max(r.locked_bytes, a.locked_bytes);
  }
  r.rounds_ok = static_cast<int>(medians.size());
  if (!medians.empty()) {
    const MedianInterval m = median_interval(medians);
    r.step_s = m.median;
    r.low_s = m.low;
    r.high_s = m.high;
  }
  return r;
}

// Per round where both completed: slow's median step / fast's.
std::optional<FitMargin> margin(const FitCandidate& slow, const FitCandidate& fast) {
  std::vector<double> ratios;
  for (std::size_t k = 0; k < std::min(slow.rounds.size(), fast.rounds.size()); ++k) {
    if (!slow.rounds[k].ok || !fast.rounds[k].ok) continue;
    const double f = round_median(fast.rounds[k]);
    if (f > 0) ratios.push_back(round_median(slow.rounds[k]) / f);
  }
  if (ratios.empty()) return std::nullopt;
  const MedianInterval m = median_interval(ratios);
  return FitMargin{m.median, m.low, m.high, ratios.size(), ratios.size() >= 2 && m.low > 1.0};
}

// Complete: every round it ran completed, and it ran in every round the search ran.
bool complete(const FitRow& r, int rounds_run) {
  return r.error.empty() && r.rounds_ok > 0 && r.rounds_ok == rounds_run;
}

std::string withheld_reason(const FitSummary& s, const RunResult& run) {
  if (!s.winner) return "no candidate completed every round";
  if (*s.winner == *s.baseline) {
    return "the baseline (ratio 1, pageable: DeepSpeed's default) was the fastest; nothing "
           "to change";
  }
  if (!s.over_baseline) return "the baseline did not complete a round beside the winner";
  const FitMargin& m = *s.over_baseline;
  if (m.rounds < 2) return "one round gives no interval: run with --repeats 3 or more";
  if (!m.conclusive) {
    return fmt::format(
        "the winner's margin over the baseline ({:.2f}-{:.2f}) includes 1.0: "
        "raise --repeats",
        m.low, m.high);
  }
  (void)run;
  return "";
}

}  // namespace

FitSummary summarize_fit(const RunResult& run) {
  FitSummary s;
  if (!run.fit) return s;
  const FitSearch& fit = *run.fit;
  for (const FitCandidate& c : fit.candidates) s.rows.push_back(row_of(c));
  for (std::size_t i = 0; i < s.rows.size(); ++i) {
    if (s.rows[i].candidate->baseline) s.baseline = i;
    if (!complete(s.rows[i], fit.rounds_run)) continue;
    if (!s.winner || s.rows[i].step_s < s.rows[*s.winner].step_s) {
      s.runner_up = s.winner;
      s.winner = i;
    } else if (!s.runner_up || s.rows[i].step_s < s.rows[*s.runner_up].step_s) {
      s.runner_up = i;
    }
  }
  if (s.winner && s.baseline && *s.baseline != *s.winner) {
    s.over_baseline = margin(*s.rows[*s.baseline].candidate, *s.rows[*s.winner].candidate);
  }
  if (s.winner && s.runner_up) {
    s.over_runner_up = margin(*s.rows[*s.runner_up].candidate, *s.rows[*s.winner].candidate);
  }
  s.withheld = s.baseline ? withheld_reason(s, run) : "the baseline did not run";
  return s;
}

namespace {

std::string row_text(const FitRow& r) {
  const FitCandidate& c = *r.candidate;
  std::string step;
  if (!c.skipped.empty() && (c.rounds.empty() || r.rounds_ok == 0)) {
    step = "skipped: " + c.skipped;
  } else if (r.rounds_ok == 0) {
    step = "failed: " + r.error;
  } else {
    step = fmt::format("{:.4f} s ({:.4f}-{:.4f}, {} round{}){}", r.step_s, r.low_s, r.high_s,
                       r.rounds_ok, r.rounds_ok == 1 ? "" : "s",
                       r.error.empty() ? "" : "; a round failed: " + r.error);
  }
  const std::string peak = r.rounds_ok > 0 ? gb(r.gpu_peak_gb * 1e9) : "-";
  return fmt::format(
      "fit: {:<6g} {:<13} {:>5} {:>10} {:>10} {:>10}  {}\n", c.offload_ratio,
      std::string(to_string(c.arm)) + (c.baseline ? "*" : ""),
      fmt::format("{}/{}", c.device_sub_groups, c.sub_groups),
      gb(static_cast<double>(c.planned_device_bytes)), peak,
      gb(static_cast<double>(r.rounds_ok > 0 ? r.locked_bytes : c.planned_locked_bytes)), step);
}

std::string name(const FitRow& r) {
  return fmt::format("ratio {:g}, {}", r.candidate->offload_ratio, to_string(r.candidate->arm));
}

// The settings of the winner: its arm at its ratio, as the headline's settings are made.
ArmSettings winner_settings(const RunResult& run, const FitRow& w) {
  const ArmResult* a = nullptr;
  for (const ArmResult& r : w.candidate->rounds) {
    if (r.ok) a = &r;
  }
  const std::string device =
      a != nullptr && !a->device.empty() ? a->device : to_string(run.config.device);
  return deepspeed_settings(w.candidate->arm, device, a != nullptr ? memlock_per_process(*a) : 0);
}

RunConfig winner_config(const RunResult& run, const FitRow& w) {
  RunConfig c = run.config;
  c.offload_ratio = w.candidate->offload_ratio;
  c.offload_ratio_sweep.clear();
  return c;
}

std::vector<std::string> winner_lines(const RunResult& run, const FitSummary& s) {
  if (!s.withheld.empty()) return {"none: " + s.withheld + " (no DeepSpeed setting follows)"};
  const FitRow& w = s.rows[*s.winner];
  std::vector<std::string> lines = settings_lines(winner_config(run, w), winner_settings(run, w));
  if (!registration_applicable(run)) {
    lines.push_back("  note: measured on the " + std::string(to_string(run.config.device)) +
                    " device, where nothing is registered: the ratio's effect is real, the "
                    "arm's is host memory alone; run --fit on the GPU to choose the arm");
  }
  return lines;
}

}  // namespace

std::string render_fit_section(const RunResult& run) {
  if (!run.fit) return "";
  const FitSearch& fit = *run.fit;
  const FitSummary s = summarize_fit(run);
  std::string out = fmt::format(
      "fit: {} candidates, {} of {} round{} run in {:.0f} s (* the baseline: DeepSpeed's "
      "default, ratio 1 with pin_memory false)\n",
      fit.candidates.size(), fit.rounds_run, fit.rounds_planned, fit.rounds_planned == 1 ? "" : "s",
      fit.spent_s);
  out += fmt::format("fit: {:<6} {:<13} {:>5} {:>10} {:>10} {:>10}  {}\n", "ratio", "arm", "dev",
                     "planned", "peak", "locked", "step (median over rounds, interval)");
  for (const FitRow& r : s.rows) out += row_text(r);
  for (const std::string& c : fit.cut) out += "fit: cut: " + c + "\n";
  if (s.winner) {
    const FitRow& w = s.rows[*s.winner];
    out += fmt::format("fit: winner: {} at {:.4f} s per step", name(w), w.step_s);
    if (s.over_baseline) {
      out += fmt::format(", {:.2f}x the baseline's speed (interval {:.2f}-{:.2f}, {} round{})",
                         s.over_baseline->median, s.over_baseline->low, s.over_baseline->high,
                         s.over_baseline->rounds, s.over_baseline->rounds == 1 ? "" : "s");
    }
    out += "\n";
    if (s.runner_up && s.over_runner_up && !s.over_runner_up->conclusive) {
      out += fmt::format(
          "fit: {} ({:.4f} s) is within the noise of the winner (interval "
          "{:.2f}-{:.2f}): either will do\n",
          name(s.rows[*s.runner_up]), s.rows[*s.runner_up].step_s, s.over_runner_up->low,
          s.over_runner_up->high);
    }
  }
  for (const std::string& line : winner_lines(run, s)) out += "settings: " + line + "\n";
  return out;
}

namespace {

nlohmann::ordered_json text_or_null(const std::string& v) {
  return v.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(v);
}

nlohmann::ordered_json number_or_null(bool has, double v) {
  return has ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
}

nlohmann::ordered_json margin_json(const std::optional<FitMargin>& m) {
  if (!m) return nullptr;
  return {{"median", m->median},
          {"interval_low", m->low},
          {"interval_high", m->high},
          {"rounds", m->rounds},
          {"conclusive", m->conclusive}};
}

nlohmann::ordered_json candidate_json(const FitRow& r) {
  const FitCandidate& c = *r.candidate;
  const bool ran = r.rounds_ok > 0;
  return {{"offload_ratio", c.offload_ratio},
          {"arm", to_string(c.arm)},
          {"baseline", c.baseline},
          {"sub_groups", c.sub_groups},
          {"device_sub_groups", c.device_sub_groups},
          {"planned_device_bytes", c.planned_device_bytes},
          {"planned_locked_bytes", c.planned_locked_bytes},
          {"skipped", text_or_null(c.skipped)},
          {"rounds", c.rounds.size()},
          {"rounds_ok", r.rounds_ok},
          {"error", text_or_null(r.error)},
          {"step_s", number_or_null(ran, r.step_s)},
          {"step_low_s", number_or_null(ran, r.low_s)},
          {"step_high_s", number_or_null(ran, r.high_s)},
          {"gpu_peak_gb", number_or_null(ran, r.gpu_peak_gb)},
          {"gpu_reserved_peak_gb", number_or_null(ran, r.gpu_reserved_peak_gb)},
          {"locked_bytes",
           ran ? nlohmann::ordered_json(r.locked_bytes) : nlohmann::ordered_json(nullptr)}};
}

nlohmann::ordered_json index_json(const std::optional<std::size_t>& i) {
  return i ? nlohmann::ordered_json(*i) : nlohmann::ordered_json(nullptr);
}

}  // namespace

nlohmann::ordered_json fit_json(const RunResult& run) {
  if (!run.fit) return nullptr;
  const FitSearch& fit = *run.fit;
  const FitSummary s = summarize_fit(run);
  nlohmann::ordered_json candidates = nlohmann::ordered_json::array();
  for (const FitRow& r : s.rows) candidates.push_back(candidate_json(r));
  return {{"budget_s", fit.budget_s},
          {"spent_s", fit.spent_s},
          {"rounds_planned", fit.rounds_planned},
          {"rounds_run", fit.rounds_run},
          {"cut", fit.cut},
          {"candidates", std::move(candidates)},
          {"winner", index_json(s.winner)},
          {"baseline", index_json(s.baseline)},
          {"runner_up", index_json(s.runner_up)},
          {"over_baseline", margin_json(s.over_baseline)},
          {"over_runner_up", margin_json(s.over_runner_up)},
          {"settings_withheld", text_or_null(s.withheld)}};
}

nlohmann::ordered_json fit_settings_json(const RunResult& run) {
  const FitSummary s = summarize_fit(run);
  const std::vector<std::string> lines = winner_lines(run, s);
  if (!s.withheld.empty()) {
    ArmSettings none;
    none.deepspeed_has_it = false;
    return settings_object(run.config, none, lines);
  }
  const FitRow& w = s.rows[*s.winner];
  return settings_object(winner_config(run, w), winner_settings(run, w), lines);
}

}  // namespace zob
