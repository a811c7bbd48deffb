// The reporters (src/report/reporter.hpp, publish.hpp): publish_run, the one reporting call of both
// launchers, prints every stdout section and writes every file, each file on its own.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "report/details.hpp"
#include "report/publish.hpp"
#include "report/report.hpp"

namespace {

namespace fs = std::filesystem;

zob::ArmResult arm_run(zob::Arm arm, double step_s) {
  zob::ArmResult r;
  r.arm = arm;
  r.ok = true;
  r.device = "cpu";
  r.model = "synthetic-h64-l2";
  r.params = 1000;
  r.warmup = 1;
  r.steps = 2;
  r.loop = "copy_back";
  for (int i = 0; i < 3; ++i) {
    zob::StepSample s;
    s.wall_s = step_s * (1 + 0.01 * i);
    s.loss = 1.5f * static_cast<float>(i + 1);
    s.phases["adam"] = {-1, 0.1, 28'000, 1000};
    s.phases["grad_offload"] = {0.01, 0.02, 4000, 1000};
    r.samples.push_back(s);
  }
  r.step_avg_s = step_s * 1.015;
  r.step_min_s = step_s * 1.01;
  r.param_checksum = "00112233aabbccdd";
  return r;
}

// The registered arm and a slower one (v1 compares unregistered, v2 pageable, "unpinned").
zob::RunResult two_arm_run(zob::Arm slow = zob::Arm::unregistered) {
  zob::RunResult run;
  run.config.arms = {zob::Arm::registered, slow};
  run.config.warmup = 1;
  run.config.steps = 2;
  run.rounds = {{arm_run(zob::Arm::registered, 0.2), arm_run(slow, 0.5)}};
  for (zob::Arm a : run.config.arms) run.arms.push_back(zob::combine_rounds(zob::runs_of(run, a)));
  return run;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class PublishRun : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("zob-reporter-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // publish_run's result, with what it printed on stdout and stderr.
  bool publish(const zob::RunResult& run) {
    ::testing::internal::CaptureStdout();
    ::testing::internal::CaptureStderr();
    const bool ok = zob::publish_run(run);
    out_ = ::testing::internal::GetCapturedStdout();
    err_ = ::testing::internal::GetCapturedStderr();
    return ok;
  }

  fs::path dir_;
  std::string out_, err_;
};

TEST_F(PublishRun, StdoutIsEverySectionEndingWithTheDocumentTheJsonFileHolds) {
  zob::RunResult run = two_arm_run();
  run.config.json_path = (dir_ / "r.json").string();
  ASSERT_TRUE(publish(run)) << err_;
  EXPECT_EQ(out_, zob::render_stdout(run));
  const std::string marker = "\nDRIVERRESULT=";
  const auto at = out_.rfind(marker);
  ASSERT_NE(at, std::string::npos) << out_;
  EXPECT_EQ(out_.find('\n', at + 1), out_.size() - 1) << "DRIVERRESULT is not the last line";
  EXPECT_EQ(nlohmann::json::parse(out_.substr(at + marker.size())),
            nlohmann::json::parse(read_text(run.config.json_path)));
  EXPECT_NE(err_.find("wrote the result (DRIVERRESULT) to " + run.config.json_path),
            std::string::npos)
      << err_;
}

TEST_F(PublishRun, AFileThatCannotBeWrittenKeepsNoOtherFromBeingWritten) {
  zob::RunResult run = two_arm_run();
  run.config.json_path = (dir_ / "r.json").string();
  run.config.csv_path = (dir_ / "missing" / "r.csv").string();
  run.config.plot_path = (dir_ / "r.svg").string();
  run.config.trace_path = (dir_ / "t.json").string();
  EXPECT_FALSE(publish(run));
  EXPECT_NE(err_.find("error: "), std::string::npos) << err_;
  EXPECT_NE(err_.find(run.config.csv_path), std::string::npos) << err_;
  for (const auto& written : {run.config.json_path, run.config.plot_path, run.config.trace_path}) {
    EXPECT_TRUE(fs::exists(written)) << written << "\n" << err_;
    EXPECT_NE(err_.find("to " + written), std::string::npos) << err_;
  }
  EXPECT_NE(out_.find("DRIVERRESULT="), std::string::npos);
}

TEST_F(PublishRun, EachCompatVersionPrintsItsOwnTable) {
  zob::RunResult run = two_arm_run();
  ASSERT_TRUE(publish(run));
  EXPECT_NE(out_.find("\nregistered "), std::string::npos) << out_;
  EXPECT_NE(out_.find("\nspeedup: "), std::string::npos) << out_;
  EXPECT_EQ(out_.find("ZeRO-3 CPU-offload step time"), std::string::npos) << out_;
  run = two_arm_run(zob::Arm::pageable);
  run.config.compat = zob::Compat::v2;
  ASSERT_TRUE(publish(run));
  EXPECT_NE(out_.find("================ ZeRO-3 CPU-offload step time"), std::string::npos) << out_;
  EXPECT_NE(out_.find("\nunpinned "), std::string::npos) << out_;
  EXPECT_NE(out_.find("pinning speedup: "), std::string::npos) << out_;
}

}  // namespace
