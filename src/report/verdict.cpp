#include "report/verdict.hpp"

#include <fmt/format.h>
#include <cmath>
#include <utility>

#include "report/arms.hpp"
#include "report/details.hpp"
#include "report/json_util.hpp"
#include "zob/stats.hpp"

namespace zob {

namespace {

// What the faster arm changes, as the subject of the sentence.
std::string change_of(const RunConfig& c, Arm slow, Arm fast) {
  if (slow == Arm::unregistered && fast == Arm::registered) {
    return c.compat == Compat::v2 ? "Registering the pinned offload buffers"
                                  : "Registering the offload buffers";
  }
  if (slow == Arm::pageable && fast == Arm::registered) {
    return "Pinning the offload buffers (locked and registered, vs pageable memory)";
  }
  if (slow == Arm::hostalloc && fast == Arm::registered) {
    return "Registering the buffers (vs the runtime's own pinned allocation, hostalloc)";
  }
  return fmt::format("The {} arm (vs {})", arm_key(c, fast), arm_key(c, slow));
}

// 0.40 s, 12.3 ms: seconds where they read well, milliseconds below a tenth of one.
std::string duration_text(double s) {
  const double a = std::fabs(s);
  if (a >= 0.1) return fmt::format("{:.2f} s", a);
  if (a >= 1e-4) return fmt::format("{:.1f} ms", a * 1e3);
  return fmt::format("{:.1f} us", a * 1e6);
}

// The per-round (slow, fast) medians of two arms' timed steps, in every round in which both
// completed.
std::vector<std::pair<double, double>> round_medians(const RunResult& run, Arm slow, Arm fast) {
  const auto fast_runs = runs_of(run, fast);
  const auto slow_runs = runs_of(run, slow);
  std::vector<std::pair<double, double>> out;
  if (run.rounds.empty()) return out;
  for (std::size_t k = 0; k < std::min(fast_runs.size(), slow_runs.size()); ++k) {
    if (!fast_runs[k]->ok || !slow_runs[k]->ok) continue;
    const double f = summarize(fast_runs[k]->timed_step_s()).median;
    const double s = summarize(slow_runs[k]->timed_step_s()).median;
    if (f > 0 && std::isfinite(s)) out.emplace_back(s, f);
  }
  return out;
}

// ", 94 % coverage": how likely the interval holds the true median (the range of 5 rounds
// covers it with 1 - 2/2^5), so that "3 rounds" and "20 rounds" do not read alike.
std::string coverage_text(const Verdict& v) {
  if (!v.confidence) return "";
  return fmt::format(", {:.0f} % coverage", *v.confidence * 100);
}

std::string sentence(const RunConfig& c, const Verdict& v, double slow_avg,
                     const std::string& shared) {
  const std::string change = change_of(c, v.slow, v.fast);
  if (v.applicable && !shared.empty()) {
    return fmt::format(
        "inconclusive: {} measured {:.2f}x while another process used the device ({}); run "
        "again with the device to itself",
        change, v.median ? *v.median : v.ratio, shared);
  }
  if (!v.applicable) {
    return fmt::format(
        "not applicable on the CPU device: no registration exists there, so the {:.2f}x between "
        "{} and {} is noise; run on an accelerator (--device cuda or xpu)",
        v.ratio, arm_key(c, v.fast), arm_key(c, v.slow));
  }
  if (v.rounds >= 2 && v.median && v.low && v.high && *v.low <= 1.0 && *v.high >= 1.0) {
    return fmt::format(
        "inconclusive: {} gives {:.2f}x (median over {} rounds{}), but the interval "
        "{:.2f}-{:.2f} includes 1.0; raise --repeats",
        change, *v.median, v.rounds, coverage_text(v), *v.low, *v.high);
  }
  const double shown = v.median ? *v.median : v.ratio;
  const bool saves = shown >= 1.0;
  const double pct = slow_avg > 0 ? 100.0 * std::fabs(v.saved_s) / slow_avg : 0.0;
  std::string text = fmt::format("{} {} {} per step ({:.0f} %) on this machine: {:.2f}x", change,
                                 saves ? "saves" : "costs", duration_text(v.saved_s), pct, shown);
  if (v.rounds >= 2 && v.low && v.high) {
    text += fmt::format(" (median; interval {:.2f}-{:.2f} over {} rounds{})", *v.low, *v.high,
                        v.rounds, coverage_text(v));
  } else {
    text += " (one round, no interval: --repeats 5 says whether it holds)";
  }
  return text;
}

std::optional<Verdict> compare_pair(const RunResult& run, Arm slow, Arm fast) {
  const ArmResult* f = find_ok_arm(run, fast);
  const ArmResult* s = find_ok_arm(run, slow);
  if (f == nullptr || s == nullptr || !(f->step_avg_s > 0) || !std::isfinite(s->step_avg_s)) {
    return std::nullopt;
  }
  Verdict v;
  v.slow = slow;
  v.fast = fast;
  v.ratio = s->step_avg_s / f->step_avg_s;
  v.saved_s = s->step_avg_s - f->step_avg_s;
  v.applicable = registration_applicable(run);
  std::vector<double> ratios, saved;
  for (const auto& [s_med, f_med] : round_medians(run, slow, fast)) {
    ratios.push_back(s_med / f_med);
    saved.push_back(s_med - f_med);
  }
  v.rounds = ratios.size();
  if (ratios.size() >= 2) {
    const MedianInterval m = median_interval(ratios);
    v.median = m.median;
    v.low = m.low;
    v.high = m.high;
    v.confidence = m.confidence;
    // Never over another process's work: its share of the device is in both arms' times.
    v.conclusive = v.applicable && shared_device(run).empty() && (m.low > 1.0 || m.high < 1.0);
    const MedianInterval ms = median_interval(saved);
    v.saved_median = ms.median;
    v.saved_low = ms.low;
    v.saved_high = ms.high;
  }
  v.text = sentence(run.config, v, s->step_avg_s, shared_device(run));
  return v;
}

}  // namespace

Verdict as_measured(const Verdict& v) {
  if ((v.median ? *v.median : v.ratio) >= 1.0) return v;
  const auto inverse = [](const std::optional<double>& x) {
    return x ? std::optional<double>(1.0 / *x) : std::nullopt;
  };
  const auto negated = [](const std::optional<double>& x) {
    return x ? std::optional<double>(-*x) : std::nullopt;
  };
  Verdict t = v;
  std::swap(t.slow, t.fast);
  t.ratio = 1.0 / v.ratio;
  t.median = inverse(v.median);
  t.low = inverse(v.high);
  t.high = inverse(v.low);
  t.saved_s = -v.saved_s;
  t.saved_median = negated(v.saved_median);
  t.saved_low = negated(v.saved_high);
  t.saved_high = negated(v.saved_low);
  return t;
}

std::vector<Verdict> verdicts(const RunResult& run) {
  std::vector<Verdict> out;
  const SpeedupArms head = speedup_arms(run.config);
  if (auto v = compare_pair(run, head.slow, head.fast)) out.push_back(*v);
  for (Arm slow : {Arm::unregistered, Arm::pageable, Arm::hostalloc}) {
    if (slow == head.slow) continue;
    if (auto v = compare_pair(run, slow, Arm::registered)) out.push_back(*v);
  }
  return out;
}

std::string advice_withheld(const RunResult& run, const Verdict& v) {
  if (v.conclusive) return "";
  if (!v.applicable) return "nothing is registered on the CPU device; run on cuda or xpu";
  if (const std::string shared = shared_device(run); !shared.empty()) {
    return "the verdict is inconclusive: another process used the device (" + shared +
           "); run again with the device to itself";
  }
  if (v.rounds < 2 || !v.low || !v.high) {
    return fmt::format(
        "the verdict is inconclusive: {} round{} in which both arms completed give{} no "
        "interval; run with --repeats 5 or more",
        v.rounds, v.rounds == 1 ? "" : "s", v.rounds == 1 ? "s" : "");
  }
  return fmt::format(
      "the verdict is inconclusive: its interval {:.2f}-{:.2f} includes 1.0; raise --repeats",
      *v.low, *v.high);
}

std::string render_verdict_lines(const RunResult& run) {
  std::string out;
  if (run.sweep.size() <= 1) {
    for (const Verdict& v : verdicts(run)) out += "verdict: " + v.text + "\n";
    return out;
  }
  for (const SweepPoint& point : run.sweep) {
    for (const Verdict& v : verdicts(point_result(run, point))) {
      out += "verdict (" + point.label(ratio_shown(run.config)) + "): " + v.text + "\n";
    }
  }
  return out;
}

nlohmann::ordered_json verdicts_json(const RunResult& run) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  const auto number = [](const std::optional<double>& v) {
    return v ? finite_or_null(*v) : nlohmann::json(nullptr);
  };
  for (const Verdict& measured : verdicts(run)) {
    // `slow` and `fast` name the arms as measured (by the median over rounds, else the
    // averages): where the arm with the change was the slower, the pair and the ratios turn.
    const Verdict v = as_measured(measured);
    out.push_back({{"slow", to_string(v.slow)},
                   {"fast", to_string(v.fast)},
                   {"text", v.text},
                   {"applicable", v.applicable},
                   {"conclusive", v.conclusive},
                   {"ratio", finite_or_null(v.ratio)},
                   {"ratio_median", number(v.median)},
                   {"interval_low", number(v.low)},
                   {"interval_high", number(v.high)},
                   {"interval_confidence", number(v.confidence)},
                   {"rounds", v.rounds},
                   {"saved_s", finite_or_null(v.saved_s)}});
  }
  return out;
}

}  // namespace zob
