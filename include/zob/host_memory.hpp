// Host buffers for the offload state: page-aligned allocation, mlock, device registration.
// RAII; release order is always unregister -> munlock -> free, on every path.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "zob/config.hpp"

namespace zob {

class Device;
class ThreadPool;

enum class HostMemoryMode {
  pageable,     // page-aligned (posix_memalign / mmap), nothing else
  locked,       // + mlock
  registered,   // + mlock + Device::register_host (verified)
  device_host,  // Device::allocate_host (cudaMallocHost / zeMemAllocHost)
};
const char* to_string(HostMemoryMode);

// The mode of the pinned offload buffers in an arm (Adam states are always pageable).
HostMemoryMode pinned_mode_for(Arm arm);

// Which pages back a HostBuffer. The tool's own buffers ask for transparent huge pages
// (madvise) where the kernel offers them; a buffer that stands for a temporary PyTorch's CPU
// allocator makes (posix_memalign, no madvise unless THP_MEM_ALLOC_ENABLE is set) takes what
// the kernel gives plain anonymous memory: 4 KiB pages under THP "madvise", so a device copy
// into it faults one small page at a time as PyTorch's does.
enum class HostPages {
  huge_where_offered,
  as_pytorch_cpu_allocator,
};

// What PyTorch's CachingHostAllocator (pin_memory(), DeepSpeed's default pin backend) reserves
// for a request of `bytes`: the next power of two, at least one page (DeepSpeed PR #8840: a
// 3.73 GiB sub-group reserves 4.00 GiB).
std::uint64_t caching_host_allocation(std::uint64_t bytes);

class HostBuffer {
 public:
  HostBuffer() = default;
  // Allocates `bytes` in `mode`, rounded up to the page size, and for device_host to
  // caching_host_allocation's power of two (the hostalloc arm stands for PyTorch's pin_memory()).
  // `device` is needed for registered / device_host and ignored otherwise. `name` appears in
  // errors ("fp32 master: mlock of 2.1 GB refused (RLIMIT_MEMLOCK 8 MB); raise it with
  // ulimit -l unlimited"). On failure everything already done is undone before the throw.
  // `first_touch`: when given, the pages are faulted in (zeroed) by the pool's threads before
  // mlock and registration, which then find them present: the kernel would otherwise fault
  // gigabytes in one thread inside mlock / cudaHostRegister, the bulk of an arm's set-up time.
  HostBuffer(std::size_t bytes, HostMemoryMode mode, Device* device, std::string name,
             ThreadPool* first_touch = nullptr, HostPages pages = HostPages::huge_where_offered);
  ~HostBuffer();
  HostBuffer(HostBuffer&&) noexcept;
  HostBuffer& operator=(HostBuffer&&) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  void* data() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  std::size_t size() const { return bytes_; }
  HostMemoryMode mode() const { return mode_; }
  const std::string& registration_method() const { return registration_method_; }
  const std::string& name() const { return name_; }              // as in its errors: "fp32 master"
  double register_seconds() const { return register_seconds_; }  // time register_host took

 private:
  void map_pages(ThreadPool* first_touch, HostPages pages);  // mmap (+ huge pages, touch)
  void lock_and_register();  // mlock, then the device's registration
  void release() noexcept;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;         // requested
  std::size_t mapped_bytes_ = 0;  // page-rounded
  HostMemoryMode mode_ = HostMemoryMode::pageable;
  Device* device_ = nullptr;
  bool locked_ = false;
  bool registered_ = false;
  std::string name_;
  std::string registration_method_;
  double register_seconds_ = 0;
};

// Process-wide counters of bytes currently locked / registered through HostBuffer, and the
// high-water marks; the step reports them, tests check they return to zero.
struct HostMemoryCounters {
  std::uint64_t locked_bytes = 0;
  std::uint64_t registered_bytes = 0;
  std::uint64_t peak_locked_bytes = 0;
  std::uint64_t peak_registered_bytes = 0;
  std::uint64_t mapped_bytes = 0;  // every live HostBuffer, page-rounded, whatever its mode
  std::uint64_t peak_mapped_bytes = 0;
  std::uint64_t runtime_pinned_bytes = 0;  // HostMemoryMode::device_host buffers, as allocated
};
HostMemoryCounters host_memory_counters();
// Starts the high-water marks again from the bytes live now: an arm measures its own peaks,
// not an earlier arm's in the same process (the tests run arms in-process).
void reset_host_memory_peaks();

// Test-only (ZOB_TEST_REGISTRATION=<arm>:register, set by src/driver/test_hooks.cpp alone):
// from now on in this process, a locked buffer is also registered with its device, as a bug
// that registered the unregistered arm's memory would do; the arm's check of what the driver
// reports (step/arm_result_fill.cpp) must then fail it. Released like a registered buffer.
void register_locked_buffers_for_test();

}  // namespace zob
