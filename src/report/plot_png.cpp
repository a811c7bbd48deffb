// The PNG canvas: Cairo, from Debian (libcairo2-dev): a maintained 2D library with
// antialiased shapes and text through fontconfig, which writes PNG itself (no libpng code
// here). Built only where CMake found it (ZOB_HAVE_CAIRO); elsewhere --plot FILE.png is
// refused with the package to install, never drawn some other way.
#include <fmt/format.h>

#include "report/output_file.hpp"
#include "report/plot.hpp"
#include "report/report.hpp"
#include "zob/errors.hpp"

#ifdef ZOB_HAVE_CAIRO
#include <cairo.h>
#include <unistd.h>

#include <memory>
#endif

namespace zob {

#ifdef ZOB_HAVE_CAIRO

namespace {

class CairoCanvas final : public Canvas {
 public:
  explicit CairoCanvas(cairo_t* cr) : cr_(cr) {}
  void rect(double x, double y, double w, double h, Rgb fill, const std::string&,
            const std::string&) override {
    if (w <= 0 || h <= 0) return;
    cairo_set_source_rgb(cr_, fill.r, fill.g, fill.b);
    cairo_rectangle(cr_, x, y, w, h);
    cairo_fill(cr_);
  }
  void text(double x, double y, const std::string& s, double size, int anchor, bool bold,
            Rgb color) override {
    cairo_select_font_face(cr_, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL,
                           bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr_, size);
    cairo_text_extents_t ext{};
    cairo_text_extents(cr_, s.c_str(), &ext);
    const double dx = anchor == 1 ? -ext.x_advance / 2 : anchor == 2 ? -ext.x_advance : 0;
    cairo_set_source_rgb(cr_, color.r, color.g, color.b);
    cairo_move_to(cr_, x + dx, y);
    cairo_show_text(cr_, s.c_str());
  }
  void polyline(const std::vector<std::pair<double, double>>& points, Rgb color, double width,
                const std::string&) override {
    if (points.size() < 2) return;
    cairo_set_source_rgb(cr_, color.r, color.g, color.b);
    cairo_set_line_width(cr_, width);
    cairo_move_to(cr_, points.front().first, points.front().second);
    for (std::size_t i = 1; i < points.size(); ++i) {
      cairo_line_to(cr_, points[i].first, points[i].second);
    }
    cairo_stroke(cr_);
  }

 private:
  cairo_t* cr_;
};

}  // namespace

bool plot_png_available() { return true; }

void write_chart_png(const std::vector<ChartInput>& inputs, const std::string& path) {
  // Cairo keeps its font caches (and the fontconfig patterns behind them) for the life of the
  // process. A run draws one chart, so give them back once the surface is gone (declared first,
  // destroyed last): otherwise LeakSanitizer reports fontconfig's allocations as leaks.
  struct ReleaseCairoCaches {
    ~ReleaseCairoCaches() { cairo_debug_reset_static_data(); }
  } release_caches;
  const auto [w, h] = chart_size(inputs);
  const std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> surface(
      cairo_image_surface_create(CAIRO_FORMAT_RGB24, w, h), &cairo_surface_destroy);
  if (cairo_surface_status(surface.get()) != CAIRO_STATUS_SUCCESS) {
    throw UsageError(fmt::format("cannot draw a {}x{} chart: {}; compare fewer files", w, h,
                                 cairo_status_to_string(cairo_surface_status(surface.get()))));
  }
  {
    const std::unique_ptr<cairo_t, decltype(&cairo_destroy)> cr(cairo_create(surface.get()),
                                                                &cairo_destroy);
    cairo_set_source_rgb(cr.get(), 1, 1, 1);
    cairo_paint(cr.get());
    CairoCanvas canvas(cr.get());
    draw_chart(inputs, canvas);
    if (cairo_status(cr.get()) != CAIRO_STATUS_SUCCESS) {
      throw UsageError(
          fmt::format("cannot draw the chart: {}", cairo_status_to_string(cairo_status(cr.get()))));
    }
  }
  // Encoded in memory, then written as every output file is (a FIFO or /dev/stdout too).
  std::string png;
  const auto append = [](void* closure, const unsigned char* data, unsigned int length) {
    static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
    return CAIRO_STATUS_SUCCESS;
  };
  const cairo_status_t st = cairo_surface_write_to_png_stream(surface.get(), append, &png);
  if (st != CAIRO_STATUS_SUCCESS) {
    throw UsageError(fmt::format("cannot encode the chart {}: {}; check free memory", path,
                                 cairo_status_to_string(st)));
  }
  write_output_file(path, png);
}

#else

bool plot_png_available() { return false; }

void write_chart_png(const std::vector<ChartInput>&, const std::string& path) {
  check_plot_path(path, "the chart");  // throws: names the package to install
}

#endif

}  // namespace zob
