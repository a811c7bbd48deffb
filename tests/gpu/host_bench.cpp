// zob_gpu_host_bench [PARAMS [REPEATS]]: does the host memory reach the same rate when the
// step's DMA shares it? The physical bound (docs/schedules.md "Bounds") counts every copy's
// host bytes at the rate of a CPU-only probe; this measures, in one process and interleaved
// round by round, on the step's buffers (p, g and the bf16 copy registered; m, v pageable):
//   1. the probe alone (Adam's shape, 28 B/param) and Adam fused with the cast alone (30 B);
//   2. the step's DMA alone: the gradients' D2H (4 B/param) and the bf16 copy-back's H2D
//      (2 B/param) at once, in 2^26-element pieces, event-timed;
//   3. the probe, then the fused Adam, each with that DMA started beside it: the host bytes of
//      both over the wall time until both end, and the CPU pass's own rate;
//   4. the fused Adam beside the DMA on fewer threads (placement: cores left idle);
//   5. the probe over the first 2^26, 2^27, 2^28 elements only (the arm's probe covered 2^26:
//      does a footprint of a few L3 sizes read faster than the step's arrays?).
// Not a test: it asserts nothing. results/h200 records its output with the command.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_device.hpp"
#include "optim/adam_kernels.hpp"
#include "zob/errors.hpp"
#include "zob/host_memory.hpp"
#include "zob/thread_pool.hpp"

namespace {

using zob::CudaDevice;
using zob::HostBuffer;
using zob::HostMemoryMode;
using zob::Queue;
using zob::ThreadPool;
using Clock = std::chrono::steady_clock;
namespace detail = zob::detail;

constexpr std::int64_t kPiece = std::int64_t{1} << 26;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Buffers {
  Buffers(CudaDevice& dev, std::int64_t n, ThreadPool& pool)
      : p(f32(n, HostMemoryMode::registered, dev, "p", pool)),
        g(f32(n, HostMemoryMode::registered, dev, "g", pool)),
        m(f32(n, HostMemoryMode::pageable, dev, "m", pool)),
        v(f32(n, HostMemoryMode::pageable, dev, "v", pool)),
        landing(f32(n, HostMemoryMode::registered, dev, "gradient landing", pool)),
        bf(static_cast<std::size_t>(n) * 2, HostMemoryMode::registered, &dev, "bf16", &pool) {
    pool.parallel_for(n, [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        const float x = static_cast<float>((i * 2654435761u) >> 12 & 0xffff) / 65536.0f;
        p.as<float>()[i] = x - 0.5f;
        g.as<float>()[i] = 1e-2f * (0.5f - x);
        m.as<float>()[i] = 1e-3f * x;
        v.as<float>()[i] = 1e-5f * x * x;
      }
    });
  }
  static HostBuffer f32(std::int64_t n, HostMemoryMode mode, CudaDevice& dev, const char* name,
                        ThreadPool& pool) {
    return HostBuffer(static_cast<std::size_t>(n) * 4, mode, &dev, name, &pool);
  }
  HostBuffer p, g, m, v, landing, bf;
};

