// CudaDevice outside the kernels: creation errors, info, device memory accounting and the OOM
// error, host registration / hostalloc, copies and fills on every queue, events across queues,
// and the plugin loaded the way the executable loads it.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "gpu_test_util.hpp"
#include "zob/backend_plugin.hpp"

namespace zob::gpu_test {
namespace {

// Page-aligned pageable host memory, freed on scope exit.
struct HostPages {
  explicit HostPages(std::size_t n) : bytes(n) {
    const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    if (posix_memalign(&ptr, page, bytes) != 0) ptr = nullptr;
  }
  ~HostPages() { std::free(ptr); }
  HostPages(const HostPages&) = delete;
  HostPages& operator=(const HostPages&) = delete;
  unsigned char* data() const { return static_cast<unsigned char*>(ptr); }
  void* ptr = nullptr;
  std::size_t bytes;
};

void fill_random(unsigned char* p, std::size_t n) {
  std::uniform_int_distribution<unsigned> byte(0, 255);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(byte(rng()));
}

TEST(CudaDevice, CreationFailsWithOneLineReasonOrGivesAUsableDevice) {
  if (!slot().device) {
    // No GPU / driver (CI, the build machine): the reason must be the unavailable kind, one
    // line, naming the call that failed.
    try {
      CudaDevice d(0);
      FAIL() << "a device was created after the first creation failed";
    } catch (const DeviceError& e) {
      EXPECT_EQ(e.kind(), DeviceErrorKind::unavailable);
      EXPECT_NE(std::string(e.what()).find("cudaGetDeviceCount"), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
    return;
  }
  try {
    CudaDevice d(9999);
    FAIL() << "device 9999 was created";
  } catch (const DeviceError& e) {
    EXPECT_EQ(e.kind(), DeviceErrorKind::unavailable);
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
}

TEST(CudaDevice, InfoDescribesTheGpu) {
  ZOB_REQUIRE_GPU();
  const auto& info = gpu().info();
  EXPECT_EQ(info.backend, "cuda");
  EXPECT_FALSE(info.name.empty());
  EXPECT_EQ(info.runtime_version.rfind("CUDA runtime ", 0), 0u) << info.runtime_version;
  EXPECT_FALSE(info.driver_version.empty());
  EXPECT_EQ(info.pci_bus_id.size(), 12u) << info.pci_bus_id;  // dddd:bb:dd.f
  EXPECT_GT(info.total_memory_bytes, 1u << 30);
  EXPECT_GE(info.numa_node, -1);
  std::printf("[ info     ] %s | %s | %s | bus %s | %.1f GiB | numa %d\n", info.name.c_str(),
              info.runtime_version.c_str(), info.driver_version.c_str(), info.pci_bus_id.c_str(),
              static_cast<double>(info.total_memory_bytes) / (1 << 30), info.numa_node);
}

TEST(CudaDevice, TracksBytesInUseAndPeak) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const std::size_t base = dev.memory_in_use();
  const std::size_t base_peak = dev.memory_peak();
  void* a = dev.allocate(1 << 20);
  void* b = dev.allocate(3 << 20);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 256, 0u);
  EXPECT_EQ(dev.memory_in_use(), base + (4 << 20));
  dev.deallocate(a);
  void* c = dev.allocate(2 << 20);
  EXPECT_EQ(dev.memory_in_use(), base + (5 << 20));
  EXPECT_EQ(dev.memory_peak(), std::max(base_peak, base + (5 << 20)));
  dev.deallocate(b);
  dev.deallocate(c);
  dev.deallocate(nullptr);
  EXPECT_EQ(dev.memory_in_use(), base);
  EXPECT_GE(dev.memory_peak(), base + (5 << 20));
}

TEST(CudaDevice, AbsurdAllocationThrowsOutOfMemoryNamingBytesAndFree) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const std::size_t before = dev.memory_in_use();
  const std::size_t absurd = std::size_t{1} << 50;  // 1 PiB
  try {
    dev.allocate(absurd);
    FAIL() << "1 PiB allocation succeeded";
  } catch (const DeviceError& e) {
    EXPECT_EQ(e.kind(), DeviceErrorKind::out_of_memory) << e.what();
    const std::string what = e.what();
    EXPECT_NE(what.find("cudaMalloc"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(absurd)), std::string::npos) << what;
    EXPECT_NE(what.find("free"), std::string::npos) << what;
  }
  EXPECT_EQ(dev.memory_in_use(), before);
  // The failure must not poison later calls.
  DeviceBuffer<float> ok(dev, 16);
  ok.upload(random_f32(16));
}

TEST(CudaDevice, RegistrationRoundTripIsVerifiedAndReversible) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const std::size_t bytes = 8 << 20;
  HostPages src(bytes), back(bytes);
  ASSERT_NE(src.ptr, nullptr);
  ASSERT_NE(back.ptr, nullptr);
  fill_random(src.data(), bytes);
  std::memset(back.data(), 0x5A, bytes);
  EXPECT_FALSE(dev.is_registered(src.ptr));

