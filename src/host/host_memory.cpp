// Host buffers for the offload state. Memory comes from mmap (page-aligned, and munmap really
// returns it to the system, unlike free of a large malloc'ed block under some allocators);
// locking is mlock; registration is the device's. Every step taken is recorded in the object
// so that release() undoes exactly those, in the order unregister -> munlock -> munmap, both
// in the destructor and when the constructor fails half-way.
#include "zob/host_memory.hpp"
#include "zob/thread_pool.hpp"

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "zob/clock.hpp"
#include "zob/device.hpp"
#include "zob/errors.hpp"
#include "zob/system.hpp"

namespace zob {
namespace {

std::atomic<std::uint64_t> g_locked{0}, g_registered{0}, g_peak_locked{0}, g_peak_registered{0};
std::atomic<std::uint64_t> g_mapped{0}, g_peak_mapped{0};
// Host memory the device runtime allocated (and pins itself: cudaMallocHost / zeMemAllocHost).
std::atomic<std::uint64_t> g_runtime_pinned{0}, g_peak_runtime_pinned{0};
std::atomic<bool> g_register_locked_for_test{false};  // register_locked_buffers_for_test()

void add(std::atomic<std::uint64_t>& value, std::atomic<std::uint64_t>& peak, std::uint64_t n) {
  const std::uint64_t now = value.fetch_add(n) + n;
  std::uint64_t seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
}

std::string human(std::uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (std::uint64_t{1} << 30)) return fmt::format("{:.1f} GiB", b / (1 << 30));
  if (bytes >= (std::uint64_t{1} << 20)) return fmt::format("{:.1f} MiB", b / (1 << 20));
  if (bytes >= (std::uint64_t{1} << 10)) return fmt::format("{:.0f} KiB", b / (1 << 10));
  return fmt::format("{} B", bytes);
}

std::string memlock_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return "unknown";
  if (limit.rlim_cur == RLIM_INFINITY) return "unlimited";
  return human(limit.rlim_cur) + fmt::format(" = {} bytes", limit.rlim_cur);
}

// mlock/munlock through the raw system calls: the sanitizers' runtime intercepts the libc
// functions and turns them into no-ops, which would make the asan build measure (and test)
// something other than what it claims.
int lock_range(void* p, std::size_t bytes) {
  return static_cast<int>(syscall(SYS_mlock, p, bytes));
}
int unlock_range(void* p, std::size_t bytes) {
  return static_cast<int>(syscall(SYS_munlock, p, bytes));
}

}  // namespace

const char* to_string(HostMemoryMode mode) {
  switch (mode) {
    case HostMemoryMode::pageable: return "pageable";
    case HostMemoryMode::locked: return "locked";
    case HostMemoryMode::registered: return "registered";
    case HostMemoryMode::device_host: return "device_host";
  }
  return "?";
}

HostMemoryMode pinned_mode_for(Arm arm) {
  switch (arm) {
    case Arm::registered: return HostMemoryMode::registered;
    case Arm::unregistered: return HostMemoryMode::locked;
    case Arm::pageable: return HostMemoryMode::pageable;
    case Arm::hostalloc: return HostMemoryMode::device_host;
  }
  return HostMemoryMode::pageable;
}

void register_locked_buffers_for_test() { g_register_locked_for_test = true; }

HostMemoryCounters host_memory_counters() {
  return {g_locked.load(), g_registered.load(),  g_peak_locked.load(),   g_peak_registered.load(),
          g_mapped.load(), g_peak_mapped.load(), g_runtime_pinned.load()};
}

void reset_host_memory_peaks() {
  g_peak_locked = g_locked.load();
  g_peak_registered = g_registered.load();
  g_peak_mapped = g_mapped.load();
  g_peak_runtime_pinned = g_runtime_pinned.load();
}

std::uint64_t caching_host_allocation(std::uint64_t bytes) {
  std::uint64_t rounded = page_size();
  while (rounded < bytes && rounded <= UINT64_MAX / 2) rounded *= 2;
  return rounded < bytes ? bytes : rounded;
}

HostBuffer::HostBuffer(std::size_t bytes, HostMemoryMode mode, Device* device, std::string name,
                       ThreadPool* first_touch, HostPages pages)
    : bytes_(bytes),
      mode_(mode),
      device_(device),
      name_(std::move(name)),
      registration_method_("none") {
  const std::size_t page = page_size();
  if (bytes > SIZE_MAX - page) {
    throw DeviceError(DeviceErrorKind::out_of_memory,
                      fmt::format("{}: host buffer of {} bytes is too large", name_, bytes));
  }
  mapped_bytes_ = mode == HostMemoryMode::device_host
                      ? static_cast<std::size_t>(caching_host_allocation(bytes))
                      : round_up_to_page(std::max<std::size_t>(bytes, 1));
  if ((mode == HostMemoryMode::registered || mode == HostMemoryMode::device_host) &&
      device == nullptr) {
    throw UsageError(fmt::format("{}: host memory mode {} needs a device", name_, to_string(mode)));
  }
  if (mode == HostMemoryMode::device_host) {
    data_ = device->allocate_host(mapped_bytes_);  // throws on failure; nothing to undo
    add(g_mapped, g_peak_mapped, mapped_bytes_);
    add(g_runtime_pinned, g_peak_runtime_pinned, mapped_bytes_);
    return;
  }

  map_pages(first_touch, pages);
  if (mode == HostMemoryMode::pageable) return;
  try {
    lock_and_register();
  } catch (...) {
    release();
    throw;
  }
}

