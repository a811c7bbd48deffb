#include "report/glance.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <vector>

#include "report/details.hpp"
#include "report/report.hpp"
#include "zob/phase.hpp"
#include "zob/stats.hpp"

namespace zob {

namespace {

constexpr int kBarWidth = 40;

struct BarRow {
  std::string phase;  // "" continues the phase of the row above
  std::string arm;
  double seconds = 0;
};

// The phase's time in a step: device events where the phase has them, else the host's.
double phase_seconds(const nlohmann::json& p) {
  const auto dev = p.find("device_s");
  if (dev != p.end() && dev->is_number()) return dev->get<double>();
  const auto host = p.find("host_s");
  return host != p.end() && host->is_number() ? host->get<double>() : 0.0;
}

std::vector<std::string> phase_order(const std::vector<const ArmResult*>& arms) {
  std::vector<std::string> names;
  std::vector<nlohmann::json> all;
  for (const ArmResult* a : arms) all.push_back(phases_json(*a));
  for (Phase p : kAllPhases) {
    for (const auto& j : all) {
      if (j.contains(to_string(p))) {
        names.emplace_back(to_string(p));
        break;
      }
    }
  }
  for (const auto& j : all) {
    for (const auto& [n, v] : j.items()) {
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    }
  }
  return names;
}

}  // namespace

std::string unicode_bar(double value, double scale, int width) {
  if (!(value > 0) || !(scale > 0) || width <= 0) return "";
  static const char* const kEighths[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
  const long eighths = std::lround(std::min(value / scale, 1.0) * width * 8);
  std::string out;
  for (long i = 0; i < eighths / 8; ++i) out += "█";
  out += kEighths[eighths % 8];
  if (out.empty()) out = "▏";  // a phase that ran shows, however short
  return out;
}

std::string render_phase_bars(const RunResult& run) {
  std::vector<const ArmResult*> arms;
  for (const auto& a : run.arms) {
    if (a.ok && !a.samples.empty()) arms.push_back(&a);
  }
  const std::vector<std::string> names = phase_order(arms);
  if (names.empty()) return "";
  std::vector<BarRow> rows;
  for (const auto& n : names) {
    bool first = true;
    for (const ArmResult* a : arms) {
      const nlohmann::json phases = phases_json(*a);
      if (!phases.contains(n)) continue;
      rows.push_back({first ? n : "", arm_label(run.config, a->arm), phase_seconds(phases[n])});
      first = false;
    }
  }
  bool first = true;
  for (const ArmResult* a : arms) {
    rows.push_back(
        {first ? "step (median)" : "", arm_label(run.config, a->arm), step_summary(*a).median});
    first = false;
  }
  double scale = 0;
  for (const auto& r : rows) scale = std::max(scale, r.seconds);
  std::size_t arm_w = 0;
  for (const auto& r : rows) arm_w = std::max(arm_w, r.arm.size());
  std::string out = fmt::format(
      "phases at a glance (median ms per timed step, device time where the phase has it; the "
      "longest bar is {:.3f} ms):\n",
      scale * 1e3);
  for (const auto& r : rows) {
    const std::string bar = unicode_bar(r.seconds, scale, kBarWidth);
    // Pad by columns, not bytes: every block character is one column.
    std::size_t cols = 0;
    for (unsigned char ch : bar) cols += (ch & 0xC0) != 0x80;
    out += fmt::format("  {:<15}{:<{}}  {}{} {:>10.3f} ms\n", r.phase, r.arm, arm_w, bar,
                       std::string(static_cast<std::size_t>(kBarWidth) + 1 - cols, ' '),
                       r.seconds * 1e3);
  }
  return out;
}

}  // namespace zob
