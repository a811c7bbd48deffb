#include "backends/cpu/cpu_device.hpp"

#include <cblas.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "backends/cpu/cpu_kernels.hpp"
#include "zob/config.hpp"
#include "zob/errors.hpp"
#include "zob/system.hpp"

namespace zob {
namespace {

constexpr std::size_t kDeviceAlignment = 256;
// Copies above this size are split over the pool: one thread rarely saturates DRAM.
constexpr std::size_t kParallelCopyBytes = std::size_t{8} << 20;

struct CpuEvent final : DeviceEvent {
  std::chrono::steady_clock::time_point at;
  bool recorded = false;
};

CpuEvent& as_cpu_event(DeviceEvent& e, const char* call) {
  auto* event = dynamic_cast<CpuEvent*>(&e);
  if (event == nullptr) {
    throw DeviceError(DeviceErrorKind::runtime,
                      std::string("cpu ") + call + ": the event was not created by this device");
  }
  return *event;
}

std::string gib(std::size_t bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%zu bytes (%.3f GiB)", bytes,
                static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        auto name = line.substr(colon + 1);
        name.erase(0, name.find_first_not_of(" \t"));
        return name;
      }
    }
  }
  return "unknown CPU";
}

std::uint64_t mem_total_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemTotal:") return kib * 1024;
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0
             ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page)
             : 0;
}

// openblas_get_config() reads e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SapphireRapids
// MAX_THREADS=64": report "OpenBLAS 0.3.21".
std::string openblas_version() {
  const char* config = openblas_get_config();
  std::string s = config != nullptr ? config : "";
  if (s.rfind("OpenBLAS ", 0) == 0) {
    const auto end = s.find(' ', 9);
    return s.substr(0, end);
  }
  return "OpenBLAS " + s;
}

std::size_t round_up(std::size_t bytes, std::size_t to) { return (bytes + to - 1) / to * to; }

}  // namespace

CpuDevice::CpuDevice(int threads) : pool_(std::make_unique<ThreadPool>(threads < 1 ? 1 : threads)) {
  info_.backend = to_string(DeviceKind::cpu);
  info_.name = cpu_model_name();
  info_.runtime_version = openblas_version();
  utsname u{};
  if (uname(&u) == 0) info_.driver_version = std::string("Linux ") + u.release;
  info_.total_memory_bytes = mem_total_bytes();
  info_.memory_is_host_ram = true;
}

CpuDevice::~CpuDevice() {
  // Whatever the caller did not give back is freed here, so nothing leaks on any path.
  for (auto& [ptr, bytes] : allocations_) std::free(ptr);
}

void* CpuDevice::allocate(std::size_t bytes) {
  // Refuse beyond physical memory up front: glibc would overcommit, and a sanitizer's
  // allocator would abort instead of returning null.
  if (info_.total_memory_bytes != 0 && bytes > info_.total_memory_bytes) {
    throw DeviceError(DeviceErrorKind::out_of_memory,
                      "cpu allocate of " + gib(bytes) + " refused: more than the host's " +
                          gib(info_.total_memory_bytes) + " of memory; use a smaller model");
  }
  const std::size_t rounded = round_up(bytes == 0 ? 1 : bytes, kDeviceAlignment);
  void* p = std::aligned_alloc(kDeviceAlignment, rounded);
  if (p == nullptr) {
    throw DeviceError(
        DeviceErrorKind::out_of_memory,
        "cpu allocate of " + gib(bytes) + " failed (aligned_alloc: " + std::strerror(errno) +
            "); " + std::to_string(memory_in_use()) + " bytes already in use; use a smaller model");
  }
  std::lock_guard lock(memory_mutex_);
  allocations_.emplace(p, bytes);
  in_use_ += bytes;
  if (in_use_ > peak_) peak_ = in_use_;
  return p;
}

void CpuDevice::deallocate(void* device) noexcept {
  if (device == nullptr) return;
  std::lock_guard lock(memory_mutex_);
  const auto it = allocations_.find(device);
  if (it == allocations_.end()) return;  // not ours: freeing it would corrupt the heap
  in_use_ -= it->second;
  allocations_.erase(it);
  std::free(device);
}

std::size_t CpuDevice::memory_in_use() const {
  std::lock_guard lock(memory_mutex_);
  return in_use_;
}

std::size_t CpuDevice::memory_peak() const {
  std::lock_guard lock(memory_mutex_);
  return peak_;
}

Registration CpuDevice::register_host(void*, std::size_t bytes) {
  throw DeviceError(
      DeviceErrorKind::unavailable,
      "cpu register_host of " + gib(bytes) + ": registration does not apply to the CPU device");
}

