#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "cli/cli.hpp"
#include "zob/errors.hpp"
#include "zob/thread_pool.hpp"

namespace {

zob::CliCommand parse(std::vector<std::string> flags) {
  flags.insert(flags.begin(), "zero3-offload-bench");
  return zob::parse_command_line(flags);
}

// The UsageError text of a bad command line; fails the test when it parses.
std::string refusal(std::vector<std::string> flags) {
  try {
    parse(std::move(flags));
  } catch (const zob::UsageError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

void expect_refused(std::vector<std::string> flags, const std::string& names) {
  SCOPED_TRACE(::testing::PrintToString(flags));
  const std::string msg = refusal(std::move(flags));
  EXPECT_NE(msg.find(names), std::string::npos) << msg;
  // "<what>; <fix>", one line.
  EXPECT_NE(msg.find("; "), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST(Cli, DefaultsMatchThePythonScript) {
  const auto cmd = parse({});
  ASSERT_EQ(cmd.kind, zob::CliCommand::Kind::run);
  const auto& c = cmd.run;
  EXPECT_EQ(c.model.hidden, 2048);
  EXPECT_EQ(c.model.layers, 12);
  EXPECT_EQ(c.model.vocab, 32000);
  EXPECT_EQ(c.batch, 4);
  EXPECT_EQ(c.seq, 128);
  EXPECT_EQ(c.steps, 4);
  EXPECT_EQ(c.warmup, 2);
  EXPECT_EQ(c.device, zob::DeviceKind::automatic);
  EXPECT_EQ(c.arms, (std::vector<zob::Arm>{zob::Arm::registered, zob::Arm::unregistered}));
  EXPECT_EQ(c.loop, zob::Loop::copy_back);
  EXPECT_EQ(c.chunk_elems, std::int64_t{1} << 26);
  EXPECT_EQ(c.sub_group_size, 1000000000);
  EXPECT_EQ(c.threads, zob::available_cpus());
  EXPECT_EQ(c.seed, 42u);
  EXPECT_EQ(c.timeout_s, 0.0);
  EXPECT_TRUE(c.json_path.empty());
}

TEST(Cli, EveryFlagReachesTheConfig) {
  std::mt19937_64 rng(std::random_device{}());
  const auto hidden = static_cast<std::int64_t>(rng() % 4000 + 1);
  const auto seed = rng();
  const auto cmd = parse({"--hidden",
                          std::to_string(hidden),
                          "--layers",
                          "3",
                          "--batch",
                          "5",
                          "--seq",
                          "7",
                          "--steps",
                          "9",
                          "--warmup",
                          "0",
                          "--vocab",
                          "1234",
                          "--device",
                          "cpu",
                          "--device-index",
                          "0",
                          "--arms",
                          "hostalloc,pageable,registered",
                          "--offload-param",
                          "--chunk-elems",
                          "1000",
                          "--sub-group-size",
                          "77",
                          "--threads",
                          "3",
                          "--seed",
                          std::to_string(seed),
                          "--timeout",
                          "2.5"});
  const auto& c = cmd.run;
  EXPECT_EQ(c.model.hidden, hidden);
  EXPECT_EQ(c.model.layers, 3);
  EXPECT_EQ(c.batch, 5);
  EXPECT_EQ(c.seq, 7);
  EXPECT_EQ(c.steps, 9);
  EXPECT_EQ(c.warmup, 0);
  EXPECT_EQ(c.model.vocab, 1234);
  EXPECT_EQ(c.device, zob::DeviceKind::cpu);
  EXPECT_EQ(c.arms,
            (std::vector<zob::Arm>{zob::Arm::hostalloc, zob::Arm::pageable, zob::Arm::registered}));
  EXPECT_EQ(c.loop, zob::Loop::offload_param);
  EXPECT_EQ(c.chunk_elems, 1000);
  EXPECT_EQ(c.sub_group_size, 77);
  EXPECT_EQ(c.threads, 3);
  EXPECT_EQ(c.seed, seed);
  EXPECT_DOUBLE_EQ(c.timeout_s, 2.5);
}

TEST(Cli, BadNumbersAreRefusedNamingTheFlag) {
  for (const char* flag : {"--hidden", "--layers", "--batch", "--seq", "--steps", "--vocab",
                           "--chunk-elems", "--sub-group-size", "--threads"}) {
    expect_refused({flag, "0"}, flag);
    expect_refused({flag, "-3"}, flag);
    expect_refused({flag, "abc"}, flag);
    expect_refused({flag, "12x"}, flag);
    expect_refused({flag, ""}, flag);
    expect_refused({flag, "99999999999999999999999"}, flag);
  }
  expect_refused({"--warmup", "-1"}, "--warmup");
  expect_refused({"--device-index", "-1"}, "--device-index");
  expect_refused({"--seed", "-1"}, "--seed");
  expect_refused({"--seed", "18446744073709551616"}, "--seed");
  expect_refused({"--timeout", "-1"}, "--timeout");
  expect_refused({"--timeout", "nan"}, "--timeout");
  expect_refused({"--timeout", "inf"}, "--timeout");
  expect_refused({"--timeout", "1e400"}, "--timeout");
}

TEST(Cli, WarmupMayBeZeroButStepsNot) {
  EXPECT_EQ(parse({"--warmup", "0"}).run.warmup, 0);
  expect_refused({"--steps", "0"}, "--steps");
}

TEST(Cli, ByteCountsThatOverflowAreRefused) {
  // 2*V*h + n*(8h^2+5h) at these sizes is ~8.8e17 params: 28 B/param overflows 64 bits.
  expect_refused({"--hidden", "1048576", "--layers", "100000", "--vocab", "2147483647"},
                 "overflow");
  // batch * seq above the 32-bit token positions.
  expect_refused({"--batch", "1048576", "--seq", "16777216"}, "--batch");
}

TEST(Cli, ArmListsAreChecked) {
  expect_refused({"--arms", "pinned"}, "unknown arm 'pinned'");
  expect_refused({"--arms", "registered,registered"}, "twice");
  expect_refused({"--arms", ""}, "empty");
  expect_refused({"--arms", "registered,"}, "empty");
  expect_refused({"--arms", ",unregistered"}, "empty");
  EXPECT_EQ(parse({"--arms", "pageable"}).run.arms, std::vector<zob::Arm>{zob::Arm::pageable});
}

TEST(Cli, UnknownDeviceAndUnknownFlagsAreUsageErrors) {
  expect_refused({"--device", "gpu"}, "unknown device 'gpu'");
  expect_refused({"--bogus"}, "--bogus");
  expect_refused({"--hidden"}, "--hidden");
  expect_refused({"adam", "--hidden", "3"}, "--hidden");
  expect_refused({"compar", "a.json", "b.json"}, "did you mean compare?");
}

// As argparse: the last of a repeated flag wins, lists included; subcommands' flags too.
TEST(Cli, ARepeatedFlagTakesItsLastValue) {
  const auto cmd = parse({"--hidden", "64", "--hidden", "128", "--arms", "registered,pageable",
                          "--arms", "unregistered,pageable"});
  EXPECT_EQ(cmd.run.model.hidden, 128);
  EXPECT_EQ(cmd.run.arms, (std::vector<zob::Arm>{zob::Arm::unregistered, zob::Arm::pageable}));
  EXPECT_EQ(parse({"adam", "--params", "1000", "--params", "2000"}).adam.params, 2000);
  const auto compare = parse({"compare", "a.json", "b.json", "c.json"});
  EXPECT_EQ(compare.compare.files, (std::vector<std::string>{"a.json", "b.json", "c.json"}));
}

TEST(Cli, JsonPathMustBeWritable) {
  expect_refused({"--json", "/nonexistent-dir-zob/out.json"}, "/nonexistent-dir-zob/out.json");
  const auto dir = std::filesystem::temp_directory_path();
  expect_refused({"--json", dir.string()}, "directory");
  expect_refused({"--json", ""}, "--json");
  // A writable new path passes and is not left behind by the check.
  const auto fresh = dir / ("zob-cli-test-" + std::to_string(::getpid()) + ".json");
  std::filesystem::remove(fresh);
  EXPECT_EQ(parse({"--json", fresh.string()}).run.json_path, fresh.string());
  EXPECT_FALSE(std::filesystem::exists(fresh));
  // An existing file is left exactly as it was.
  { std::ofstream(fresh) << "keep"; }
  parse({"--json", fresh.string()});
  std::ifstream in(fresh);
  std::string text;
  in >> text;
  EXPECT_EQ(text, "keep");
  std::filesystem::remove(fresh);
}

TEST(Cli, AdamSubcommand) {
  const auto cmd = parse({"adam", "--params", "100000", "--threads", "2", "--repeats", "3"});
  ASSERT_EQ(cmd.kind, zob::CliCommand::Kind::adam);
  EXPECT_EQ(cmd.adam.params, 100000);
  EXPECT_EQ(cmd.adam.threads, 2);
  EXPECT_EQ(cmd.adam.repeats, 3);
  expect_refused({"adam", "--params", "0"}, "--params");
  expect_refused({"adam", "--params", "1125899906842625"}, "--params");
  expect_refused({"adam", "--repeats", "0"}, "--repeats");
  expect_refused({"adam", "--threads", "x"}, "--threads");
  expect_refused({"adam", "--json", "/nonexistent-dir-zob/a.json"}, "/nonexistent-dir-zob");
}

TEST(Cli, HelpAndVersionExitZero) {
  testing::internal::CaptureStdout();
  const auto help = parse({"--help"});
  const std::string help_text = testing::internal::GetCapturedStdout();
  EXPECT_EQ(help.kind, zob::CliCommand::Kind::exit_now);
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help_text.find("--offload-param"), std::string::npos);
  testing::internal::CaptureStdout();
  const auto version = parse({"--version"});
  const std::string version_text = testing::internal::GetCapturedStdout();
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_NE(version_text.find(ZOB_VERSION), std::string::npos);
}

TEST(Cli, ValidateRunConfigCatchesConfigsBuiltElsewhere) {
  zob::RunConfig c;
  c.threads = 2;
  EXPECT_NO_THROW(zob::validate_run_config(c));
  c.arms = {zob::Arm::pageable, zob::Arm::pageable};
  EXPECT_THROW(zob::validate_run_config(c), zob::UsageError);
  c.arms = {};
  EXPECT_THROW(zob::validate_run_config(c), zob::UsageError);
  c.arms = {zob::Arm::pageable};
  c.chunk_elems = 0;
  EXPECT_THROW(zob::validate_run_config(c), zob::UsageError);
}

}  // namespace

namespace zob {
namespace {

// The ranks of an MPI launch all check the same --json path at the same time; none may be
// refused because another one's check file appeared between its stat and its open.
TEST(CliOutputPath, ConcurrentChecksOfOneNewPathAllPass) {
  const std::string path =
      ::testing::TempDir() + "zob_concurrent_check_" + std::to_string(::getpid());
  std::remove(path.c_str());
  std::atomic<int> refused{0};
  std::string first_error;
  std::mutex m;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 300; ++i) {
        try {
          check_output_path_writable(path, "--json");
        } catch (const UsageError& e) {
          if (refused++ == 0) {
            std::lock_guard lock(m);
            first_error = e.what();
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(refused.load(), 0) << first_error;
  EXPECT_FALSE(std::filesystem::exists(path)) << "a check left its file behind";
  std::remove(path.c_str());
}

}  // namespace
}  // namespace zob
