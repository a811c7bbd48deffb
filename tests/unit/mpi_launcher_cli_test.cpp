// --launcher: the flag's parsing, and the refusal of zob_core's app_main when no MPI entry is
// handed over (a build without MPI). The launcher itself runs in tests/e2e/mpi_e2e_test.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "app/app.hpp"
#include "cli/cli.hpp"
#include "zob/errors.hpp"
#include "zob/exit_codes.hpp"

namespace {

const std::vector<std::string> kBase{"zero3-offload-bench",
                                     "--device",
                                     "cpu",
                                     "--hidden",
                                     "32",
                                     "--layers",
                                     "1",
                                     "--vocab",
                                     "64",
                                     "--arms",
                                     "registered"};

std::vector<std::string> with(std::vector<std::string> extra) {
  auto args = kBase;
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(MpiLauncherCli, DefaultsToForkAndRecordsWhatWasGiven) {
  const auto plain = zob::parse_command_line(with({}));
  EXPECT_EQ(plain.launcher, zob::CliCommand::Launcher::fork);
  EXPECT_FALSE(plain.gpus_given);
  EXPECT_FALSE(plain.threads_given);
  const auto mpi =
      zob::parse_command_line(with({"--launcher", "mpi", "--gpus", "2", "--threads", "3"}));
  EXPECT_EQ(mpi.launcher, zob::CliCommand::Launcher::mpi);
  EXPECT_TRUE(mpi.gpus_given);
  EXPECT_TRUE(mpi.threads_given);
  EXPECT_EQ(mpi.run.gpus, 2);
  EXPECT_EQ(mpi.run.threads, 3);
}

TEST(MpiLauncherCli, UnknownLauncherIsAUsageError) {
  EXPECT_THROW(zob::parse_command_line(with({"--launcher", "slurm"})), zob::UsageError);
}

TEST(MpiLauncherCli, BuildWithoutMpiRefusesWithOneLine) {
  auto args = with({"--launcher", "mpi"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  ::testing::internal::CaptureStderr();
  const int code = zob::app_main(static_cast<int>(argv.size()), argv.data(), nullptr);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, zob::exit_code::usage);
  EXPECT_EQ(err.find('\n'), err.size() - 1) << err;
  EXPECT_NE(err.find("this build has no MPI"), std::string::npos) << err;
}

TEST(MpiLauncherCli, MpiEntryGetsTheParsedCommand) {
  static zob::MpiRequest seen;
  auto args = with({"--launcher", "mpi", "--steps", "3"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  const int code =
      zob::app_main(static_cast<int>(argv.size()), argv.data(), [](const zob::MpiRequest& cmd) {
        seen = cmd;
        return 42;
      });
  EXPECT_EQ(code, 42);
  EXPECT_EQ(seen.run.steps, 3);
}

}  // namespace
