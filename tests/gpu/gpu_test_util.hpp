// Shared helpers of the GPU tests: one CudaDevice for the whole binary (creating a context and
// a cuBLAS handle per test would dominate the run time), a skip with the runtime's own reason
// where there is no GPU or driver, device buffers, fresh random data, bf16 ulp distances.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_device.hpp"
#include "zob/bf16.hpp"
#include "zob/errors.hpp"

namespace zob::gpu_test {

struct DeviceSlot {
  std::unique_ptr<CudaDevice> device;
  std::string why_not;
};

inline DeviceSlot& slot() {
  static DeviceSlot s = [] {
    DeviceSlot d;
    try {
      d.device = std::make_unique<CudaDevice>(0);
    } catch (const DeviceError& e) {
      d.why_not = e.what();
    }
    return d;
  }();
  return s;
}

// First line of every test that needs the GPU; then use gpu().
#define ZOB_REQUIRE_GPU()              \
  if (!::zob::gpu_test::slot().device) \
  GTEST_SKIP() << "no CUDA GPU here: " << ::zob::gpu_test::slot().why_not

inline CudaDevice& gpu() { return *slot().device; }

// Fresh seed per run, printed so a failure can be replayed with ZOB_TEST_SEED.
inline std::uint64_t test_seed() {
  if (const char* s = std::getenv("ZOB_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  static const std::uint64_t seed = std::random_device{}();
  return seed;
}

inline std::mt19937_64& rng() {
  static std::mt19937_64 g(test_seed());
  return g;
}

inline std::vector<bf16> random_bf16(std::size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<bf16> v(n);
  for (auto& x : v) x = f32_to_bf16(d(rng()));
  return v;
}

inline std::vector<float> random_f32(std::size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng());
  return v;
}

// Distance in representable bf16 values (0 = same bits; +0 and -0 are 0 apart).
inline int ulp_distance(bf16 a, bf16 b) {
  auto ordered = [](bf16 v) {
    const int mag = v.bits & 0x7fff;
    return (v.bits & 0x8000) ? -mag : mag;
  };
  return std::abs(ordered(a) - ordered(b));
}

// A typed device buffer that frees itself; contents start as `poison` bytes so an unwritten
// output never passes as zeros.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer(Device& dev, std::size_t count) : dev_(dev), count_(count) {
    ptr_ = static_cast<T*>(dev_.allocate(bytes()));
    poison();
  }
  DeviceBuffer(Device& dev, const std::vector<T>& host) : DeviceBuffer(dev, host.size()) {
    upload(host);
  }
  ~DeviceBuffer() { dev_.deallocate(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  std::size_t bytes() const { return count_ * sizeof(T); }
  void upload(const std::vector<T>& host) {
    dev_.copy_to_device(Queue::compute, ptr_, host.data(), host.size() * sizeof(T));
    dev_.synchronize();
  }
  std::vector<T> download() {
    std::vector<T> host(count_);
    dev_.synchronize();
    dev_.copy_to_host(Queue::compute, host.data(), ptr_, bytes());
    dev_.synchronize();
    return host;
  }
  void poison() {
    std::vector<unsigned char> p(bytes(), 0xA5);
    dev_.copy_to_device(Queue::compute, ptr_, p.data(), p.size());
    dev_.synchronize();
  }

 private:
  Device& dev_;
  std::size_t count_;
  T* ptr_ = nullptr;
};

}  // namespace zob::gpu_test
