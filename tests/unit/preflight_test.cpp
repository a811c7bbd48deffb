#include <gtest/gtest.h>

#include "zob/errors.hpp"
#include "zob/preflight.hpp"

namespace {

zob::HostEnvironment roomy_host() {
  zob::HostEnvironment h;
  h.mem_total = 100'000'000'000ull;
  h.mem_available = 90'000'000'000ull;
  h.memlock_limit = 1ull << 40;
  return h;
}

std::string refusal(const zob::RunConfig& c, const zob::MemoryPlan& p,
                    const zob::HostEnvironment& h, zob::DeviceMemory dev) {
  try {
    zob::preflight_check(c, p, h, dev);
  } catch (const zob::UsageError& e) {
    return e.what();
  }
  return {};
}

zob::MemoryPlan plan(std::uint64_t pinned, std::uint64_t pageable, std::uint64_t device,
                     int ranks = 1) {
  zob::MemoryPlan p;
  p.host_pinned_bytes = pinned;
  p.host_pageable_bytes = pageable;
  p.device_bytes = device;
  p.ranks = ranks;
  return p;
}

}  // namespace

TEST(Preflight, AcceptsWhatFits) {
  zob::RunConfig c;
  const zob::MemoryPlan p = plan(10'000'000'000ull, 5'000'000'000ull, 4'000'000'000ull);
  EXPECT_EQ(refusal(c, p, roomy_host(), 80'000'000'000ull), "");
}

TEST(Preflight, RefusesShortHostMemoryWithTheNumbers) {
  zob::RunConfig c;
  const zob::MemoryPlan p = plan(60'000'000'000ull, 40'000'000'000ull, 0);
  const auto msg = refusal(c, p, roomy_host(), 0);
  EXPECT_NE(msg.find("100.00 GB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("90.00 GB"), std::string::npos) << msg;
}

TEST(Preflight, RefusesLowMemlockOnlyForLockingArmsAndWithoutCapability) {
  zob::RunConfig c;
  const zob::MemoryPlan p = plan(2'000'000'000ull, 1, 0);
  auto h = roomy_host();
  h.memlock_limit = 8 << 20;
  EXPECT_NE(refusal(c, p, h, 0).find("RLIMIT_MEMLOCK"), std::string::npos);
  h.can_lock_without_limit = true;
  EXPECT_EQ(refusal(c, p, h, 0), "");
  h.can_lock_without_limit = false;
  h.memlock_unlimited = true;
  EXPECT_EQ(refusal(c, p, h, 0), "");
  h.memlock_unlimited = false;
  c.arms = {zob::Arm::pageable, zob::Arm::hostalloc};
  EXPECT_EQ(refusal(c, p, h, 0), "");
}

TEST(Preflight, RefusesShortDeviceMemory) {
  zob::RunConfig c;
  const zob::MemoryPlan p = plan(1, 1, 50'000'000'000ull);
  EXPECT_NE(refusal(c, p, roomy_host(), 40'000'000'000ull).find("device memory"),
            std::string::npos);
  EXPECT_EQ(refusal(c, p, roomy_host(), 0), "");  // unknown device size: no refusal
}

// RLIMIT_MEMLOCK is per process: four ranks locking 2 GB each pass a 3 GB limit, one rank
// locking 4 GB does not; their host memory adds up on the node.
TEST(Preflight, ChecksMemlockPerRankAndHostMemoryPerNode) {
  zob::RunConfig c;
  auto h = roomy_host();
  h.memlock_limit = 3'000'000'000ull;
  EXPECT_EQ(refusal(c, plan(2'000'000'000ull, 1, 0, 4), h, 0), "");
  const std::string one = refusal(c, plan(4'000'000'000ull, 1, 0, 1), h, 0);
  EXPECT_NE(one.find("RLIMIT_MEMLOCK (per process)"), std::string::npos) << one;
  h.memlock_unlimited = true;
  // 4 ranks x 25 GB = 100 GB > 90 GB available, though one rank's 25 GB would fit.
  EXPECT_EQ(refusal(c, plan(20'000'000'000ull, 5'000'000'000ull, 0, 1), h, 0), "");
  const std::string node = refusal(c, plan(20'000'000'000ull, 5'000'000'000ull, 0, 4), h, 0);
  EXPECT_NE(node.find("an arm's 4 ranks need 100.00 GB"), std::string::npos) << node;
}

// --device-memory below the device's total is the limit and is named; above it, the device's
// total still is.
TEST(Preflight, DeviceMemoryCapIsTheLimitAndIsNamed) {
  zob::RunConfig c;
  const zob::MemoryPlan p = plan(1, 1, 30'000'000'000ull);
  EXPECT_EQ(refusal(c, p, roomy_host(), 40'000'000'000ull), "");
  c.device_memory_bytes = 24'000'000'000ull;
  EXPECT_EQ(zob::device_limit_bytes(c, 40'000'000'000ull), 24'000'000'000ull);
  const std::string capped = refusal(c, p, roomy_host(), 40'000'000'000ull);
  EXPECT_NE(capped.find("--device-memory allows 24.00 GB"), std::string::npos) << capped;
  EXPECT_NE(refusal(c, p, roomy_host(), 0).find("--device-memory"), std::string::npos);
  c.device_memory_bytes = 200'000'000'000ull;
  EXPECT_EQ(zob::device_limit_bytes(c, 40'000'000'000ull), 40'000'000'000ull);
  EXPECT_EQ(refusal(c, p, roomy_host(), 40'000'000'000ull), "");
}

// The CPU device's memory is the host's RAM: host plus device must fit MemAvailable together,
// though each fits alone. The device share is the planned peak, per rank; a GPU's device bytes
// never count against the host.
TEST(Preflight, HostRamDeviceAddsItsMemoryToTheHostCheck) {
  zob::RunConfig c;
  const zob::DeviceMemory gpu{100'000'000'000ull, 0, false};
  const zob::DeviceMemory host_ram{100'000'000'000ull, 0, true};
  const zob::MemoryPlan fits = plan(30'000'000'000ull, 20'000'000'000ull, 30'000'000'000ull);
  EXPECT_EQ(zob::host_ram_needed(fits, gpu), 50'000'000'000ull);
  EXPECT_EQ(zob::host_ram_needed(fits, host_ram), 80'000'000'000ull);
  EXPECT_EQ(refusal(c, fits, roomy_host(), host_ram), "");  // 80 of 90 GB
  const zob::MemoryPlan over = plan(30'000'000'000ull, 20'000'000'000ull, 45'000'000'000ull);
  EXPECT_EQ(refusal(c, over, roomy_host(), gpu), "");  // the GPU holds its 45 GB
  const std::string msg = refusal(c, over, roomy_host(), host_ram);
  EXPECT_NE(msg.find("95.00 GB of host memory"), std::string::npos) << msg;
  EXPECT_NE(msg.find("45.00 GB of device memory at its planned peak, the same RAM"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("--batch or --seq"), std::string::npos) << msg;
  const zob::MemoryPlan two = plan(10'000'000'000ull, 10'000'000'000ull, 20'000'000'000ull, 2);
  EXPECT_EQ(zob::host_ram_needed(two, host_ram), 80'000'000'000ull);  // (20 + 20) per rank
}
