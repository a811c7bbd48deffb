// The host clock every layer measures with, and its two conversions to seconds.
#pragma once
#include <chrono>

namespace zob {

using Clock = std::chrono::steady_clock;

// Seconds from a to b.
inline double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
// Seconds from t0 to now.
inline double seconds_since(Clock::time_point t0) { return seconds_between(t0, Clock::now()); }

}  // namespace zob
