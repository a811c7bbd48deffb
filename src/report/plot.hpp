// The chart file (--plot FILE, `plot FILE... --out CHART`): per result, its arms' phases as
// stacked bars and every timed step's time as a line, results side by side. SVG is written
// as text (names stay searchable, each bar carries its arm, phase and milliseconds); PNG is
// drawn by Cairo (Debian's libcairo2-dev), present when the build found it.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace zob {

struct ChartInput {
  std::string label;   // the column's title: a file name, or "this run"
  nlohmann::json doc;  // a DRIVERRESULT document
};

// True when this build can write PNG (it was built with Cairo).
bool plot_png_available();

// Refuses (UsageError naming `flag`) a chart path this build cannot write: an extension other
// than .svg / .png, or .png without Cairo.
void check_plot_path(const std::string& path, const std::string& flag);

// Renders the chart to `path` (.svg or .png) through a temporary file and rename. Throws
// UsageError when the file cannot be written.
void write_chart(const std::vector<ChartInput>& inputs, const std::string& path);

// ---- internals shared by plot.cpp and plot_png.cpp ----

struct Rgb {
  double r = 0, g = 0, b = 0;
};

// What the chart is drawn on. Coordinates in pixels from the top left.
class Canvas {
 public:
  virtual ~Canvas() = default;
  // `meta`: attributes for the SVG's element (class, data-*), ignored by the raster canvas.
  virtual void rect(double x, double y, double w, double h, Rgb fill, const std::string& meta,
                    const std::string& tooltip) = 0;
  // anchor: 0 start, 1 middle, 2 end; y is the baseline.
  virtual void text(double x, double y, const std::string& s, double size, int anchor, bool bold,
                    Rgb color) = 0;
  virtual void polyline(const std::vector<std::pair<double, double>>& points, Rgb color,
                        double width, const std::string& meta) = 0;
};

// Draws the chart of `inputs` on `canvas`; returns nothing, sizes come from chart_size.
void draw_chart(const std::vector<ChartInput>& inputs, Canvas& canvas);
// Width and height in pixels of the chart of `inputs`.
std::pair<int, int> chart_size(const std::vector<ChartInput>& inputs);

// PNG through Cairo (plot_png.cpp); throws UsageError when the build has no Cairo.
void write_chart_png(const std::vector<ChartInput>& inputs, const std::string& path);

}  // namespace zob
