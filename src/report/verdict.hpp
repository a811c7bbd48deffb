// The verdict: one plain sentence per comparison of two arms, printed last before DRIVERRESULT
// and listed in it ("verdicts"), so that what a run found can be read without knowing what a
// ratio of averages means, and so that noise (one round, an interval across 1.0, the CPU
// device where nothing is registered) is never presented as a result.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "zob/result.hpp"

namespace zob {

struct Verdict {
  Arm slow = Arm::unregistered;  // the arm without the change (the ratio's numerator)
  Arm fast = Arm::registered;    // the arm with it
  std::string text;              // the sentence, e.g. "Registering ... saves 0.40 s per step ..."
  bool applicable = true;        // false on the CPU device: no registration exists there
  bool conclusive = false;       // an interval over >= 2 rounds that excludes 1.0
  double ratio = 0;              // slow avg / fast avg (the table's speedup)
  std::optional<double> median;  // median of the per-round ratios (--repeats >= 2)
  std::optional<double> low, high;   // its interval
  std::optional<double> confidence;  // the interval's coverage of the median (0.9375: 5 rounds)
  std::size_t rounds = 0;            // rounds in which both arms completed
  double saved_s = 0;                // slow avg - fast avg, seconds per step
  // The per-round seconds saved (slow median - fast median), with --repeats >= 2.
  std::optional<double> saved_median, saved_low, saved_high;
};

// The comparisons of the run's first configuration, or of one configuration `point` of a
// sweep: the headline pair (speedup_arms) first, then pageable and hostalloc each against the
// registered arm where both completed.
std::vector<Verdict> verdicts(const RunResult& run);

// Why no advice (settings, projection) follows from `v`, as "<reason>; <fix>"; "" when the
// verdict is conclusive: applicable, over >= 2 rounds, the device to itself, and an interval
// that excludes 1.0.
std::string advice_withheld(const RunResult& run, const Verdict& v);

// `v` with its arms named as measured: where the arm with the change was the slower (the
// median over rounds, else the ratio of averages, below 1) `slow` and `fast` swap, the ratios
// and their interval invert and the savings change sign; the text stays. DRIVERRESULT's
// "verdicts" are these.
Verdict as_measured(const Verdict& v);

// "verdict: <sentence>" per comparison (per configuration of a sweep, each named); "" when
// no two arms completed.
std::string render_verdict_lines(const RunResult& run);
// DRIVERRESULT's "verdicts": one object per comparison of the first configuration.
nlohmann::ordered_json verdicts_json(const RunResult& run);

}  // namespace zob
