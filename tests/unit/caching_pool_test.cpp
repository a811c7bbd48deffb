// The deepspeed schedule's caching pool (src/step/caching_pool.hpp) on the CPU device: PyTorch's
// rounding and segments, reuse of freed blocks, the --device-memory cap, and PyTorch's retry
// when the device itself runs out.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>

#include "backends/cpu/cpu_device.hpp"
#include "step/caching_pool.hpp"
#include "zob/errors.hpp"
#include "zob/forwarding_device.hpp"

namespace {

using zob::step_detail::CachingPoolDevice;
constexpr std::uint64_t MiB = 1ull << 20;

// A device that holds `budget` bytes and then reports out of memory, as a shared GPU does.
class BudgetDevice final : public zob::ForwardingDevice {
 public:
  BudgetDevice(zob::Device& inner, std::uint64_t budget) : ForwardingDevice(inner), left_(budget) {}
  void* allocate(std::size_t bytes) override {
    if (bytes > left_) {
      throw zob::DeviceError(zob::DeviceErrorKind::out_of_memory, "budget device: out of memory");
    }
    left_ -= bytes;
    void* p = ForwardingDevice::allocate(bytes);
    sizes_[p] = bytes;
    return p;
  }
  void deallocate(void* p) noexcept override {
    left_ += sizes_[p];
    sizes_.erase(p);
    ForwardingDevice::deallocate(p);
  }

 protected:
  void before(const char*) override {}

 private:
  std::uint64_t left_;
  std::map<void*, std::uint64_t> sizes_;
};

TEST(CachingPool, RoundsAndCarvesSegmentsAsPyTorch) {
  EXPECT_EQ(CachingPoolDevice::round_size(1), 512u);
  EXPECT_EQ(CachingPoolDevice::round_size(513), 1024u);
  EXPECT_EQ(CachingPoolDevice::segment_size(512), 2 * MiB);            // small requests
  EXPECT_EQ(CachingPoolDevice::segment_size(3 * MiB), 20 * MiB);       // up to 10 MiB
  EXPECT_EQ(CachingPoolDevice::segment_size(11 * MiB + 1), 12 * MiB);  // 2 MiB multiples
  // reduce_bucket_size 5e8 bf16 as torch.cuda.memory_allocated() shows it.
  EXPECT_EQ(CachingPoolDevice::fresh_block_size(1'000'000'000), 1'000'341'504u);
  zob::CpuDevice cpu(1);
  CachingPoolDevice pool(cpu, 0);
  void* a = pool.allocate(100);
  void* b = pool.allocate(100);
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 512);  // one small segment
  EXPECT_EQ(pool.memory_in_use(), 1024u);
  EXPECT_EQ(pool.reserved(), 2 * MiB);
  pool.deallocate(a);
  pool.deallocate(b);
  EXPECT_EQ(pool.memory_in_use(), 0u);
  EXPECT_EQ(pool.memory_peak(), 1024u);
}

TEST(CachingPool, AFreedBlockIsReusedWithoutANewSegment) {
  zob::CpuDevice cpu(1);
  CachingPoolDevice pool(cpu, 0);
  void* a = pool.allocate(30 * MiB);
  pool.deallocate_after(a, zob::Queue::compute);  // the CPU device's fences are passed at once
  void* b = pool.allocate(30 * MiB);
  EXPECT_EQ(a, b);
  EXPECT_EQ(pool.reserved(), 30 * MiB);
  EXPECT_EQ(pool.reserved_peak(), 30 * MiB);
  pool.deallocate(b);
}

// A device whose fences have not passed until release(): the GPU behind a host that runs ahead.
class HeldFencesDevice final : public zob::ForwardingDevice {
 public:
  explicit HeldFencesDevice(zob::Device& inner) : ForwardingDevice(inner) {}
  bool event_done(zob::DeviceEvent& e) override {
    return !held_ && ForwardingDevice::event_done(e);
  }
  void event_synchronize(zob::DeviceEvent& e) override {
    held_ = false;  // the host waited: the device has passed it
    ForwardingDevice::event_synchronize(e);
  }
  void release() { held_ = false; }

 protected:
  void before(const char*) override {}

 private:
  bool held_ = true;
};

// PyTorch's streams: a block freed on its own queue is reused at once by that queue's next
// request (stream order makes it safe) even though the device has not caught up; a block
// another queue used last waits for its fences; no queue takes another's blocks.
TEST(CachingPool, OwnQueueReusesAtOnceOtherQueuesWaitForTheFences) {
  zob::CpuDevice cpu(1);
  HeldFencesDevice held(cpu);
  CachingPoolDevice pool(held, 0);
  void* a = pool.allocate(30 * MiB);
  pool.deallocate_after(a, zob::Queue::compute);  // its own queue: no fence to wait for
  void* b = pool.allocate(30 * MiB);
  EXPECT_EQ(a, b);
  EXPECT_EQ(pool.reserved(), 30 * MiB);
  pool.deallocate_after(b, zob::Queue::compute);
  void* c = pool.allocate_on(zob::Queue::h2d, 30 * MiB);  // not the compute queue's block
  EXPECT_NE(c, a);
  EXPECT_EQ(pool.reserved(), 60 * MiB);
  pool.deallocate_after(c, zob::Queue::compute);  // read by compute last: fenced
  EXPECT_EQ(pool.memory_in_use(), 0u);            // counted free at once, as PyTorch does
  void* d = pool.allocate_on(zob::Queue::h2d, 30 * MiB);
  EXPECT_NE(d, c);  // the fence on compute has not passed
  EXPECT_EQ(pool.reserved(), 90 * MiB);
  held.release();
  void* e = pool.allocate_on(zob::Queue::h2d, 30 * MiB);
  EXPECT_EQ(e, c);
  EXPECT_EQ(pool.reserved(), 90 * MiB);
  pool.deallocate(d);
  pool.deallocate(e);
}

TEST(CachingPool, TheCapRefusesNamingTheFlag) {
  zob::CpuDevice cpu(1);
  CachingPoolDevice pool(cpu, 50 * MiB);
  void* a = pool.allocate(30 * MiB);
  try {
    (void)pool.allocate(30 * MiB);
    FAIL() << "a second 30 MiB block fits a 50 MiB cap";
  } catch (const zob::DeviceError& e) {
    EXPECT_EQ(e.kind(), zob::DeviceErrorKind::out_of_memory);
    EXPECT_NE(std::string(e.what()).find("--device-memory"), std::string::npos) << e.what();
  }
  pool.deallocate(a);
  // The free 30 MiB segment goes back so that a 40 MiB one fits the cap.
  void* b = pool.allocate(40 * MiB);
  EXPECT_EQ(pool.reserved(), 40 * MiB);
  pool.deallocate(b);
}

TEST(CachingPool, ADeviceOutOfMemoryGivesFreeSegmentsBackAndRetries) {
  zob::CpuDevice cpu(1);
  BudgetDevice budget(cpu, 64 * MiB);
  CachingPoolDevice pool(budget, 0);  // no cap: only the device's own limit
  void* a = pool.allocate(30 * MiB);
  pool.deallocate(a);                 // cached, still reserved
  void* b = pool.allocate(50 * MiB);  // 30 + 50 > 64: the device refuses, the pool retries
  EXPECT_EQ(pool.reserved(), 50 * MiB);
  void* c = nullptr;
  EXPECT_THROW(c = pool.allocate(20 * MiB), zob::DeviceError);  // 50 + 20 > 64, nothing free
  EXPECT_EQ(c, nullptr);
  pool.deallocate(b);
}

}  // namespace
