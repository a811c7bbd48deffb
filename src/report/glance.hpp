// Pictures in the terminal: one bar per phase per arm, proportional to its median time, so the
// difference between the arms is seen before it is read.
#pragma once
#include <string>

#include "zob/result.hpp"

namespace zob {

// A bar of `value / scale * width` columns in Unicode block characters (eighths for the last
// column); "" for a value <= 0 or a scale <= 0.
std::string unicode_bar(double value, double scale, int width);

// "phases at a glance" and one row per phase per completed arm (the arms of a phase next to
// each other), then each arm's step; "" when no arm has phases.
std::string render_phase_bars(const RunResult& run);

}  // namespace zob
