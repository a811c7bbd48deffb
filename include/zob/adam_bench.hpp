// `zero3-offload-bench adam`: CPU Adam throughput against a same-run memory-bandwidth probe of
// the same read/write shape, so anyone can check the optimiser on their own box; and Adam with
// the bf16 cast of the master, as two passes and fused into one.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace zob {

struct AdamBenchOptions {
  std::int64_t params = 500'000'000;
  int threads = 0;  // 0: the CPUs this process may use
  int repeats = 5;  // timed repeats after one warm-up; medians reported
  std::uint64_t seed = 42;
};

struct AdamBenchResult {
  std::string isa;  // adam_isa()
  int threads = 0;
  std::int64_t params = 0;
  double adam_gparams_per_s = 0;  // median
  double adam_gb_per_s = 0;       // at 28 B/param
  double probe_gb_per_s = 0;      // same-run bandwidth probe, same bytes counted the same way
  double ratio = 0;               // adam_gb_per_s / probe_gb_per_s
  int repeats = 0;                // timed repeats behind the medians (to_json key "repeats")
  // Adam followed by the bf16 cast of the updated master (the separate passes, 28 + 6 B/param)
  // against Adam fused with the cast (adam_step_cast, 30 B/param), timed in the same repeats,
  // interleaved with the two above. Rates in Gparam/s: the median and the slowest and fastest
  // repeat; speedup: separate time / fused time per repeat, its median, min and max.
  double separate_gparams_per_s = 0, separate_min = 0, separate_max = 0;
  double fused_gparams_per_s = 0, fused_min = 0, fused_max = 0;
  double fused_speedup = 0, fused_speedup_min = 0, fused_speedup_max = 0;
  nlohmann::json to_json() const;
  std::string to_text() const;  // the lines printed on stdout
};

// Throws UsageError on bad options, DeviceError(out_of_memory) when the buffers can't be had.
AdamBenchResult run_adam_benchmark(const AdamBenchOptions& options);

}  // namespace zob
