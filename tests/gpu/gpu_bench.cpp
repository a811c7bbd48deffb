// zob_gpu_bench: the figures the ZeRO-3 offload step rests on, measured through CudaDevice:
//   1. H2D / D2H GB/s from registered, mlock-only, cudaMallocHost and plain pageable memory;
//   2. the cost of cudaHostRegister / Unregister and cudaMallocHost / FreeHost per GiB;
//   3. the fp32 <-> bf16 cast kernels in TB/s (read + write);
//   4. the step's copy-back: 300M fp32 host -> device in 2^26-element pieces through one
//      device temporary, each piece cast to bf16 (registered vs pageable source);
//   5. bf16 GEMM TFLOP/s at a large square and the synthetic model's head shape.
// Copies and kernels are timed with device events after warm-up; each figure is the median of
// repeats. Not a test: it asserts nothing but the copy-back's result bits.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_device.hpp"
#include "zob/errors.hpp"

namespace {

using zob::CudaDevice;
using zob::Queue;
using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Event-timed median of `repeats` runs of `work` on queue q after `warmup` runs.
double time_on(CudaDevice& dev, Queue q, int warmup, int repeats,
               const std::function<void()>& work) {
  auto a = dev.create_event();
  auto b = dev.create_event();
  std::vector<double> t;
  for (int i = 0; i < warmup + repeats; ++i) {
    dev.record(*a, q);
    work();
    dev.record(*b, q);
    dev.event_synchronize(*b);
    if (i >= warmup) t.push_back(dev.elapsed_seconds(*a, *b));
  }
  return median(t);
}

// Page-aligned host buffer, touched with non-zero data so every page exists before timing.
struct Host {
  Host(std::size_t n, bool lock) : bytes(n) {
    const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    if (posix_memalign(&ptr, page, bytes) != 0) throw std::bad_alloc();
    auto* w = static_cast<std::uint32_t*>(ptr);
    for (std::size_t i = 0; i < bytes / 4; ++i)
      w[i] = 0x3f800000u + static_cast<std::uint32_t>(i * 2654435761u >> 12);
    if (lock) {
      locked = mlock(ptr, bytes) == 0;
      if (!locked) std::printf("  (mlock of %zu bytes refused: %s)\n", bytes, std::strerror(errno));
    }
  }
  ~Host() {
    if (locked) munlock(ptr, bytes);
    std::free(ptr);
  }
  Host(const Host&) = delete;
  Host& operator=(const Host&) = delete;
  void* ptr = nullptr;
  std::size_t bytes;
  bool locked = false;
};

void copy_bandwidth(CudaDevice& dev) {
  std::printf(
      "\n== host<->device copies (GB/s = 1e9 B/s; median of 10 after 2 warm-ups, events)\n");
  std::printf("%-16s %8s %10s %10s\n", "memory", "MiB", "H2D GB/s", "D2H GB/s");
  for (const std::size_t mib : {64, 256}) {
    const std::size_t bytes = mib << 20;
    void* d = dev.allocate(bytes);
    for (const char* kind : {"registered", "mlock-only", "cudaMallocHost", "pageable"}) {
      const std::string k = kind;
      std::unique_ptr<Host> h;
      void* p = nullptr;
      if (k == "cudaMallocHost") {
        p = dev.allocate_host(bytes);
        std::memset(p, 0x3c, bytes);
      } else {
        h = std::make_unique<Host>(bytes, k != "pageable");
        p = h->ptr;
        if (k == "registered") dev.register_host(p, bytes);
      }
      const double up =
          time_on(dev, Queue::h2d, 2, 10, [&] { dev.copy_to_device(Queue::h2d, d, p, bytes); });
      const double down =
          time_on(dev, Queue::d2h, 2, 10, [&] { dev.copy_to_host(Queue::d2h, p, d, bytes); });
      std::printf("%-16s %8zu %10.1f %10.1f\n", kind, mib, bytes / up / 1e9, bytes / down / 1e9);
      if (k == "registered") dev.unregister_host(p);
      if (k == "cudaMallocHost") dev.deallocate_host(p);
    }
    dev.deallocate(d);
  }
}

void registration_cost(CudaDevice& dev) {
  std::printf("\n== registration cost, 1 GiB (median of 3)\n");
  const std::size_t bytes = std::size_t{1} << 30;
  Host h(bytes, false);
  std::vector<double> reg, unreg, alloc, freeing;
  for (int i = 0; i < 3; ++i) {
    auto t0 = Clock::now();
    dev.register_host(h.ptr, bytes);
    reg.push_back(seconds_since(t0));
    t0 = Clock::now();
    dev.unregister_host(h.ptr);
    unreg.push_back(seconds_since(t0));
    t0 = Clock::now();
    void* p = dev.allocate_host(bytes);
    alloc.push_back(seconds_since(t0));
    t0 = Clock::now();
    dev.deallocate_host(p);
    freeing.push_back(seconds_since(t0));
  }
  std::printf("cudaHostRegister %.3f s/GiB   cudaHostUnregister %.3f s/GiB\n", median(reg),
              median(unreg));
  std::printf("cudaMallocHost   %.3f s/GiB   cudaFreeHost       %.3f s/GiB\n", median(alloc),
              median(freeing));
}

void cast_throughput(CudaDevice& dev) {
  const std::int64_t n = 300'000'000;
  std::printf("\n== cast kernels, %lld elements (median of 20 after 3 warm-ups, events)\n",
              static_cast<long long>(n));
  auto* f = static_cast<float*>(dev.allocate(n * sizeof(float)));
  auto* b = static_cast<zob::bf16*>(dev.allocate(n * sizeof(zob::bf16)));
  dev.fill(b, 1.2345f, n);  // non-zero input for the first cast
  dev.cast_bf16_to_f32(b, f, n);
  const double down = time_on(dev, Queue::compute, 3, 20, [&] { dev.cast_f32_to_bf16(f, b, n); });
  const double up = time_on(dev, Queue::compute, 3, 20, [&] { dev.cast_bf16_to_f32(b, f, n); });
  std::printf("fp32->bf16 %.3f ms  %.2f TB/s (6 B/element)\n", down * 1e3, 6.0 * n / down / 1e12);
  std::printf("bf16->fp32 %.3f ms  %.2f TB/s (6 B/element)\n", up * 1e3, 6.0 * n / up / 1e12);
  dev.deallocate(f);
  dev.deallocate(b);
}

// The default loop's step 4 (docs/anatomy.md §3.1): pieces of 2^26 fp32 into one device temporary,
// each cast to bf16 on the compute queue; the next piece's copy waits for the cast that frees
// the temporary.
void copy_back(CudaDevice& dev) {
  const std::int64_t n = 300'000'000;
  const std::int64_t piece = std::int64_t{1} << 26;
  std::printf(
      "\n== copy-back: %lld fp32 host -> device bf16, pieces of 2^26, one temp (median of 5 after "
      "1)\n",
      static_cast<long long>(n));
  auto* temp = static_cast<float*>(dev.allocate(piece * sizeof(float)));
  auto* param = static_cast<zob::bf16*>(dev.allocate(n * sizeof(zob::bf16)));
  auto copied = dev.create_event();
  auto freed = dev.create_event();
  for (const char* kind : {"registered", "mlock-only", "pageable"}) {
    const std::string k = kind;
    Host h(n * sizeof(float), k == "mlock-only");
    if (k == "registered") dev.register_host(h.ptr, h.bytes);
    const auto* src = static_cast<const float*>(h.ptr);
    std::vector<double> wall;
    for (int rep = 0; rep < 6; ++rep) {
      dev.synchronize();
      const auto t0 = Clock::now();
      for (std::int64_t off = 0; off < n; off += piece) {
        const std::int64_t len = std::min(piece, n - off);
        if (off > 0) dev.queue_wait(Queue::h2d, *freed);
        dev.copy_to_device(Queue::h2d, temp, src + off, len * sizeof(float));
        dev.record(*copied, Queue::h2d);
        dev.queue_wait(Queue::compute, *copied);
        dev.cast_f32_to_bf16(temp, param + off, len);
        dev.record(*freed, Queue::compute);
      }
      dev.event_synchronize(*freed);
      if (rep > 0) wall.push_back(seconds_since(t0));
    }
    // The result must be right, or the timing means nothing.
    std::vector<zob::bf16> tail(1000);
    dev.copy_to_host(Queue::compute, tail.data(), param + n - 1000, 1000 * sizeof(zob::bf16));
    dev.synchronize();
    std::size_t bad = 0;
    for (int i = 0; i < 1000; ++i) bad += tail[i].bits != zob::f32_to_bf16(src[n - 1000 + i]).bits;
    const double t = median(wall);
    std::printf("%-12s %8.1f ms  %6.1f GB/s of fp32 moved%s\n", kind, t * 1e3, 4.0 * n / t / 1e9,
                bad ? "  WRONG RESULT" : "");
    if (k == "registered") dev.unregister_host(h.ptr);
  }
  dev.deallocate(temp);
  dev.deallocate(param);
}

void gemm_rate(CudaDevice& dev) {
  std::printf("\n== bf16 GEMM (cuBLAS, fp32 accumulate; median of 10 after 3, random data)\n");
  struct Shape {
    std::int64_t m, n, k;
    bool ta, tb;
    const char* what;
  };
  const Shape shapes[] = {{8192, 8192, 8192, false, true, "8192^3 X W^T"},
                          {512, 32000, 2048, false, true, "head fwd T=512 V=32000 h=2048"},
                          {512, 8192, 2048, false, true, "fc1 fwd T=512 4h=8192 h=2048"},
                          {2048, 8192, 512, true, false, "fc1 wgrad dY^T X"}};
  for (const auto& s : shapes) {
    const std::int64_t a_elems = s.m * s.k, b_elems = s.k * s.n, c_elems = s.m * s.n;
    auto* a = static_cast<zob::bf16*>(dev.allocate(a_elems * 2));
    auto* b = static_cast<zob::bf16*>(dev.allocate(b_elems * 2));
    auto* c = static_cast<zob::bf16*>(dev.allocate(c_elems * 2));
    // Random-ish operands: a host pattern cast on the device (zeros run faster than real data).
    const std::int64_t big = std::max(a_elems, b_elems);
    std::vector<float> hostf(static_cast<std::size_t>(big));
    std::uint32_t x = 12345;
    for (auto& v : hostf) {
      x = x * 1664525u + 1013904223u;
      v = static_cast<float>(x >> 8) / 16777216.0f - 0.5f;
    }
    auto* tmp = static_cast<float*>(dev.allocate(big * 4));
    dev.copy_to_device(Queue::compute, tmp, hostf.data(), big * 4);
    dev.cast_f32_to_bf16(tmp, a, a_elems);
    dev.cast_f32_to_bf16(tmp, b, b_elems);
    zob::GemmArgs g{s.ta, s.tb, s.m, s.n, s.k, a, s.ta ? s.m : s.k, b, s.tb ? s.k : s.n, c, s.n};
    const double t = time_on(dev, Queue::compute, 3, 10, [&] { dev.gemm(g); });
    std::printf("%-32s %8.3f ms  %6.1f TFLOP/s\n", s.what, t * 1e3,
                2.0 * s.m * s.n * s.k / t / 1e12);
    dev.deallocate(tmp);
    dev.deallocate(a);
    dev.deallocate(b);
    dev.deallocate(c);
  }
}

}  // namespace

int main() {
  try {
    CudaDevice dev(0);
    const auto& i = dev.info();
    std::printf("device: %s | %s | %s | bus %s | %.1f GiB | numa %d\n", i.name.c_str(),
                i.runtime_version.c_str(), i.driver_version.c_str(), i.pci_bus_id.c_str(),
                static_cast<double>(i.total_memory_bytes) / (1 << 30), i.numa_node);
    std::fflush(stdout);
    copy_bandwidth(dev);
    registration_cost(dev);
    cast_throughput(dev);
    copy_back(dev);
    gemm_rate(dev);
    std::printf("\npeak device memory tracked: %.2f GiB\n",
                static_cast<double>(dev.memory_peak()) / (1 << 30));
  } catch (const zob::DeviceError& e) {
    std::fprintf(stderr, "zob_gpu_bench: %s\n", e.what());
    return 3;
  }
  return 0;
}
