#include <gtest/gtest.h>
#include <unistd.h>

#include <fmt/format.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "random_seed.hpp"
#include "report/json_util.hpp"
#include "report/output_file.hpp"
#include "report/report.hpp"
#include "zob/errors.hpp"

namespace {

struct Rng {
  std::mt19937_64 gen{zob::test::random_seed("report_test Rng")};
  double uniform(double lo, double hi) { return std::uniform_real_distribution<>(lo, hi)(gen); }
  int integer(int lo, int hi) { return std::uniform_int_distribution<>(lo, hi)(gen); }
  std::string hex() { return fmt::format("{:016x}", gen()); }
};

zob::ArmResult random_arm(Rng& rng, zob::Arm arm, const zob::RunConfig& c) {
  zob::ArmResult r;
  r.arm = arm;
  r.ok = true;
  r.device = "cpu";
  r.model = fmt::format("synthetic-h{}-l{}", c.model.hidden, c.model.layers);
  r.params = rng.integer(1000, 1 << 30);
  r.params_b = std::round(r.params / 1e6) / 1e3;
  r.batch = c.batch;
  r.seq = c.seq;
  r.tokens_per_step = c.tokens();
  r.steps = c.steps;
  r.warmup = c.warmup;
  r.gpu_peak_gb = rng.uniform(0.1, 100);
  r.device_info = {"cpu",
                   "CPU " + rng.hex(),
                   "rt " + rng.hex(),
                   "drv",
                   "0000:01:00.0",
                   static_cast<std::uint64_t>(rng.integer(1, 1 << 30)) << 10,
                   rng.integer(-1, 3)};
  r.loop = "copy_back";
  double sum = 0, mn = 1e9;
  for (int i = 0; i < c.warmup + c.steps; ++i) {
    zob::StepSample s;
    s.wall_s = rng.uniform(0.01, 1.0);
    s.loss = static_cast<float>(rng.uniform(-1e4, 1e4));
    s.phases["adam"] = {-1, rng.uniform(0, 1), static_cast<std::uint64_t>(rng.integer(1, 1 << 30)),
                        rng.integer(1, 1 << 30)};
    s.phases["copy_back"] = {rng.uniform(0, 1), rng.uniform(0, 1), 4096, 1024};
    s.spans.push_back(
        {"h2d", "copy_back[" + std::to_string(i) + "]", rng.uniform(0, 1), rng.uniform(0, 1)});
    s.spans.push_back({"compute", "layer0.fwd", rng.uniform(0, 1), rng.uniform(0, 1)});
    if (i >= c.warmup) {
      sum += s.wall_s;
      mn = std::min(mn, s.wall_s);
    }
    r.samples.push_back(s);
  }
  r.step_avg_s = sum / c.steps;
  r.step_min_s = mn;
  r.param_checksum = rng.hex();
  r.registration = "cudaHostRegister";
  r.registration_verified = true;
  r.locked_bytes = static_cast<std::uint64_t>(rng.integer(1, 1 << 30)) << 8;
  r.registered_bytes = r.locked_bytes;
  r.register_s = rng.uniform(0, 1);
  r.setup_s = rng.uniform(0, 5);
  r.adam_threads = rng.integer(1, 64);
  r.pid = rng.integer(2, 1 << 22);
  return r;
}

zob::RunResult random_run(Rng& rng) {
  zob::RunResult run;
  run.config.model = {rng.integer(2, 5000), rng.integer(1, 512), rng.integer(1, 8)};
  run.config.batch = rng.integer(1, 8);
  run.config.seq = rng.integer(1, 256);
  run.config.steps = rng.integer(1, 5);
  run.config.warmup = rng.integer(0, 3);
  run.config.threads = 2;
  run.tool_version = "9.9.9";
  run.hostname = "host-" + rng.hex();
  run.started_utc = "2026-01-01T00:00:00Z";
  run.arms.push_back(random_arm(rng, zob::Arm::registered, run.config));
  run.arms.push_back(random_arm(rng, zob::Arm::unregistered, run.config));
  // Equal numbers across arms, as a correct run has.
  run.arms[1].samples.resize(run.arms[0].samples.size());
  for (std::size_t i = 0; i < run.arms[0].samples.size(); ++i) {
    run.arms[1].samples[i].loss = run.arms[0].samples[i].loss;
  }
  run.arms[1].param_checksum = run.arms[0].param_checksum;
  return run;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST(ArmResultJson, RoundTripKeepsEverythingIncludingSamples) {
  Rng rng;
  const zob::RunResult run = random_run(rng);
  for (const auto& arm : run.arms) {
    const nlohmann::json j = arm;
    const auto back = nlohmann::json::parse(zob::dump_json(j)).get<zob::ArmResult>();
    EXPECT_EQ(nlohmann::json(back), j);
    ASSERT_EQ(back.samples.size(), arm.samples.size());
    EXPECT_EQ(back.samples.back().spans.at(0).name, arm.samples.back().spans.at(0).name);
    EXPECT_EQ(back.samples.back().loss, arm.samples.back().loss);
    EXPECT_EQ(back.samples[0].phases.at("adam").bytes, arm.samples[0].phases.at("adam").bytes);
    EXPECT_EQ(back.device_info.pci_bus_id, arm.device_info.pci_bus_id);
    EXPECT_EQ(back.pid, arm.pid);
    EXPECT_EQ(back.timed_step_s(), arm.timed_step_s());
  }
}

// device_ops survives the pipe field by field (every count distinct, so a swapped pair shows),
// and a document written before DeepSpeed's copies were counted still reads, with them zero.
TEST(ArmResultJson, DeviceOpsRoundTripEveryCount) {
  Rng rng;
  zob::ArmResult arm = random_run(rng).arms[0];
  zob::ModuleDeviceOps m;
  m.module = "layers.0";
  std::int64_t* fields[] = {
      &m.plan_forward,   &m.plan_backward,   &m.kernels_forward,    &m.kernels_backward,
      &m.copies_forward, &m.copies_backward, &m.plan_fetch_forward, &m.plan_fetch_backward,
      &m.fetch_forward,  &m.fetch_backward,  &m.plan_grad_d2h,      &m.plan_grad_h2d,
      &m.grad_d2h,       &m.grad_h2d};
  for (std::size_t i = 0; i < std::size(fields); ++i) *fields[i] = static_cast<std::int64_t>(i + 1);
  arm.device_ops = {m};
  nlohmann::json j = arm;
  const auto back = nlohmann::json::parse(zob::dump_json(j)).get<zob::ArmResult>();
  ASSERT_EQ(back.device_ops.size(), 1u);
  const zob::ModuleDeviceOps& b = back.device_ops[0];
  EXPECT_EQ(b.module, "layers.0");
  const std::int64_t got[] = {
      b.plan_forward,   b.plan_backward,   b.kernels_forward,    b.kernels_backward,
      b.copies_forward, b.copies_backward, b.plan_fetch_forward, b.plan_fetch_backward,
      b.fetch_forward,  b.fetch_backward,  b.plan_grad_d2h,      b.plan_grad_h2d,
      b.grad_d2h,       b.grad_h2d};
  for (std::size_t i = 0; i < std::size(got); ++i) EXPECT_EQ(got[i], *fields[i]) << i;
  for (const char* key : {"plan_fetches", "fetches", "plan_grad_copies", "grad_copies"})
    j["device_ops"][0].erase(key);
  const auto old = j.get<zob::ArmResult>();
  ASSERT_EQ(old.device_ops.size(), 1u);
  EXPECT_EQ(old.device_ops[0].kernels_backward, 4);
  EXPECT_EQ(old.device_ops[0].fetch_forward + old.device_ops[0].grad_h2d, 0);
}

TEST(ArmResultJson, NanLossSurvivesThePipe) {
  Rng rng;
  zob::RunResult run = random_run(rng);
  run.arms[0].samples[0].loss = std::nanf("");
  const auto back =
      nlohmann::json::parse(zob::dump_json(nlohmann::json(run.arms[0]))).get<zob::ArmResult>();
  EXPECT_TRUE(std::isnan(back.samples[0].loss));
}

TEST(ArmResultJson, TruncatedOrWrongTypesThrow) {
  Rng rng;
  const std::string text = zob::dump_json(nlohmann::json(random_run(rng).arms[0]));
  EXPECT_ANY_THROW(nlohmann::json::parse(text.substr(0, text.size() / 2)));
  nlohmann::json j = nlohmann::json::parse(text);
  j.erase("param_checksum");
  EXPECT_ANY_THROW(j.get<zob::ArmResult>());
  j = nlohmann::json::parse(text);
  j["steps"] = "four";
  EXPECT_ANY_THROW(j.get<zob::ArmResult>());
}

TEST(ArmResultJson, HostileNamesStayValidJson) {
  Rng rng;
  zob::RunResult run = random_run(rng);
  const std::string hostile = std::string("a\"b\\c\nd\te\x01") + "\xff\xfe" + "\xc3(" + "end";
  run.hostname = hostile;
  run.arms[0].device_info.name = hostile;
  run.arms[1].error = hostile;
  run.arms[1].ok = false;
  const std::string line = zob::dump_json(zob::driver_result_json(run));
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const auto parsed = nlohmann::json::parse(line);  // throws on invalid JSON / UTF-8
  const std::string name = parsed.at("registered").at("device_name").get<std::string>();
  EXPECT_EQ(name.substr(0, 10), std::string("a\"b\\c\nd\te\x01"));
  EXPECT_NE(name.find("\xEF\xBF\xBD"), std::string::npos);  // U+FFFD for the bad bytes
  const std::string pipe = zob::dump_json(nlohmann::json(run.arms[0]));
  EXPECT_NO_THROW(nlohmann::json::parse(pipe).get<zob::ArmResult>());
}

TEST(Report, TableHasOneRowPerArmAndTheSpeedupLine) {
  Rng rng;
  zob::RunResult run = random_run(rng);
  // On the CPU device the peak is not a GPU's; the script's header is that of a GPU run.
  EXPECT_EQ(lines_of(zob::render_table(run))[0],
            fmt::format("{:<14}{:>14}{:>14}{:>17}", "arm", "avg step (s)", "min step (s)",
                        "device peak (GB)"));
  run.config.device = zob::DeviceKind::cuda;
  for (auto& a : run.arms) a.device = "cuda";
  const auto lines = lines_of(zob::render_table(run));
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], fmt::format("{:<14}{:>14}{:>14}{:>15}", "arm", "avg step (s)", "min step (s)",
                                  "GPU peak (GB)"));
  const auto& reg = run.arms[0];
  const auto& unreg = run.arms[1];
  EXPECT_EQ(lines[1], fmt::format("{:<14}{:>14.4f}{:>14.4f}{:>15.2f}", "registered", reg.step_avg_s,
                                  reg.step_min_s, reg.gpu_peak_gb));
  EXPECT_EQ(lines[2], fmt::format("{:<14}{:>14.4f}{:>14.4f}{:>15.2f}", "unregistered",
                                  unreg.step_avg_s, unreg.step_min_s, unreg.gpu_peak_gb));
  const double s = unreg.step_avg_s / reg.step_avg_s;
  EXPECT_EQ(lines[3],
            fmt::format("speedup: {:.2f}x   saved: {:.3f} s/step   throughput: {:.0f} "
                        "vs {:.0f} tok/s",
                        s, unreg.step_avg_s - reg.step_avg_s, reg.tokens_per_step / reg.step_avg_s,
                        unreg.tokens_per_step / unreg.step_avg_s));
  ASSERT_TRUE(zob::speedup(run).has_value());
  EXPECT_DOUBLE_EQ(*zob::speedup(run), s);
}