  const Registration r = dev.register_host(src.ptr, bytes);
  EXPECT_EQ(r.method, "cudaHostRegister");
  EXPECT_TRUE(r.verified);
  EXPECT_TRUE(dev.is_registered(src.ptr));
  EXPECT_TRUE(dev.is_registered(src.data() + bytes / 2));  // interior pointers too
  dev.register_host(back.ptr, bytes);

  DeviceBuffer<unsigned char> d(dev, bytes);
  dev.copy_to_device(Queue::h2d, d.get(), src.ptr, bytes);
  dev.synchronize();
  dev.copy_to_host(Queue::d2h, back.ptr, d.get(), bytes);
  dev.synchronize();
  EXPECT_EQ(std::memcmp(src.ptr, back.ptr, bytes), 0);

  // Registering a registered range is refused, with the runtime's reason.
  try {
    dev.register_host(src.ptr, bytes);
    FAIL() << "double registration succeeded";
  } catch (const DeviceError& e) {
    EXPECT_EQ(e.kind(), DeviceErrorKind::registration_refused);
    EXPECT_NE(std::string(e.what()).find("cudaHostRegister"), std::string::npos) << e.what();
  }
  dev.unregister_host(src.ptr);
  dev.unregister_host(back.ptr);
  EXPECT_FALSE(dev.is_registered(src.ptr));
  EXPECT_FALSE(dev.is_registered(back.ptr));
  dev.unregister_host(src.ptr);  // harmless twice (noexcept, error cleared)
  DeviceBuffer<float> still_ok(dev, 4);
  still_ok.upload(random_f32(4));
}

TEST(CudaDevice, HostAllocIsRegisteredAndCopies) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const std::size_t bytes = 4 << 20;
  auto* h = static_cast<unsigned char*>(dev.allocate_host(bytes));
  ASSERT_NE(h, nullptr);
  EXPECT_TRUE(dev.is_registered(h));
  fill_random(h, bytes);
  std::vector<unsigned char> want(h, h + bytes);
  DeviceBuffer<unsigned char> d(dev, bytes);
  dev.copy_to_device(Queue::h2d, d.get(), h, bytes);
  dev.synchronize();
  std::memset(h, 0, bytes);
  dev.copy_to_host(Queue::d2h, h, d.get(), bytes);
  dev.synchronize();
  EXPECT_EQ(std::memcmp(h, want.data(), bytes), 0);
  dev.deallocate_host(h);
}

TEST(CudaDevice, CopiesAndFillsWorkOnEveryQueue) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const std::size_t bytes = (1 << 20) + 12;
  for (const Queue q : {Queue::compute, Queue::h2d, Queue::d2h}) {
    SCOPED_TRACE(to_string(q));
    std::vector<unsigned char> src(bytes), back(bytes, 0x11);
    fill_random(src.data(), bytes);
    DeviceBuffer<unsigned char> d(dev, bytes);
    dev.copy_to_device(q, d.get(), src.data(), bytes);
    dev.copy_to_host(q, back.data(), d.get(), bytes);  // same queue: ordered after the upload
    dev.synchronize();
    EXPECT_EQ(back, src);
    DeviceBuffer<unsigned char> d2(dev, bytes);  // device to device
    dev.copy_on_device(q, d2.get(), d.get(), bytes);
    std::vector<unsigned char> moved(bytes, 0x22);
    dev.copy_to_host(q, moved.data(), d2.get(), bytes);
    dev.synchronize();
    EXPECT_EQ(moved, src);
    dev.fill_zero(q, d.get() + 5, bytes - 10);
    dev.copy_to_host(q, back.data(), d.get(), bytes);
    dev.synchronize();
    for (std::size_t i = 0; i < bytes; ++i) {
      const unsigned char want = (i < 5 || i >= bytes - 5) ? src[i] : 0;
      if (back[i] != want) {
        ADD_FAILURE() << "byte " << i;
        break;
      }
    }
  }
}