// The step's DMA: every gradient piece D2H on the d2h queue and every bf16 piece H2D on the
// h2d queue, enqueued at once (the queues run side by side, as in the step).
struct Dma {
  Dma(CudaDevice& device, std::int64_t elems) : dev(device), n(elems) {
    dgrad = dev.allocate(static_cast<std::size_t>(n) * 4);
    dparam = dev.allocate(static_cast<std::size_t>(n) * 2);
    dev.fill_zero(Queue::compute, dgrad, static_cast<std::size_t>(n) * 4);
    dev.fill_zero(Queue::compute, dparam, static_cast<std::size_t>(n) * 2);
    dev.synchronize();
    for (auto* e : {&d2h0, &d2h1, &h2d0, &h2d1}) *e = dev.create_event();
  }
  ~Dma() {
    dev.deallocate(dgrad);
    dev.deallocate(dparam);
  }
  void start(float* landing, const std::uint16_t* bf) {
    dev.record(*d2h0, Queue::d2h);
    dev.record(*h2d0, Queue::h2d);
    for (std::int64_t b = 0; b < n; b += kPiece) {
      const auto len = static_cast<std::size_t>(std::min(kPiece, n - b));
      dev.copy_to_host(Queue::d2h, landing + b, static_cast<const float*>(dgrad) + b, len * 4);
      dev.copy_to_device(Queue::h2d, static_cast<std::uint16_t*>(dparam) + b, bf + b, len * 2);
    }
    dev.record(*d2h1, Queue::d2h);
    dev.record(*h2d1, Queue::h2d);
  }
  double bytes() const { return static_cast<double>(n) * 6.0; }
  double d2h_s() { return dev.elapsed_seconds(*d2h0, *d2h1); }
  double h2d_s() { return dev.elapsed_seconds(*h2d0, *h2d1); }
  CudaDevice& dev;
  std::int64_t n;
  void* dgrad = nullptr;
  void* dparam = nullptr;
  std::unique_ptr<zob::DeviceEvent> d2h0, d2h1, h2d0, h2d1;
};

struct Row {
  std::string name;
  std::vector<double> cpu_gbs, total_gbs, wall_s;
};