TEST(Report, DriverResultHasEveryKey) {
  Rng rng;
  const zob::RunResult run = random_run(rng);
  const auto j = nlohmann::json::parse(zob::dump_json(zob::driver_result_json(run)));
  for (const char* key : {"registered", "unregistered", "speedup", "schema_version", "workload",
                          "validation", "tool", "host", "started_utc", "interrupted"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  for (const char* arm : {"registered", "unregistered"}) {
    for (const char* key : {"register",
                            "device",
                            "model",
                            "params_b",
                            "batch",
                            "seq",
                            "tokens_per_step",
                            "steps",
                            "step_avg_s",
                            "step_min_s",
                            "gpu_peak_gb",
                            "arm",
                            "pid",
                            "loop",
                            "step_times_s",
                            "losses",
                            "warmup",
                            "param_checksum",
                            "registration",
                            "registration_verified",
                            "locked_bytes",
                            "registered_bytes",
                            "register_s",
                            "setup_s",
                            "adam_threads",
                            "device_name",
                            "ok",
                            "phases"}) {
      EXPECT_TRUE(j.at(arm).contains(key)) << arm << "." << key;
    }
    EXPECT_FALSE(j.at(arm).contains("error"));
    EXPECT_FALSE(j.at(arm).contains("samples"));  // spans stay out of DRIVERRESULT
  }
  EXPECT_EQ(j.at("registered").at("register"), true);
  EXPECT_EQ(j.at("unregistered").at("register"), false);
  EXPECT_EQ(j.at("registered").at("losses").size(), run.arms[0].samples.size());
  EXPECT_EQ(j.at("registered").at("step_times_s").size(),
            static_cast<std::size_t>(run.config.steps));
  for (const char* key : {"vocab", "hidden", "layers", "batch", "seq", "tokens_per_step", "params",
                          "steps", "warmup", "loop", "chunk_elems", "sub_group_size", "seed"}) {
    EXPECT_TRUE(j.at("workload").contains(key)) << key;
  }
  const auto& c = run.config;
  EXPECT_EQ(j.at("workload").at("params").get<std::int64_t>(),
            2 * c.model.vocab * c.model.hidden +
                c.model.layers * (8 * c.model.hidden * c.model.hidden + 5 * c.model.hidden));
  for (const char* key : {"ok", "checksums_equal", "losses_equal", "first_difference"}) {
    EXPECT_TRUE(j.at("validation").contains(key)) << key;
  }
  EXPECT_EQ(j.at("validation").at("ok"), true);
  EXPECT_TRUE(j.at("validation").at("first_difference").is_null());
  EXPECT_EQ(j.at("schema_version"), 1);
  EXPECT_EQ(j.at("tool").at("version"), "9.9.9");
  EXPECT_DOUBLE_EQ(j.at("speedup").get<double>(), *zob::speedup(run));
  // The Python script's key order: registered, unregistered, speedup.
  auto it = j.begin();
  const std::string first_line = zob::dump_json(zob::driver_result_json(run));
  EXPECT_LT(first_line.find("\"registered\""), first_line.find("\"unregistered\""));
  EXPECT_LT(first_line.find("\"unregistered\""), first_line.find("\"speedup\""));
  (void)it;
}

TEST(Report, FailedArmIsMarkedAndSpeedupIsNull) {
  Rng rng;
  zob::RunResult run = random_run(rng);
  run.arms[1].ok = false;
  run.arms[1].error = "timed out after " + std::to_string(rng.integer(1, 99)) + " s";
  const std::string text = zob::render_stdout(run);
  const auto lines = lines_of(text);
  // header, two rows, no speedup line; then the completed arm's phases and registration line
  ASSERT_GE(lines.size(), 4u);
  EXPECT_EQ(lines[2], fmt::format("{:<14}FAILED: {}", "unregistered", run.arms[1].error));
  EXPECT_EQ(lines[3].rfind("phase ", 0), 0u) << lines[3];
  const std::string sections =
      text.substr(text.find("\nphase "), text.find("DRIVERRESULT=") - text.find("\nphase "));
  EXPECT_EQ(sections.find("unregistered"), std::string::npos)
      << "a failed arm has no phase or registration rows:\n"
      << sections;
  ASSERT_EQ(lines.back().rfind("DRIVERRESULT=", 0), 0u);
  const auto j = nlohmann::json::parse(lines.back().substr(13));
  EXPECT_TRUE(j.at("speedup").is_null());
  EXPECT_EQ(j.at("unregistered").at("error"), run.arms[1].error);
  EXPECT_EQ(j.at("unregistered").at("ok"), false);
  EXPECT_TRUE(j.at("unregistered").at("step_avg_s").is_null());
  EXPECT_FALSE(zob::speedup(run).has_value());
  EXPECT_EQ(j.at("validation").at("compared_arms"), 1);
}

TEST(Report, OnlyOneArmGivesNoSpeedupLine) {
  Rng rng;
  zob::RunResult run = random_run(rng);
  run.arms.pop_back();
  EXPECT_EQ(lines_of(zob::render_table(run)).size(), 2u);
  EXPECT_TRUE(zob::driver_result_json(run).at("speedup").is_null());
}

TEST(Validation, NamesTheFirstDifferingStepOrTheChecksum) {
  Rng rng;
  zob::RunResult run = random_run(rng);
  EXPECT_TRUE(zob::validate_arms(run).ok());
  const std::size_t n = run.arms[1].samples.size();
  const std::size_t step = static_cast<std::size_t>(rng.integer(0, static_cast<int>(n) - 1));
  run.arms[1].samples[step].loss = std::nextafter(run.arms[1].samples[step].loss, 1e30f);
  if (step + 1 < n) run.arms[1].samples[step + 1].loss += 1.0f;
  auto v = zob::validate_arms(run);
  EXPECT_FALSE(v.ok());
  EXPECT_FALSE(v.losses_equal);
  EXPECT_TRUE(v.checksums_equal);
  EXPECT_NE(v.first_difference.find(fmt::format("step {} ", step + 1)), std::string::npos)
      << v.first_difference;
  run.arms[1].samples = run.arms[0].samples;
  run.arms[1].param_checksum = rng.hex();
  v = zob::validate_arms(run);
  EXPECT_FALSE(v.checksums_equal);
  EXPECT_TRUE(v.losses_equal);
  EXPECT_NE(v.first_difference.find(run.arms[1].param_checksum), std::string::npos);
  const auto j = zob::driver_result_json(run);
  EXPECT_EQ(j.at("validation").at("ok"), false);
  EXPECT_EQ(j.at("validation").at("first_difference"), v.first_difference);
}

TEST(Report, JsonFileIsWrittenWholeThroughRename) {
  Rng rng;
  const zob::RunResult run = random_run(rng);
  const auto dir =
      std::filesystem::temp_directory_path() / ("zob-report-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "out.json").string();
  const std::string text = zob::dump_json(zob::driver_result_json(run), 2);
  zob::write_output_file(path, text);
  std::ifstream in(path);
  const std::string back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(back, text);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);  // no temp left
  EXPECT_THROW(zob::write_output_file((dir / "missing" / "x.json").string(), text),
               zob::UsageError);
  std::filesystem::remove_all(dir);
}

// Where an output path leads: a regular file or a new name is replaced beside itself (through
// its symlinks), a device or an open descriptor is written in place.
TEST(Report, OutputTargetsFollowLinksAndKeepDevicesInPlace) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("zob-output-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "real");
  std::filesystem::create_symlink("real/a.json", dir / "link.json");
  const auto link = zob::resolve_output_target((dir / "link.json").string(), "--json");
  EXPECT_FALSE(link.in_place);
  EXPECT_EQ(std::filesystem::path(link.path).filename(), "a.json");
  zob::write_output_file((dir / "link.json").string(), "x\n");
  EXPECT_TRUE(std::filesystem::is_symlink(dir / "link.json"));
  EXPECT_TRUE(std::filesystem::is_regular_file(dir / "real" / "a.json"));
  EXPECT_TRUE(zob::resolve_output_target("/dev/null", "--json").in_place);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string fd_path = "/dev/fd/" + std::to_string(fds[1]);
  EXPECT_TRUE(zob::resolve_output_target(fd_path, "--json").in_place);
  zob::write_output_file(fd_path, "through the pipe");
  ::close(fds[1]);
  char buf[64] = {};
  EXPECT_EQ(::read(fds[0], buf, sizeof buf - 1), 16);
  EXPECT_STREQ(buf, "through the pipe");
  ::close(fds[0]);
  EXPECT_THROW(zob::resolve_output_target(dir.string(), "--json"), zob::UsageError);
  EXPECT_THROW(zob::check_output_path("/dev/null/x.json", "--json"), zob::UsageError);
  std::filesystem::remove_all(dir);
}

}  // namespace
