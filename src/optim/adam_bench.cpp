// `adam` subcommand's measurement: CPU Adam throughput next to a same-run memory-bandwidth
// probe of the same shape, so a user can see how close the optimiser gets to the memory limit
// on their own box (docs/anatomy.md §6: figures differ from one machine to the next, so only a
// ratio taken in one run is comparable).
//
// The separate Adam + cast and the fused pass are timed beside them (AdamBenchResult).
//
// Bytes are counted at 28 B/param for both Adam and the probe: reads of p, g, m, v (16 B) and
// writes of p, m, v (12 B). Both update in place, so every written line was just read and no
// extra write-allocate read happens; none is counted. The ratio compares like with like.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "optim/adam_kernels.hpp"
#include "zob/adam.hpp"
#include "zob/adam_bench.hpp"
#include "zob/clock.hpp"
#include "zob/errors.hpp"
#include "zob/host_memory.hpp"
#include "zob/stats.hpp"
#include "zob/thread_pool.hpp"

namespace zob {
namespace {

constexpr double kBytesPerParam = 28.0;
constexpr std::int64_t kAlign = 64;  // the split adam_step uses (adam.cpp)

// MemAvailable from /proc/meminfo in bytes, 0 if unknown.
std::uint64_t mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  std::uint64_t kb = 0;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

// A counter-based generator: the value of element i depends only on (seed, array, i), so the
// data are the same whatever the thread split that writes them.
inline std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline float uniform(std::uint64_t seed, std::uint64_t array, std::int64_t i) {
  const std::uint64_t r = mix(seed ^ (array << 56) ^ static_cast<std::uint64_t>(i));
  return static_cast<float>(r >> 40) * (2.0f / 16777216.0f) - 1.0f;  // [-1, 1)
}

template <class Fn>
double seconds(Fn&& fn) {
  const auto t0 = Clock::now();
  fn();
  return seconds_since(t0);
}

void check_options(const AdamBenchOptions& o) {
  if (o.params < 1) {
    throw UsageError(fmt::format("adam benchmark: params = {} must be >= 1", o.params));
  }
  if (o.threads < 0) {
    throw UsageError(
        fmt::format("adam benchmark: threads = {} must be >= 0 (0: all CPUs)", o.threads));
  }
  if (o.repeats < 1) {
    throw UsageError(fmt::format("adam benchmark: repeats = {} must be >= 1", o.repeats));
  }
  // The four fp32 arrays and the bf16 copy of the master: a --params the host cannot hold is
  // bad input (exit 2), named with what it needs and what the host has.
  constexpr std::uint64_t kBytes = 4 * sizeof(float) + 2;
  const std::uint64_t need = static_cast<std::uint64_t>(o.params) * kBytes;
  const std::uint64_t avail = mem_available();
  if (avail != 0 && need > avail) {
    throw UsageError(
        fmt::format("adam --params {} needs {:.2f} GB of host memory ({} B per parameter: 4 fp32 "
                    "arrays and a bf16 one), this host has {:.2f} GB available (MemAvailable); "
                    "give --params {} or fewer",
                    o.params, static_cast<double>(need) / 1e9, kBytes,
                    static_cast<double>(avail) / 1e9, avail / kBytes));
  }
}

// The four fp32 arrays of Adam in the same host memory the step gives the Adam states
// (page-aligned, transparent huge pages where the kernel offers them), so this measures the
// optimiser as the step runs it; first touched by the split adam_step uses, so each
// thread's pages are local to it.
struct AdamArrays {
  AdamArrays(std::int64_t n, std::uint64_t seed, ThreadPool& pool)
      : hp(buffer(n, "params")),
        hg(buffer(n, "grads")),
        hm(buffer(n, "exp_avg")),
        hv(buffer(n, "exp_avg_sq")),
        hb(static_cast<std::size_t>(n) * 2, HostMemoryMode::pageable, nullptr,
           "adam benchmark bf16 params") {
    pool.parallel_for(
        n,
        [&](std::int64_t b, std::int64_t e) {
          for (std::int64_t i = b; i < e; ++i) {
            p()[i] = uniform(seed, 0, i);
            g()[i] = 1e-2f * uniform(seed, 1, i);
            m()[i] = 1e-3f * uniform(seed, 2, i);
            const float s = uniform(seed, 3, i);
            v()[i] = 1e-5f * s * s;
            bf()[i] = 0;  // first touch by the same split
          }
        },
        kAlign);
  }
  static HostBuffer buffer(std::int64_t n, const char* name) {
    return HostBuffer(static_cast<std::size_t>(n) * sizeof(float), HostMemoryMode::pageable,
                      nullptr, std::string("adam benchmark ") + name);
  }
  float* p() const { return hp.as<float>(); }
  float* g() const { return hg.as<float>(); }
  float* m() const { return hm.as<float>(); }
  float* v() const { return hv.as<float>(); }
  std::uint16_t* bf() const { return hb.as<std::uint16_t>(); }
  HostBuffer hp, hg, hm, hv, hb;
};

}  // namespace

namespace {

// Median, slowest and fastest rate (Gparam/s) of n elements over per-repeat times.
void rates(std::int64_t n, const std::vector<double>& t, double& med, double& lo, double& hi) {
  const auto [fastest, slowest] = std::minmax_element(t.begin(), t.end());
  med = static_cast<double>(n) / median(t) / 1e9;
  lo = static_cast<double>(n) / *slowest / 1e9;
  hi = static_cast<double>(n) / *fastest / 1e9;
}

// The separate passes against the fused one: rates, and the speedup per repeat (each pair
// ran back to back, so a neighbour's burst of load hits both alike).
void fill_fused(AdamBenchResult& res, const std::vector<double>& separate_s,
                const std::vector<double>& fused_s) {
  rates(res.params, separate_s, res.separate_gparams_per_s, res.separate_min, res.separate_max);
  rates(res.params, fused_s, res.fused_gparams_per_s, res.fused_min, res.fused_max);
  std::vector<double> speedup;
  for (std::size_t i = 0; i < fused_s.size(); ++i) speedup.push_back(separate_s[i] / fused_s[i]);
  const auto [lo, hi] = std::minmax_element(speedup.begin(), speedup.end());
  res.fused_speedup = median(speedup);
  res.fused_speedup_min = *lo;
  res.fused_speedup_max = *hi;
}

}  // namespace

AdamBenchResult run_adam_benchmark(const AdamBenchOptions& o) {
  check_options(o);
  const detail::AdamIsa isa = detail::selected_isa();
  const int threads = o.threads > 0 ? o.threads : available_cpus();
  const std::int64_t n = o.params;
  ThreadPool pool(threads);
  const AdamArrays a(n, o.seed, pool);

  const AdamHyper hyper;
  const detail::ProbeRangeFn probe_kernel = detail::probe_kernel(isa);
  const std::uint32_t probe_mask = detail::probe_mask();
  int step = 0;
  auto adam = [&] {
    detail::adam_step_isa(isa, a.p(), a.g(), a.m(), a.v(), n, ++step, hyper, pool);
  };
  // The probe: same arrays, same threads, same ranges, same loads and stores (and no change).
  auto probe = [&] {
    pool.parallel_for(
        n,
        [&](std::int64_t b, std::int64_t e) {
          probe_kernel(a.p() + b, a.g() + b, a.m() + b, a.v() + b, e - b, probe_mask);
        },
        kAlign);
  };
  // What the step's --offload-param loop does after Adam: the master cast into the bf16 copy.
  auto separate = [&] {
    adam();
    detail::cast_f32_to_bf16_isa(isa, a.p(), a.bf(), n, pool);
  };
  auto fused = [&] {
    detail::adam_step_cast_isa(isa, a.p(), a.g(), a.m(), a.v(), a.bf(), n, ++step, hyper, pool);
  };
  adam();
  probe();
  separate();
  fused();
  // Interleaved, so a neighbour's burst of load hits every measurement alike.
  std::vector<double> adam_s, probe_s, separate_s, fused_s;
  for (int r = 0; r < o.repeats; ++r) {
    adam_s.push_back(seconds(adam));
    probe_s.push_back(seconds(probe));
    separate_s.push_back(seconds(separate));
    fused_s.push_back(seconds(fused));
  }

  AdamBenchResult res;
  res.isa = detail::to_string(isa);
  res.threads = threads;
  res.params = n;
  res.repeats = o.repeats;
  const double adam_t = median(adam_s), probe_t = median(probe_s);
  res.adam_gparams_per_s = static_cast<double>(n) / adam_t / 1e9;
  res.adam_gb_per_s = res.adam_gparams_per_s * kBytesPerParam;
  res.probe_gb_per_s = static_cast<double>(n) * kBytesPerParam / probe_t / 1e9;
  res.ratio = res.adam_gb_per_s / res.probe_gb_per_s;
  fill_fused(res, separate_s, fused_s);
  return res;
}

nlohmann::json AdamBenchResult::to_json() const {
  return {{"isa", isa},
          {"threads", threads},
          {"params", params},
          {"adam_gparams_per_s", adam_gparams_per_s},
          {"adam_gb_per_s", adam_gb_per_s},
          {"probe_gb_per_s", probe_gb_per_s},
          {"ratio", ratio},
          {"repeats", repeats},
          {"separate_gparams_per_s", separate_gparams_per_s},
          {"separate_gparams_per_s_min", separate_min},
          {"separate_gparams_per_s_max", separate_max},
          {"fused_gparams_per_s", fused_gparams_per_s},
          {"fused_gparams_per_s_min", fused_min},
          {"fused_gparams_per_s_max", fused_max},
          {"fused_speedup", fused_speedup},
          {"fused_speedup_min", fused_speedup_min},
          {"fused_speedup_max", fused_speedup_max}};
}

std::string AdamBenchResult::to_text() const {
  return fmt::format(
      "CPU Adam ({}, {} threads, {} params, median of {}): {:.3f} Gparam/s = {:.1f} GB/s\n"
      "memory probe (same arrays, threads and ranges; read p,g,m,v, write p,m,v): {:.1f} GB/s\n"
      "adam / probe: {:.2f}  (both counted at 28 B/param; updates are in place, so there are "
      "no write-allocate reads and none are counted)\n"
      "Adam + bf16 cast, separate passes (Adam, then the cast of the master): {:.3f} Gparam/s "
      "(repeats {:.3f} .. {:.3f})\n"
      "Adam + bf16 cast, fused (one pass, 30 B/param): {:.3f} Gparam/s (repeats {:.3f} .. {:.3f})\n"
      "fused / separate: {:.3f}x (median of the per-repeat ratios; {:.3f} .. {:.3f})\n",
      isa, threads, params, repeats, adam_gparams_per_s, adam_gb_per_s, probe_gb_per_s, ratio,
      separate_gparams_per_s, separate_min, separate_max, fused_gparams_per_s, fused_min, fused_max,
      fused_speedup, fused_speedup_min, fused_speedup_max);
}

}  // namespace zob
