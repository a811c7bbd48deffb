#include "report/table.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <cstring>

#include "report/report.hpp"
#include "report/verdict.hpp"

namespace zob {

namespace {

// One printer per script version; the loop over a sweep's configurations is shared.
class TablePrinter : public Reporter {
 public:
  std::string render(const ReportContext& context) const final {
    const RunResult& run = context.run;
    if (run.sweep.size() <= 1) return arms_table(run);
    std::string out;
    for (std::size_t i = 0; i < run.sweep.size(); ++i) {
      const SweepPoint& point = run.sweep[i];
      if (i > 0) out += "\n";
      out += point.label(ratio_shown(run.config)) + "\n";
      out += arms_table(point_result(run, point));
    }
    return out;
  }

 protected:
  // The table of one configuration, then its summary line.
  virtual std::string arms_table(const RunResult& run) const = 0;

  // The header and one row per arm (a failed arm: FAILED and its error), the names
  // `name_width` wide, the peak column `peak_width` (or its title's width + 1) wide.
  static std::string arm_rows(const RunResult& run, int name_width, int peak_width,
                              std::string (*seconds)(double)) {
    // The CPU device has no GPU: its peak is the device's (host) allocations.
    const char* peak = registration_applicable(run) ? "GPU peak (GB)" : "device peak (GB)";
    const int peak_w = std::max(peak_width, static_cast<int>(std::strlen(peak)) + 1);
    std::string out = fmt::format("{:<{}}{:>14}{:>14}{:>{}}\n", "arm", name_width, "avg step (s)",
                                  "min step (s)", peak, peak_w);
    for (const auto& a : run.arms) {
      const std::string label = arm_label(run.config, a.arm);
      if (a.ok) {
        out += fmt::format("{:<{}}{:>14}{:>14}{:>{}.2f}\n", label, name_width,
                           seconds(a.step_avg_s), seconds(a.step_min_s), a.gpu_peak_gb, peak_w);
      } else {
        out += fmt::format("{:<{}}FAILED: {}\n", label, name_width, a.error);
      }
    }
    return out;
  }

  // "<prefix>speedup: ..." when the speedup is computable, else "".
  static std::string speedup_line(const RunResult& run, const char* prefix) {
    const auto s = speedup(run);
    if (!s) return "";
    const SpeedupArms pair = speedup_arms(run.config);
    const ArmResult* fast = find_ok_arm(run, pair.fast);
    const ArmResult* slow = find_ok_arm(run, pair.slow);
    const double saved = slow->step_avg_s - fast->step_avg_s;
    const double tps_fast = static_cast<double>(fast->tokens_per_step) / fast->step_avg_s;
    const double tps_slow =
        slow->step_avg_s > 0 ? static_cast<double>(slow->tokens_per_step) / slow->step_avg_s : 0.0;
    return fmt::format(
        "{}speedup: {:.2f}x   saved: {:.3f} s/step   throughput: {:.0f} vs {:.0f} "
        "tok/s\n",
        prefix, *s, saved, tps_fast, tps_slow);
  }
};

// DeepSpeed PR #8618's script: registered / unregistered.
class V1Table final : public TablePrinter {
  std::string arms_table(const RunResult& run) const override {
    return arm_rows(run, 14, 15, &seconds_text) + speedup_line(run, "");
  }
  static std::string seconds_text(double v) {
    return std::isfinite(v) ? fmt::format("{:.4f}", v) : "nan";
  }
};

// DeepSpeedExamples benchmarks/pin_memory: its banner, then unpinned / pinned.
class V2Table final : public TablePrinter {
  std::string arms_table(const RunResult& run) const override {
    std::string out;
    if (!run.arms.empty()) {
      const ArmResult& a = run.arms.front();
      out += "\n================ ZeRO-3 CPU-offload step time ================\n";
      // params_b as Python prints a float: 0.534, 1.336, 0.0
      const std::string params_b = a.params_b == std::floor(a.params_b)
                                       ? fmt::format("{:.1f}", a.params_b)
                                       : fmt::format("{}", a.params_b);
      out += fmt::format("model: {}  params: {}B  device: {}\n", a.model, params_b, a.device);
      out += fmt::format("batch: {} x seq: {}  ({} tokens/step)\n\n", a.batch, a.seq,
                         a.tokens_per_step);
    }
    out += arm_rows(run, 22, 16, &seconds_text);
    const std::string summary = speedup_line(run, "pinning ");
    return summary.empty() ? out : out + "\n" + summary;
  }
  static std::string seconds_text(double v) { return fmt::format("{:.3f}", v); }
};

}  // namespace

std::unique_ptr<Reporter> compat_table_reporter(Compat compat) {
  if (compat == Compat::v2) return std::make_unique<V2Table>();
  return std::make_unique<V1Table>();
}

std::string render_table(const RunResult& run) {
  const nlohmann::ordered_json unused;  // the tables do not read DRIVERRESULT
  return compat_table_reporter(run.config.compat)->render({run, unused});
}

}  // namespace zob
