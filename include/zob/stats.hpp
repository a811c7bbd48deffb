// Statistics over per-step samples and over repeated rounds. Plain functions on vectors of
// doubles, so reports of every backend and the compare subcommand use the same definitions.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "zob/result.hpp"

namespace zob {

struct Summary {
  std::size_t n = 0;
  double mean = 0, median = 0, min = 0, max = 0;
  double stddev = 0;  // sample standard deviation (n-1); 0 when n < 2
  double p90 = 0;     // linear interpolation between order statistics
  double rel_spread() const { return median > 0 ? stddev / median : 0; }  // stddev / median
};
Summary summarize(std::vector<double> samples);
// The median (the mean of the middle two for an even count); 0 for no values.
double median(std::vector<double> values);
nlohmann::json to_json(const Summary&);

// A distribution-free interval for the median of `values` (e.g. per-round speedups):
// with n >= 6 the order-statistic interval with >= 95 % coverage (binomial), otherwise the
// min..max range. `method` names which one was used; `confidence` is the interval's true
// coverage either way (the range of n values: 1 - 2 / 2^n; 0 for a single value).
struct MedianInterval {
  double median = 0, low = 0, high = 0;
  double confidence = 0;  // probability that [low, high] covers the median
  std::string method;     // "order-statistics" or "range"
};
MedianInterval median_interval(std::vector<double> values);

// Spread above this (stddev / median) triggers the "too noisy to trust" warning.
inline constexpr double kSpreadWarning = 0.05;

// Per-phase aggregation of an arm's timed steps: for each phase the median device and host
// seconds, bytes per step, and GB/s (bytes / time, device time where the phase has it);
// "adam" also gets Gparam/s. Keys are the phase names of result.hpp.
nlohmann::json summarize_phases(const ArmResult& arm);

}  // namespace zob
