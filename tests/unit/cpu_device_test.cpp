// zob::CpuDevice: memory accounting, events, copies, errors, and that its kernels are the
// reference kernels (same bits as zob::cpu::*).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "zob/errors.hpp"

namespace {

std::mt19937_64 fresh_rng(std::uint64_t* seed) {
  *seed = std::random_device{}();
  return std::mt19937_64(*seed);
}

TEST(CpuDevice, InfoDescribesTheHost) {
  zob::CpuDevice dev(2);
  EXPECT_EQ(dev.info().backend, "cpu");
  EXPECT_FALSE(dev.info().name.empty());
  EXPECT_EQ(dev.info().runtime_version.rfind("OpenBLAS ", 0), 0u) << dev.info().runtime_version;
  EXPECT_GT(dev.info().runtime_version.size(), 9u);
  EXPECT_GT(dev.info().total_memory_bytes, std::uint64_t{1} << 26);
  EXPECT_FALSE(dev.registration_applicable());
}

TEST(CpuDevice, TracksBytesInUseAndThePeak) {
  zob::CpuDevice dev(1);
  EXPECT_EQ(dev.memory_in_use(), 0u);
  void* a = dev.allocate(1000);
  void* b = dev.allocate(3000);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b) % 256, 0u);
  EXPECT_EQ(dev.memory_in_use(), 4000u);
  dev.deallocate(a);
  EXPECT_EQ(dev.memory_in_use(), 3000u);
  void* c = dev.allocate(500);
  EXPECT_EQ(dev.memory_in_use(), 3500u);
  EXPECT_EQ(dev.memory_peak(), 4000u);
  dev.deallocate(b);
  dev.deallocate(c);
  dev.deallocate(nullptr);
  EXPECT_EQ(dev.memory_in_use(), 0u);
  EXPECT_EQ(dev.memory_peak(), 4000u);
}

TEST(CpuDevice, AbsurdAllocationThrowsOutOfMemoryNamingTheBytes) {
  zob::CpuDevice dev(1);
  const std::size_t absurd = std::numeric_limits<std::size_t>::max() / 2;
  try {
    dev.allocate(absurd);
    FAIL() << "allocate of " << absurd << " bytes succeeded";
  } catch (const zob::DeviceError& e) {
    EXPECT_EQ(e.kind(), zob::DeviceErrorKind::out_of_memory);
    EXPECT_NE(std::string(e.what()).find(std::to_string(absurd)), std::string::npos) << e.what();
  }
  EXPECT_EQ(dev.memory_in_use(), 0u);
  EXPECT_EQ(dev.memory_peak(), 0u);
}

TEST(CpuDevice, RegistrationDoesNotApply) {
  zob::CpuDevice dev(1);
  void* host = dev.allocate_host(10000);
  ASSERT_NE(host, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(host) % 4096, 0u);
  try {
    dev.register_host(host, 12288);
    FAIL() << "register_host succeeded on the CPU device";
  } catch (const zob::DeviceError& e) {
    EXPECT_EQ(e.kind(), zob::DeviceErrorKind::unavailable);
    EXPECT_NE(std::string(e.what()).find("does not apply"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(dev.is_registered(host));
  dev.deallocate_host(host);
}

TEST(CpuDevice, CopiesRoundTripSmallAndLarge) {
  std::uint64_t seed;
  auto rng = fresh_rng(&seed);
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  zob::CpuDevice dev(2);
  for (std::size_t bytes : {std::size_t{1}, std::size_t{4097}, std::size_t{(9u << 20) + 13}}) {
    std::vector<unsigned char> src(bytes), back(bytes, 0);
    for (auto& b : src) b = static_cast<unsigned char>(rng());
    void* device = dev.allocate(bytes);
    dev.copy_to_device(zob::Queue::h2d, device, src.data(), bytes);
    dev.copy_to_host(zob::Queue::d2h, back.data(), device, bytes);
    EXPECT_EQ(std::memcmp(src.data(), back.data(), bytes), 0) << bytes << " bytes";
    void* other = dev.allocate(bytes);  // device to device
    dev.copy_on_device(zob::Queue::compute, other, device, bytes);
    std::fill(back.begin(), back.end(), 0);
    dev.copy_to_host(zob::Queue::d2h, back.data(), other, bytes);
    EXPECT_EQ(std::memcmp(src.data(), back.data(), bytes), 0) << bytes << " bytes, on device";
    dev.deallocate(other);
    dev.fill_zero(zob::Queue::compute, device, bytes);
    dev.copy_to_host(zob::Queue::d2h, back.data(), device, bytes);
    EXPECT_EQ(std::count(back.begin(), back.end(), 0), static_cast<std::ptrdiff_t>(bytes));
    dev.deallocate(device);
  }
  EXPECT_EQ(dev.memory_in_use(), 0u);
}

TEST(CpuDevice, EventsAreOrderedAndElapsedIsNonNegative) {
  zob::CpuDevice dev(1);
  auto a = dev.create_event(), b = dev.create_event(), c = dev.create_event();
  EXPECT_THROW(dev.elapsed_seconds(*a, *b), zob::DeviceError);  // not recorded yet
  dev.record(*a, zob::Queue::compute);
  std::vector<float> work(1 << 16, 1.0f);
  std::vector<zob::bf16> out(work.size());
  dev.cast_f32_to_bf16(work.data(), out.data(), static_cast<std::int64_t>(work.size()),
                       zob::Queue::d2h);
  dev.record(*b, zob::Queue::d2h);
  dev.queue_wait(zob::Queue::compute, *b);
  dev.record(*c, zob::Queue::compute);
  dev.event_synchronize(*c);
  dev.synchronize();
  const double ab = dev.elapsed_seconds(*a, *b), bc = dev.elapsed_seconds(*b, *c);
  const double ac = dev.elapsed_seconds(*a, *c);
  EXPECT_GE(ab, 0.0);
  EXPECT_GE(bc, 0.0);
  EXPECT_DOUBLE_EQ(ac, ab + bc);
  EXPECT_LE(dev.elapsed_seconds(*c, *a), 0.0);
}

TEST(CpuDevice, KernelsAreTheReferenceKernels) {
  std::uint64_t seed;
  auto rng = fresh_rng(&seed);
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::normal_distribution<float> normal;
  const std::int64_t m = 33, n = 47, k = 65;
  std::vector<zob::bf16> a(m * k), b(n * k), c1(m * n), c2(m * n);
  for (auto& v : a) v = zob::f32_to_bf16(normal(rng));
  for (auto& v : b) v = zob::f32_to_bf16(normal(rng));
  zob::CpuDevice dev(2);
  dev.gemm({false, true, m, n, k, a.data(), k, b.data(), k, c1.data(), n});
  zob::cpu::gemm(false, true, m, n, k, a.data(), k, b.data(), k, c2.data(), n, nullptr);
  EXPECT_EQ(std::memcmp(c1.data(), c2.data(), c1.size() * 2), 0);
  float s1 = 0, s2 = 0;
  dev.sum(a.data(), m * k, &s1);
  zob::cpu::sum(a.data(), m * k, &s2, nullptr);
  EXPECT_EQ(s1, s2);
  EXPECT_NE(s1, 0.0f);
}

}  // namespace