TEST(CudaDevice, EventsOrderQueuesAndTimeWork) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const std::size_t n = std::size_t{16} << 20;  // 64 MiB of fp32
  const auto src = random_f32(n);
  std::vector<bf16> back(n);
  DeviceBuffer<float> d_src(dev, n);
  DeviceBuffer<bf16> d_dst(dev, n);
  auto uploaded = dev.create_event();
  auto start = dev.create_event();
  auto cast_done = dev.create_event();
  // h2d -> compute -> d2h, ordered only by events: a missing wait shows as wrong data.
  dev.copy_to_device(Queue::h2d, d_src.get(), src.data(), n * sizeof(float));
  dev.record(*uploaded, Queue::h2d);
  dev.queue_wait(Queue::compute, *uploaded);
  dev.record(*start, Queue::compute);
  dev.cast_f32_to_bf16(d_src.get(), d_dst.get(), static_cast<std::int64_t>(n));
  dev.record(*cast_done, Queue::compute);
  dev.queue_wait(Queue::d2h, *cast_done);
  dev.copy_to_host(Queue::d2h, back.data(), d_dst.get(), n * sizeof(bf16));
  dev.event_synchronize(*cast_done);
  dev.synchronize();
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad += back[i].bits != f32_to_bf16(src[i]).bits;
  EXPECT_EQ(bad, 0u);
  const double s = dev.elapsed_seconds(*start, *cast_done);
  EXPECT_GT(s, 0.0);   // sanity, not a timing assertion: the cast took some time
  EXPECT_LT(s, 10.0);  // and the units are seconds, not milliseconds
}

TEST(CudaDevice, WorksFromAnotherThread) {
  ZOB_REQUIRE_GPU();
  auto& dev = gpu();
  const auto src = random_f32(1000);
  std::vector<float> back(1000);
  std::thread t([&] {
    DeviceBuffer<float> d(dev, src);
    dev.copy_to_host(Queue::d2h, back.data(), d.get(), 1000 * sizeof(float));
    dev.synchronize();
  });
  t.join();
  EXPECT_EQ(back, src);
}

#ifdef ZOB_CUDA_PLUGIN_PATH
// Next to this binary (as in a GPU bundle), else where the build put it.
std::string plugin_path() {
  char self[4096] = {};
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len > 0) {
    std::string dir(self, static_cast<std::size_t>(len));
    dir = dir.substr(0, dir.rfind('/') + 1) + ZOB_CUDA_PLUGIN;
    if (access(dir.c_str(), R_OK) == 0) return dir;
  }
  return ZOB_CUDA_PLUGIN_PATH;
}

TEST(CudaPlugin, LoadsAndCreatesTheDeviceLikeTheExecutable) {
  const std::string path = plugin_path();
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << path << ": " << dlerror();
  auto create =
      reinterpret_cast<zob_backend_create_device_fn>(dlsym(lib, "zob_backend_create_device"));
  ASSERT_NE(create, nullptr) << dlerror();
  if (!slot().device) {
    // Without a GPU the plugin must still load and fail with the unavailable kind, caught here
    // across the library boundary.
    try {
      std::unique_ptr<Device> d(create(0));
      ADD_FAILURE() << "device created without a GPU";
    } catch (const DeviceError& e) {
      EXPECT_EQ(e.kind(), DeviceErrorKind::unavailable) << e.what();
    }
  } else {
    {
      std::unique_ptr<Device> d(create(0));
      EXPECT_EQ(d->info().backend, "cuda");
      void* p = d->allocate(1 << 20);
      EXPECT_EQ(d->memory_in_use(), std::size_t{1} << 20);
      d->deallocate(p);
    }
    try {
      std::unique_ptr<Device> d(create(4242));
      ADD_FAILURE() << "device 4242 created";
    } catch (const DeviceError& e) {
      EXPECT_EQ(e.kind(), DeviceErrorKind::unavailable) << e.what();
    }
  }
  // No dlclose: the plugin's static CUDA runtime registers exit handlers, and the executable
  // keeps its plugin loaded for the process lifetime too.
}
#endif

}  // namespace
}  // namespace zob::gpu_test
