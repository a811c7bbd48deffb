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
                    const zob::HostEnvironment& h, std::uint64_t dev) {
  try {
    zob::preflight_check(c, p, h, dev);
  } catch (const zob::UsageError& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST(Preflight, AcceptsWhatFits) {
  zob::RunConfig c;
  zob::MemoryPlan p{10'000'000'000ull, 5'000'000'000ull, 4'000'000'000ull};
  EXPECT_EQ(refusal(c, p, roomy_host(), 80'000'000'000ull), "");
}

TEST(Preflight, RefusesShortHostMemoryWithTheNumbers) {
  zob::RunConfig c;
  zob::MemoryPlan p{60'000'000'000ull, 40'000'000'000ull, 0};
  const auto msg = refusal(c, p, roomy_host(), 0);
  EXPECT_NE(msg.find("100.00 GB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("90.00 GB"), std::string::npos) << msg;
}

TEST(Preflight, RefusesLowMemlockOnlyForLockingArmsAndWithoutCapability) {
  zob::RunConfig c;
  zob::MemoryPlan p{2'000'000'000ull, 1, 0};
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
  zob::MemoryPlan p{1, 1, 50'000'000'000ull};
  EXPECT_NE(refusal(c, p, roomy_host(), 40'000'000'000ull).find("device memory"),
            std::string::npos);
  EXPECT_EQ(refusal(c, p, roomy_host(), 0), "");  // unknown device size: no refusal
}
