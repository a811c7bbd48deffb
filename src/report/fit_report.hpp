// --fit's report: one table of the candidates (ratio, arm, device peak, locked bytes, step time
// with its interval over the rounds), the winner against the baseline (DeepSpeed's default:
// ratio 1, pageable), and the winner's DeepSpeed settings. Text and DRIVERRESULT's "fit" (and
// its "settings") come from one summary (summarize_fit), as nvbandwidth's outputs do.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "zob/result.hpp"

namespace zob {

// One candidate as measured: medians of the per-round step medians, their interval.
struct FitRow {
  const FitCandidate* candidate = nullptr;
  int rounds_ok = 0;             // rounds whose arm run completed
  std::string error;             // the first failed round's reason, or ""
  double step_s = 0;             // median over rounds of each round's median timed step
  double low_s = 0, high_s = 0;  // its interval (stats.hpp median_interval)
  double gpu_peak_gb = 0, gpu_reserved_peak_gb = 0;  // the highest of the rounds
  std::uint64_t locked_bytes = 0;                    // measured, the highest of the rounds
};

// The winner against the baseline: per-round ratios baseline / winner, where both completed.
struct FitMargin {
  double median = 0, low = 0, high = 0;
  std::size_t rounds = 0;
  bool conclusive = false;  // >= 2 rounds and an interval above 1.0
};

struct FitSummary {
  std::vector<FitRow> rows;                     // candidate order
  std::optional<std::size_t> winner, baseline;  // indexes into rows
  std::optional<std::size_t> runner_up;         // the next fastest
  std::optional<FitMargin> over_baseline;       // winner vs baseline
  std::optional<FitMargin> over_runner_up;      // runner-up vs winner
  std::string withheld;                         // why no settings follow ("" when they do)
};

FitSummary summarize_fit(const RunResult& run);
// The "fit:" lines and the winner's "settings:" lines; "" without --fit.
std::string render_fit_section(const RunResult& run);
// DRIVERRESULT's "fit" (null without --fit) and, with --fit, its "settings": the winner's.
nlohmann::ordered_json fit_json(const RunResult& run);
nlohmann::ordered_json fit_settings_json(const RunResult& run);

}  // namespace zob