void* CpuDevice::allocate_host(std::size_t bytes) {
  const std::size_t page = page_size();
  if (info_.total_memory_bytes != 0 && bytes > info_.total_memory_bytes) {
    throw DeviceError(DeviceErrorKind::out_of_memory,
                      "cpu allocate_host of " + gib(bytes) + " refused: more than the host's " +
                          gib(info_.total_memory_bytes) + " of memory");
  }
  void* p = std::aligned_alloc(page, round_up(bytes == 0 ? 1 : bytes, page));
  if (p == nullptr) {
    throw DeviceError(DeviceErrorKind::out_of_memory,
                      "cpu allocate_host of " + gib(bytes) +
                          " failed (aligned_alloc: " + std::strerror(errno) + ")");
  }
  return p;
}

void CpuDevice::deallocate_host(void* host) noexcept { std::free(host); }

void CpuDevice::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  if (bytes < kParallelCopyBytes || pool_->size() == 1) {
    std::memcpy(dst, src, bytes);
    return;
  }
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  pool_->parallel_for(
      static_cast<std::int64_t>(bytes),
      [&](std::int64_t b, std::int64_t e) {
        std::memcpy(d + b, s + b, static_cast<std::size_t>(e - b));
      },
      4096);
}

void CpuDevice::copy_to_device(Queue, void* device, const void* host, std::size_t bytes) {
  copy(device, host, bytes);
}

void CpuDevice::copy_to_host(Queue, void* host, const void* device, std::size_t bytes) {
  copy(host, device, bytes);
}

void CpuDevice::copy_on_device(Queue, void* dst, const void* src, std::size_t bytes) {
  copy(dst, src, bytes);
}

void CpuDevice::fill_zero(Queue, void* device, std::size_t bytes) {
  if (bytes > 0) std::memset(device, 0, bytes);
}

std::unique_ptr<DeviceEvent> CpuDevice::create_event() { return std::make_unique<CpuEvent>(); }

void CpuDevice::record(DeviceEvent& event, Queue) {
  auto& e = as_cpu_event(event, "record");
  e.at = std::chrono::steady_clock::now();
  e.recorded = true;
}

void CpuDevice::event_synchronize(DeviceEvent& event) {
  if (!as_cpu_event(event, "event_synchronize").recorded) {
    throw DeviceError(DeviceErrorKind::runtime, "cpu event_synchronize: event never recorded");
  }
}

bool CpuDevice::event_done(DeviceEvent& event) {
  return as_cpu_event(event, "event_done").recorded;
}

double CpuDevice::elapsed_seconds(DeviceEvent& start, DeviceEvent& end) {
  auto& s = as_cpu_event(start, "elapsed_seconds");
  auto& e = as_cpu_event(end, "elapsed_seconds");
  if (!s.recorded || !e.recorded) {
    throw DeviceError(DeviceErrorKind::runtime,
                      "cpu elapsed_seconds: an event was never recorded; record both first");
  }
  return std::chrono::duration<double>(e.at - s.at).count();
}

void CpuDevice::gemm(const GemmArgs& args) { cpu::gemm(args, pool_.get()); }

void CpuDevice::embedding_forward(const std::int32_t* ids, const bf16* table, bf16* out,
                                  std::int64_t tokens, std::int64_t hidden) {
  cpu::embedding_forward(ids, table, out, tokens, hidden, pool_.get());
}

void CpuDevice::embedding_backward(const EmbeddingGradIndex& index, const bf16* dout, bf16* dtable,
                                   std::int64_t hidden) {
  cpu::embedding_backward(index.unique_ids, index.offsets, index.positions, index.n_unique, dout,
                          dtable, hidden, pool_.get());
}

void CpuDevice::bias_add(bf16* y, const bf16* bias, std::int64_t rows, std::int64_t cols) {
  cpu::bias_add(y, bias, rows, cols, pool_.get());
}

void CpuDevice::bias_gelu_forward(bf16* pre, const bf16* bias, bf16* act, std::int64_t rows,
                                  std::int64_t cols) {
  cpu::bias_gelu_forward(pre, bias, act, rows, cols, pool_.get());
}

void CpuDevice::gelu_backward(const bf16* dact, const bf16* pre, bf16* dpre, std::int64_t n) {
  cpu::gelu_backward(dact, pre, dpre, n, pool_.get());
}

void CpuDevice::column_sum(const bf16* x, bf16* out, std::int64_t rows, std::int64_t cols) {
  cpu::column_sum(x, out, rows, cols, pool_.get());
}

void CpuDevice::residual_add(bf16* x, const bf16* y, std::int64_t n) {
  cpu::residual_add(x, y, n, pool_.get());
}

void CpuDevice::fill(bf16* x, float value, std::int64_t n) { cpu::fill(x, value, n, pool_.get()); }

void CpuDevice::sum(const bf16* x, std::int64_t n, float* result) {
  cpu::sum(x, n, result, pool_.get());
}

void CpuDevice::cast_f32_to_bf16(const float* src, bf16* dst, std::int64_t n, Queue) {
  cpu::cast_f32_to_bf16(src, dst, n, pool_.get());
}

void CpuDevice::cast_bf16_to_f32(const bf16* src, float* dst, std::int64_t n, Queue) {
  cpu::cast_bf16_to_f32(src, dst, n, pool_.get());
}

}  // namespace zob
