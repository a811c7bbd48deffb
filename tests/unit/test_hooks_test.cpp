// The test-only hooks (src/driver/test_hooks.hpp) are read from the environment once per
// process: what a process found at its first call holds for the rest of it.
#include <gtest/gtest.h>

#include <cstdlib>

#include "driver/test_hooks.hpp"

namespace {

// In a fresh process (the death test re-executes the binary), so no earlier test has read them.
TEST(TestHooks, TheEnvironmentIsReadOnceAtTheFirstCall) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ::setenv("ZOB_TEST_SHARE_DEVICE", "1", 1);
        const bool first = zob::test_hooks::ranks_share_device();
        ::setenv("ZOB_TEST_SHARE_DEVICE", "0", 1);
        const bool later = zob::test_hooks::ranks_share_device();
        std::exit(first && later ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