void print(const Row& r) {
  const auto lo_hi = [](const std::vector<double>& v) {
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    return std::pair<double, double>{*lo, *hi};
  };
  const auto [clo, chi] = lo_hi(r.cpu_gbs);
  const auto [tlo, thi] = lo_hi(r.total_gbs);
  std::printf(
      "%-40s cpu pass %6.1f GB/s (%6.1f .. %6.1f)   all host bytes %6.1f GB/s (%6.1f .. %6.1f)"
      "   wall %.4f s\n",
      r.name.c_str(), median(r.cpu_gbs), clo, chi, median(r.total_gbs), tlo, thi, median(r.wall_s));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::int64_t n = argc > 1 ? std::atoll(argv[1]) : 1336049664;
    const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
    CudaDevice dev(0);
    ThreadPool pool(16);
    const detail::AdamIsa isa = detail::selected_isa();
    std::printf("zob_gpu_host_bench: %s, %lld params, %d rounds, ISA %s\n", dev.info().name.c_str(),
                static_cast<long long>(n), repeats, detail::to_string(isa));
    Buffers b(dev, n, pool);
    Dma dma(dev, n);
    const auto probe_k = detail::probe_kernel(isa);
    const std::uint32_t mask = detail::probe_mask();
    int step = 0;
    const zob::AdamHyper hyper;
    const auto probe = [&](ThreadPool& tp) {
      tp.parallel_for(n, [&](std::int64_t s, std::int64_t e) {
        probe_k(b.p.as<float>() + s, b.g.as<float>() + s, b.m.as<float>() + s, b.v.as<float>() + s,
                e - s, mask);
      });
    };
    const auto fused = [&](ThreadPool& tp) {
      detail::adam_step_cast_isa(isa, b.p.as<float>(), b.g.as<float>(), b.m.as<float>(),
                                 b.v.as<float>(), b.bf.data(), n, ++step, hyper, tp);
    };
    const double probe_bytes = 28.0 * static_cast<double>(n);
    const auto probe_prefix = [&](std::int64_t k) {
      pool.parallel_for(k, [&](std::int64_t s, std::int64_t e) {
        probe_k(b.p.as<float>() + s, b.g.as<float>() + s, b.m.as<float>() + s, b.v.as<float>() + s,
                e - s, mask);
      });
    };
    std::vector<Row> prefix_rows;
    std::vector<std::int64_t> prefixes;
    for (int e2 : {26, 27, 28}) {
      const std::int64_t k = std::int64_t{1} << e2;
      if (k >= n) break;
      prefixes.push_back(k);
      prefix_rows.push_back(
          {"probe over the first 2^" + std::to_string(e2) + " elements", {}, {}, {}});
    }
    const double fused_bytes = 30.0 * static_cast<double>(n);
    std::vector<std::unique_ptr<ThreadPool>> fewer;
    for (int t : {14, 12, 8}) fewer.push_back(std::make_unique<ThreadPool>(t));

    Row probe_alone{"probe alone (28 B/param)", {}, {}, {}};
    Row fused_alone{"fused Adam + cast alone (30 B/param)", {}, {}, {}};
    Row dma_alone{"DMA alone (D2H 4 B + H2D 2 B per param)", {}, {}, {}};
    Row probe_dma{"probe + DMA", {}, {}, {}};
    Row fused_dma{"fused Adam + DMA, 16 threads", {}, {}, {}};
    std::vector<Row> fewer_dma;
    for (auto& tp : fewer) {
      fewer_dma.push_back(
          {"fused Adam + DMA, " + std::to_string(tp->size()) + " threads", {}, {}, {}});
    }
    const auto alone = [&](Row& r, double bytes, const std::function<void()>& work) {
      const auto t0 = Clock::now();
      work();
      const double s = seconds_since(t0);
      r.cpu_gbs.push_back(bytes / s / 1e9);
      r.total_gbs.push_back(bytes / s / 1e9);
      r.wall_s.push_back(s);
    };
    const auto beside_dma = [&](Row& r, double bytes, const std::function<void()>& work) {
      const auto t0 = Clock::now();
      dma.start(b.landing.as<float>(), b.bf.as<std::uint16_t>());
      work();
      const double cpu = seconds_since(t0);
      dev.synchronize();
      const double wall = seconds_since(t0);
      r.cpu_gbs.push_back(bytes / cpu / 1e9);
      r.total_gbs.push_back((bytes + dma.bytes()) / wall / 1e9);
      r.wall_s.push_back(wall);
    };
    probe(pool);  // warm-up: pages, caches, threads
    fused(pool);
    for (int r = 0; r < repeats; ++r) {
      alone(probe_alone, probe_bytes, [&] { probe(pool); });
      alone(fused_alone, fused_bytes, [&] { fused(pool); });
      {
        const auto t0 = Clock::now();
        dma.start(b.landing.as<float>(), b.bf.as<std::uint16_t>());
        dev.synchronize();
        const double wall = seconds_since(t0);
        dma_alone.cpu_gbs.push_back(static_cast<double>(n) * 4 / dma.d2h_s() / 1e9);
        dma_alone.total_gbs.push_back(dma.bytes() / wall / 1e9);
        dma_alone.wall_s.push_back(wall);
      }
      for (std::size_t k = 0; k < prefixes.size(); ++k) {
        const double bytes = 28.0 * static_cast<double>(prefixes[k]);
        // As the arm probes: a warm-up pass, then 5 passes (it takes the fastest).
        probe_prefix(prefixes[k]);
        for (int i = 0; i < 5; ++i)
          alone(prefix_rows[k], bytes, [&] { probe_prefix(prefixes[k]); });
      }
      beside_dma(probe_dma, probe_bytes, [&] { probe(pool); });
      beside_dma(fused_dma, fused_bytes, [&] { fused(pool); });
      for (std::size_t k = 0; k < fewer.size(); ++k) {
        beside_dma(fewer_dma[k], fused_bytes, [&] { fused(*fewer[k]); });
      }
      std::printf("round %d: probe %.1f, fused %.1f, probe+DMA all %.1f, fused+DMA all %.1f GB/s\n",
                  r + 1, probe_alone.cpu_gbs.back(), fused_alone.cpu_gbs.back(),
                  probe_dma.total_gbs.back(), fused_dma.total_gbs.back());
      std::fflush(stdout);
    }
    std::printf("\nmedians over %d rounds (min .. max); DMA alone: 'cpu pass' is the D2H's GB/s\n",
                repeats);
    for (const Row* r : {&probe_alone, &fused_alone, &dma_alone, &probe_dma, &fused_dma}) print(*r);
    for (const Row& r : fewer_dma) print(r);
    for (const Row& r : prefix_rows) print(r);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zob_gpu_host_bench: %s\n", e.what());
    return 3;
  }
  return 0;
}
