#include "zob/stats.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace zob {
namespace {

// Quantile with linear interpolation between closest ranks (numpy's default), on sorted data.
double quantile_sorted(const std::vector<double>& s, double q) {
  if (s.empty()) return 0;
  const double pos = q * static_cast<double>(s.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, s.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return s[lo] + (s[hi] - s[lo]) * frac;
}

double binomial_cdf_half(int n, int k) {    // P(X <= k), X ~ Binomial(n, 1/2)
  double sum = 0, term = std::pow(0.5, n);  // C(n,0) / 2^n
  for (int i = 0; i <= k; ++i) {
    sum += term;
    term = term * (n - i) / (i + 1);
  }
  return sum;
}

}  // namespace

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return quantile_sorted(v, 0.5);
}

Summary summarize(std::vector<double> v) {
  Summary s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  s.min = v.front();
  s.max = v.back();
  s.median = quantile_sorted(v, 0.5);
  s.p90 = quantile_sorted(v, 0.9);
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.stddev = std::sqrt(ss / static_cast<double>(v.size() - 1));
  }
  return s;
}

nlohmann::json to_json(const Summary& s) {
  return {
      {"n", s.n},     {"mean", s.mean},     {"median", s.median}, {"min", s.min},
      {"max", s.max}, {"stddev", s.stddev}, {"p90", s.p90},       {"rel_spread", s.rel_spread()}};
}

MedianInterval median_interval(std::vector<double> v) {
  MedianInterval r;
  if (v.empty()) return r;
  std::sort(v.begin(), v.end());
  r.median = quantile_sorted(v, 0.5);
  const int n = static_cast<int>(v.size());
  // Largest k with P(X <= k-1) <= 2.5 %: then [x_(k), x_(n-k+1)] (1-based) covers the median
  // with probability 1 - 2 P(X <= k-1) >= 95 %.
  int k = 0;
  while (k + 1 <= n / 2 && binomial_cdf_half(n, k) <= 0.025) ++k;
  if (k >= 1) {
    r.low = v[static_cast<std::size_t>(k - 1)];
    r.high = v[static_cast<std::size_t>(n - k)];
    r.confidence = 1 - 2 * binomial_cdf_half(n, k - 1);
    r.method = "order-statistics";
  } else {
    // Fewer than 6 values: no pair reaches 95 %, so the widest pair, min..max. It still
    // covers the median with a known probability, 1 - 2 / 2^n (0.9375 for 5 rounds, 0.75 for
    // 3); reporting 0 would call a 94 % interval worthless.
    r.low = v.front();
    r.high = v.back();
    r.confidence = 1 - 2 * binomial_cdf_half(n, 0);
    r.method = "range";
  }
  return r;
}

nlohmann::json summarize_phases(const ArmResult& arm) {
  struct Acc {
    std::vector<double> device_s, host_s;
    std::vector<double> bytes, params;
  };
  std::map<std::string, Acc> acc;
  const std::size_t first = static_cast<std::size_t>(std::max(arm.warmup, 0));
  for (std::size_t i = first; i < arm.samples.size(); ++i) {
    for (const auto& [name, p] : arm.samples[i].phases) {
      auto& a = acc[name];
      if (p.device_s >= 0) a.device_s.push_back(p.device_s);
      a.host_s.push_back(p.host_s);
      a.bytes.push_back(static_cast<double>(p.bytes));
      a.params.push_back(static_cast<double>(p.params));
    }
  }
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, a] : acc) {
    const Summary host = summarize(a.host_s);
    const double bytes = summarize(a.bytes).median;
    const double params = summarize(a.params).median;
    // bytes and params stay integers: the keys the earlier per-phase averages had.
    nlohmann::json j{{"host_s", host.median},
                     {"host_s_stats", to_json(host)},
                     {"bytes", static_cast<std::uint64_t>(std::llround(bytes))},
                     {"params", static_cast<std::int64_t>(std::llround(params))}};
    double time = host.median;
    if (!a.device_s.empty()) {
      const Summary dev = summarize(a.device_s);
      j["device_s"] = dev.median;
      j["device_s_stats"] = to_json(dev);
      time = dev.median;
    } else {
      j["device_s"] = nullptr;
    }
    j["gb_per_s"] =
        (time > 0 && bytes > 0) ? nlohmann::json(bytes / time / 1e9) : nlohmann::json(nullptr);
    if (params > 0) {
      j["gparams_per_s"] = time > 0 ? nlohmann::json(params / time / 1e9) : nlohmann::json(nullptr);
    }
    out[name] = std::move(j);
  }
  return out;
}

}  // namespace zob