void HostBuffer::map_pages(ThreadPool* first_touch, HostPages pages) {
  void* p =
      mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    throw DeviceError(DeviceErrorKind::out_of_memory,
                      fmt::format("{}: mmap of {} ({} bytes) failed: {}; free host memory or use "
                                  "a smaller model",
                                  name_, human(mapped_bytes_), mapped_bytes_, std::strerror(err)));
  }
  data_ = p;
  // Transparent huge pages where the kernel offers them (THP "madvise" or "always"): the
  // first touch and mlock of gigabytes then fault 2 MiB at a time, which cuts the untimed
  // set-up, and Adam's streaming sweeps take fewer TLB misses. Every arm gets the same, so
  // the comparison stays fair; where THP is off this fails harmlessly (EINVAL) and is ignored.
  if (pages == HostPages::huge_where_offered && mapped_bytes_ >= (std::size_t{2} << 20)) {
    (void)madvise(p, mapped_bytes_, MADV_HUGEPAGE);
  }
  if (first_touch != nullptr) {
    char* base = static_cast<char*>(p);
    // Whole 2 MiB blocks per thread, so each huge page is faulted by one thread.
    first_touch->parallel_for(
        static_cast<std::int64_t>(mapped_bytes_),
        [base](std::int64_t lo, std::int64_t hi) {
          std::memset(base + lo, 0, static_cast<std::size_t>(hi - lo));
        },
        std::int64_t{2} << 20);
  }
  add(g_mapped, g_peak_mapped, mapped_bytes_);
}

void HostBuffer::lock_and_register() {
  if (lock_range(data_, mapped_bytes_) != 0) {
    const int err = errno;
    const std::string limit = memlock_limit();
    // Under an unlimited RLIMIT_MEMLOCK the lock failed for want of lockable memory (other
    // processes locked it since the pre-flight, or a memory cgroup's limit): raising the
    // limit would not help.
    const std::string fix = limit == "unlimited"
                                ? "free memory (other processes may hold it locked) or run "
                                  "only --arms pageable,hostalloc"
                                : "raise it with ulimit -l unlimited or run as a user with "
                                  "CAP_IPC_LOCK";
    throw DeviceError(DeviceErrorKind::lock_refused,
                      fmt::format("{}: mlock of {} ({} bytes) refused: {} (RLIMIT_MEMLOCK {}, "
                                  "{} bytes locked by this process already); {}",
                                  name_, human(mapped_bytes_), mapped_bytes_, std::strerror(err),
                                  limit, g_locked.load(), fix));
  }
  locked_ = true;
  add(g_locked, g_peak_locked, mapped_bytes_);
  const bool test_registers = mode_ == HostMemoryMode::locked && g_register_locked_for_test &&
                              device_ != nullptr && device_->registration_applicable();
  if (test_registers) {
    // The test's deliberate bug: registered, but the method stays "none", as a bug would leave it.
    device_->register_host(data_, mapped_bytes_);
    registered_ = true;
    add(g_registered, g_peak_registered, mapped_bytes_);
    return;
  }
  if (mode_ != HostMemoryMode::registered) return;
  if (!device_->registration_applicable()) {
    registration_method_ = "not-applicable";  // locked only, and reported so
    return;
  }
  const auto start = Clock::now();
  Registration r = device_->register_host(data_, mapped_bytes_);
  register_seconds_ = seconds_since(start);
  registered_ = true;
  add(g_registered, g_peak_registered, mapped_bytes_);
  registration_method_ = std::move(r.method);
}

HostBuffer::~HostBuffer() { release(); }

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      mapped_bytes_(std::exchange(other.mapped_bytes_, 0)),
      mode_(other.mode_),
      device_(std::exchange(other.device_, nullptr)),
      locked_(std::exchange(other.locked_, false)),
      registered_(std::exchange(other.registered_, false)),
      name_(std::move(other.name_)),
      registration_method_(std::move(other.registration_method_)),
      register_seconds_(std::exchange(other.register_seconds_, 0.0)) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
    mode_ = other.mode_;
    device_ = std::exchange(other.device_, nullptr);
    locked_ = std::exchange(other.locked_, false);
    registered_ = std::exchange(other.registered_, false);
    name_ = std::move(other.name_);
    registration_method_ = std::move(other.registration_method_);
    register_seconds_ = std::exchange(other.register_seconds_, 0.0);
  }
  return *this;
}

void HostBuffer::release() noexcept {
  if (data_ == nullptr) return;
  if (registered_) {
    device_->unregister_host(data_);
    g_registered.fetch_sub(mapped_bytes_);
    registered_ = false;
  }
  if (locked_) {
    unlock_range(data_, mapped_bytes_);  // cannot fail for a range we locked
    g_locked.fetch_sub(mapped_bytes_);
    locked_ = false;
  }
  if (mode_ == HostMemoryMode::device_host) {
    device_->deallocate_host(data_);
    g_runtime_pinned.fetch_sub(mapped_bytes_);
  } else {
    munmap(data_, mapped_bytes_);
  }
  g_mapped.fetch_sub(mapped_bytes_);
  data_ = nullptr;
}

}  // namespace zob
