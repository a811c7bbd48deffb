// `adam` subcommand's measurement: CPU Adam throughput next to a same-run memory-bandwidth
// probe of the same shape, so a user can see how close the optimiser gets to the memory limit
// on their own box (docs/anatomy.md §6: figures differ from one machine to the next, so only a
// ratio taken in one run is comparable).
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
#include "zob/errors.hpp"
#include "zob/host_memory.hpp"
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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

template <class Fn>
double seconds(Fn&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

AdamBenchResult run_adam_benchmark(const AdamBenchOptions& o) {
  if (o.params < 1) {
    throw UsageError(fmt::format("adam benchmark: params = {} must be >= 1", o.params));
  }
  if (o.threads < 0) {
    throw UsageError(fmt::format("adam benchmark: threads = {} must be >= 0 (0: all CPUs)",
                                 o.threads));
  }
  if (o.repeats < 1) {
    throw UsageError(fmt::format("adam benchmark: repeats = {} must be >= 1", o.repeats));
  }
  const detail::AdamIsa isa = detail::selected_isa();
  const int threads = o.threads > 0 ? o.threads : available_cpus();
  const std::int64_t n = o.params;
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
  const std::uint64_t need = 4ull * bytes;
  const std::uint64_t avail = mem_available();
  if (avail != 0 && need > avail) {
    throw DeviceError(DeviceErrorKind::out_of_memory,
                      fmt::format("adam benchmark: {} params need {:.2f} GB of host memory "
                                  "(4 fp32 arrays), only {:.2f} GB available; lower --params",
                                  n, static_cast<double>(need) / 1e9,
                                  static_cast<double>(avail) / 1e9));
  }
  // The same host memory the step gives the Adam states (page-aligned, transparent huge pages
  // where the kernel offers them), so this measures the optimiser as the step runs it.
  auto buffer = [bytes](const char* name) {
    return HostBuffer(bytes, HostMemoryMode::pageable, nullptr, std::string("adam benchmark ") + name);
  };
  const HostBuffer hp = buffer("params"), hg = buffer("grads"), hm = buffer("exp_avg"), hv = buffer("exp_avg_sq");
  float* const p = hp.as<float>();
  float* const g = hg.as<float>();
  float* const m = hm.as<float>();
  float* const v = hv.as<float>();
  ThreadPool pool(threads);

  // First touch by the same split adam_step uses, so each thread's pages are local to it.
  const std::uint64_t seed = o.seed;
  pool.parallel_for(n, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      p[i] = uniform(seed, 0, i);
      g[i] = 1e-2f * uniform(seed, 1, i);
      m[i] = 1e-3f * uniform(seed, 2, i);
      const float s = uniform(seed, 3, i);
      v[i] = 1e-5f * s * s;
    }
  }, kAlign);

  const AdamHyper hyper;
  const detail::ProbeRangeFn probe_kernel = detail::probe_kernel(isa);
  int step = 0;
  auto adam = [&] {
    detail::adam_step_isa(isa, p, g, m, v, n, ++step, hyper, pool);
  };
  // The probe: same arrays, same threads, same ranges, same loads and stores, one add each.
  auto probe = [&] {
    pool.parallel_for(n, [&](std::int64_t b, std::int64_t e) {
      probe_kernel(p + b, g + b, m + b, v + b, e - b);
    }, kAlign);
  };

  adam();
  probe();
  // Interleaved, so a neighbour's burst of load hits both measurements alike.
  std::vector<double> adam_s, probe_s;
  for (int r = 0; r < o.repeats; ++r) {
    adam_s.push_back(seconds(adam));
    probe_s.push_back(seconds(probe));
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
          {"repeats", repeats}};
}

std::string AdamBenchResult::to_text() const {
  return fmt::format(
      "CPU Adam ({}, {} threads, {} params, median of {}): {:.3f} Gparam/s = {:.1f} GB/s\n"
      "memory probe (same arrays, threads and ranges; read p,g,m,v, write p,m,v): {:.1f} GB/s\n"
      "adam / probe: {:.2f}  (both counted at 28 B/param; updates are in place, so there are "
      "no write-allocate reads and none are counted)\n",
      isa, threads, params, repeats, adam_gparams_per_s, adam_gb_per_s, probe_gb_per_s, ratio);
}

}  // namespace zob
