#include <gtest/gtest.h>
#include <signal.h>

#include <nlohmann/json.hpp>

#include "cli/cli.hpp"
#include "driver/driver.hpp"
#include "zob/errors.hpp"

namespace {

TEST(Driver, SignalsAreNamedBothWays) {
  EXPECT_EQ(zob::describe_signal(SIGSEGV).rfind("SIGSEGV (", 0), 0u);
  EXPECT_EQ(zob::describe_signal(SIGKILL).rfind("SIGKILL (", 0), 0u);
  EXPECT_NE(zob::describe_signal(SIGINT).find("Interrupt"), std::string::npos);
}

// The child re-validates the configuration it is handed: a config that never went through
// the CLI (a hand-edited --internal-config) is refused the same way.
TEST(Driver, ChildConfigIsValidatedAgain) {
  zob::RunConfig c;
  c.threads = 1;
  nlohmann::json j = c;
  j["steps"] = 0;
  EXPECT_THROW(zob::validate_run_config(j.get<zob::RunConfig>()), zob::UsageError);
  j["steps"] = 3;
  j["hidden"] = std::int64_t{1} << 40;
  EXPECT_THROW(zob::validate_run_config(j.get<zob::RunConfig>()), zob::UsageError);
}

}  // namespace
