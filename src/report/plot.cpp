#include "report/plot.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>

#include "report/csv.hpp"
#include "report/output_file.hpp"
#include "report/report.hpp"
#include "zob/errors.hpp"
#include "zob/phase.hpp"

namespace zob {

namespace {

constexpr double kColumnWidth = 620;
constexpr double kNameWidth = 160;  // arm names left of the bars
constexpr double kBarSpan = 290;    // the longest stacked bar
constexpr double kStepPlotHeight = 170;
constexpr Rgb kInk{0.13, 0.13, 0.13};
constexpr Rgb kGrey{0.55, 0.55, 0.55};

// Tableau 10, a grey, a light blue and a light orange: one colour per phase of zob/phase.hpp, in
// its order.
constexpr Rgb kPhaseColors[] = {{0.12, 0.47, 0.71}, {1.00, 0.50, 0.05}, {0.17, 0.63, 0.17},
                                {0.84, 0.15, 0.16}, {0.58, 0.40, 0.74}, {0.55, 0.34, 0.29},
                                {0.89, 0.47, 0.76}, {0.50, 0.50, 0.50}, {0.74, 0.74, 0.13},
                                {0.09, 0.75, 0.81}, {0.35, 0.35, 0.35}, {0.68, 0.78, 0.91},
                                {1.00, 0.73, 0.47}};
static_assert(std::size(kPhaseColors) >= std::size(kAllPhases), "a colour for every phase");
// The arms' step lines: dark colours that no phase has, so a line never reads as a phase.
constexpr Rgb kArmColors[] = {{0.00, 0.00, 0.00}, {0.80, 0.00, 0.47}, {0.00, 0.36, 0.36},
                              {0.29, 0.00, 0.57}, {0.33, 0.42, 0.18}, {0.00, 0.13, 0.38},
                              {0.50, 0.00, 0.13}};

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

Rgb phase_color(const std::string& name) {
  const auto p = parse_phase(name);
  return p ? kPhaseColors[static_cast<int>(*p) % std::size(kPhaseColors)] : kGrey;
}

class NullCanvas final : public Canvas {
 public:
  void rect(double, double, double, double, Rgb, const std::string&, const std::string&) override {}
  void text(double, double, const std::string&, double, int, bool, Rgb) override {}
  void polyline(const std::vector<std::pair<double, double>>&, Rgb, double,
                const std::string&) override {}
};

struct Scales {
  double phase_total_s = 0;  // the longest stacked bar over every input
  double step_s = 0;         // the slowest step over every input
  std::size_t steps = 0;     // the most timed steps of any arm
};

std::vector<double> step_times(const nlohmann::json& arm) {
  std::vector<double> out;
  const auto it = arm.find("step_times_s");
  if (it == arm.end() || !it->is_array()) return out;
  for (const auto& t : *it) out.push_back(t.is_number() ? t.get<double>() : 0.0);
  return out;
}

double step_median(const nlohmann::json& arm) {
  const auto stats = arm.find("step_stats");
  if (stats == arm.end() || !stats->is_object()) return 0;
  const auto m = stats->find("median");
  return m != stats->end() && m->is_number() ? m->get<double>() : 0;
}

Scales scales_of(const std::vector<ChartInput>& inputs) {
  Scales s;
  for (const auto& in : inputs) {
    for (const auto& [name, arm] : result_arms(in.doc)) {
      double total = 0;
      for (const auto& [phase, sec] : arm_phase_seconds(*arm)) total += std::max(sec, 0.0);
      s.phase_total_s = std::max({s.phase_total_s, total, step_median(*arm)});
      const auto times = step_times(*arm);
      for (double t : times) s.step_s = std::max(s.step_s, t);
      s.steps = std::max(s.steps, times.size());
    }
  }
  return s;
}

// Up to three lines of at most `width` characters, broken at spaces.
std::vector<std::string> wrap(const std::string& text, std::size_t width) {
  std::vector<std::string> lines;
  std::string line;
  std::size_t pos = 0;
  while (pos < text.size() && lines.size() < 3) {
    std::size_t end = text.find(' ', pos);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(pos, end - pos);
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      lines.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    pos = end + 1;
  }
  if (!line.empty() && lines.size() < 3) lines.push_back(line);
  return lines;
}

std::string verdict_of(const nlohmann::json& doc) {
  const auto it = doc.find("verdicts");
  if (it == doc.end() || !it->is_array() || it->empty() || !(*it)[0].contains("text")) return "";
  return (*it)[0]["text"].is_string() ? (*it)[0]["text"].get<std::string>() : "";
}

// The stacked bars of one input; returns the y below them.
double draw_phase_bars(const ChartInput& in, const Scales& sc, double x0, double y, Canvas& cv) {
  cv.text(x0 + 20, y, "Phases of a step, stacked (median ms per timed step)", 13, 0, true, kInk);
  y += 14;
  // Phases overlap (copies under compute, Adam under copies): the stack can outgrow the step.
  cv.text(x0 + 20, y, "black tick: the step's median; phases overlap, so the stack may pass it", 10,
          0, false, kGrey);
  y += 8;
  std::vector<std::string> legend;
  for (const auto& [name, arm] : result_arms(in.doc)) {
    const auto phases = arm_phase_seconds(*arm);
    cv.text(x0 + 20, y + 14, name, 12, 0, false, kInk);
    double x = x0 + 20 + kNameWidth, total = 0;
    for (const auto& [phase, sec] : phases) {
      const double w = sc.phase_total_s > 0 ? std::max(sec, 0.0) / sc.phase_total_s * kBarSpan : 0;
      cv.rect(x, y, w, 18, phase_color(phase),
              fmt::format("class=\"phase\" data-arm=\"{}\" data-phase=\"{}\" data-ms=\"{:.4f}\"",
                          xml_escape(name), xml_escape(phase), sec * 1e3),
              fmt::format("{} {}: {:.3f} ms", name, phase, sec * 1e3));
      x += w;
      total += std::max(sec, 0.0);
      if (std::find(legend.begin(), legend.end(), phase) == legend.end()) legend.push_back(phase);
    }
    const double step = step_median(*arm);
    if (step > 0 && sc.phase_total_s > 0) {
      cv.rect(x0 + 20 + kNameWidth + step / sc.phase_total_s * kBarSpan - 1, y - 3, 2, 24, kInk,
              fmt::format("class=\"step-median\" data-arm=\"{}\" data-ms=\"{:.4f}\"",
                          xml_escape(name), step * 1e3),
              fmt::format("{} step median: {:.3f} ms", name, step * 1e3));
    }
    x = std::max(x, x0 + 20 + kNameWidth + step / std::max(sc.phase_total_s, 1e-300) * kBarSpan);
    cv.text(x + 6, y + 14, fmt::format("{:.1f} ms, step {:.1f}", total * 1e3, step * 1e3), 11, 0,
            false, kInk);
    y += 26;
  }
  y += 6;
  for (std::size_t i = 0; i < legend.size(); ++i) {
    const double lx = x0 + 20 + static_cast<double>(i % 4) * 145;
    const double ly = y + static_cast<double>(i / 4) * 18;
    cv.rect(lx, ly, 10, 10, phase_color(legend[i]), "class=\"legend\"", legend[i]);
    cv.text(lx + 14, ly + 9, legend[i], 11, 0, false, kInk);
  }
  return y + static_cast<double>((legend.size() + 3) / 4) * 18 + 18;
}

// The time of every timed step of every arm, one line per arm; returns the y below it.
double draw_step_lines(const ChartInput& in, const Scales& sc, double x0, double y, Canvas& cv) {
  cv.text(x0 + 20, y, "Time of each timed step (ms)", 13, 0, true, kInk);
  y += 14;
  const double left = x0 + 80, right = x0 + kColumnWidth - 30;
  const double top = y, bottom = y + kStepPlotHeight;
  cv.polyline({{left, top}, {left, bottom}, {right, bottom}}, kGrey, 1, "class=\"axis\"");
  const double ymax = sc.step_s > 0 ? sc.step_s * 1.1 : 1;
  for (int k = 0; k <= 2; ++k) {
    const double v = ymax * k / 2;
    const double ty = bottom - (bottom - top) * k / 2;
    cv.text(left - 6, ty + 4, fmt::format("{:.1f}", v * 1e3), 10, 2, false, kGrey);
  }
  const std::size_t n = std::max<std::size_t>(sc.steps, 2);
  const auto x_of = [&](std::size_t i) {
    return left + 10 + (right - left - 20) * static_cast<double>(i) / static_cast<double>(n - 1);
  };
  cv.text(x_of(0), bottom + 14, "1", 10, 1, false, kGrey);
  cv.text(x_of(n - 1), bottom + 14, std::to_string(n), 10, 1, false, kGrey);
  cv.text((left + right) / 2, bottom + 14, "timed step", 10, 1, false, kGrey);
  std::size_t k = 0;
  double ly = bottom + 34;
  for (const auto& [name, arm] : result_arms(in.doc)) {
    // A colour per arm name, the same in every column.
    const Rgb color = kArmColors[static_cast<std::size_t>(arm_rank(name)) % std::size(kArmColors)];
    std::vector<std::pair<double, double>> pts;
    const auto times = step_times(*arm);
    for (std::size_t i = 0; i < times.size(); ++i) {
      pts.emplace_back(x_of(i), bottom - (bottom - top) * times[i] / ymax);
    }
    cv.polyline(pts, color, 2, fmt::format("class=\"steps\" data-arm=\"{}\"", xml_escape(name)));
    for (const auto& [px, py] : pts) {
      cv.rect(px - 2.5, py - 2.5, 5, 5, color, "class=\"step\"", name);
    }
    const double lx = x0 + 20 + static_cast<double>(k % 3) * 190;
    cv.rect(lx, ly - 9, 10, 10, color, "class=\"legend\"", name);
    cv.text(lx + 14, ly, name, 11, 0, false, kInk);
    if (k % 3 == 2) ly += 18;
    ++k;
  }
  return ly + 24;
}

double draw_column(const ChartInput& in, const Scales& sc, double x0, Canvas& cv) {
  double y = 28;
  cv.text(x0 + 20, y, in.label, 16, 0, true, kInk);
  y += 20;
  for (const auto& line : wrap(verdict_of(in.doc), 88)) {
    cv.text(x0 + 20, y, line, 11, 0, false, kInk);
    y += 15;
  }
  y += 14;
  y = draw_phase_bars(in, sc, x0, y, cv);
  return draw_step_lines(in, sc, x0, y, cv);
}

std::string extension_of(const std::string& path) {
  const auto dot = path.find_last_of('.');
  const auto slash = path.find_last_of('/');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  std::string ext = path.substr(dot + 1);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

std::string svg_color(Rgb c) {
  return fmt::format("#{:02x}{:02x}{:02x}", static_cast<int>(std::lround(c.r * 255)),
                     static_cast<int>(std::lround(c.g * 255)),
                     static_cast<int>(std::lround(c.b * 255)));
}

class SvgCanvas final : public Canvas {
 public:
  std::string body;
  void rect(double x, double y, double w, double h, Rgb fill, const std::string& meta,
            const std::string& tooltip) override {
    body += fmt::format(
        "<rect {} x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" "
        "fill=\"{}\"><title>{}</title></rect>\n",
        meta, x, y, w, h, svg_color(fill), xml_escape(tooltip));
  }
  void text(double x, double y, const std::string& s, double size, int anchor, bool bold,
            Rgb color) override {
    static const char* const kAnchor[] = {"start", "middle", "end"};
    body += fmt::format(
        "<text x=\"{:.2f}\" y=\"{:.2f}\" font-size=\"{}\" text-anchor=\"{}\"{} "
        "fill=\"{}\">{}</text>\n",
        x, y, size, kAnchor[std::clamp(anchor, 0, 2)], bold ? " font-weight=\"bold\"" : "",
        svg_color(color), xml_escape(s));
  }
  void polyline(const std::vector<std::pair<double, double>>& points, Rgb color, double width,
                const std::string& meta) override {
    std::string pts;
    for (const auto& [x, y] : points) pts += fmt::format("{:.2f},{:.2f} ", x, y);
    body += fmt::format(
        "<polyline {} points=\"{}\" fill=\"none\" stroke=\"{}\" "
        "stroke-width=\"{}\"/>\n",
        meta, pts, svg_color(color), width);
  }
};

}  // namespace

std::pair<int, int> chart_size(const std::vector<ChartInput>& inputs) {
  NullCanvas null;
  const Scales sc = scales_of(inputs);
  double height = 0;
  for (const auto& in : inputs) height = std::max(height, draw_column(in, sc, 0, null));
  return {
      static_cast<int>(kColumnWidth * static_cast<double>(std::max<std::size_t>(inputs.size(), 1))),
      static_cast<int>(std::ceil(height))};
}

void draw_chart(const std::vector<ChartInput>& inputs, Canvas& canvas) {
  const Scales sc = scales_of(inputs);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    draw_column(inputs[i], sc, kColumnWidth * static_cast<double>(i), canvas);
  }
}

void check_plot_path(const std::string& path, const std::string& flag) {
  const std::string ext = extension_of(path);
  if (ext != "svg" && ext != "png") {
    throw UsageError(
        fmt::format("{} {}: the chart is written as SVG or PNG; give a file name "
                    "ending in .svg or .png",
                    flag, path));
  }
  if (ext == "png" && !plot_png_available()) {
    throw UsageError(
        fmt::format("{} {}: this build has no Cairo, which draws PNG; install "
                    "libcairo2-dev (scripts/deps) and rebuild, or write .svg",
                    flag, path));
  }
}

void write_chart(const std::vector<ChartInput>& inputs, const std::string& path) {
  check_plot_path(path, "the chart");
  if (extension_of(path) == "png") {
    write_chart_png(inputs, path);
    return;
  }
  SvgCanvas svg;
  draw_chart(inputs, svg);
  const auto [w, h] = chart_size(inputs);
  write_output_file(
      path, fmt::format("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg "
                        "xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
                        "viewBox=\"0 0 {} {}\" font-family=\"DejaVu Sans, sans-serif\">\n"
                        "<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n"
                        "{}</svg>\n",
                        w, h, w, h, w, h, svg.body));
}

}  // namespace zob
