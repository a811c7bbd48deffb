// Issue 38, --offload-ratio: DeepSpeed's offload_optimizer.ratio through the real binary on the
// CPU device. The small model is split into several sub-groups (--sub-group-size 20000), so
// that ratios 1, 0.5 and 0 keep none, some and all of them on the device.
#include <gtest/gtest.h>
#include <sys/prctl.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "e2e_support.hpp"
#include "fault_support.hpp"

namespace {

using namespace zob_e2e;

std::vector<std::string> ratio_run(std::vector<std::string> extra) {
  std::vector<std::string> args{
      "--device",   "cpu",       "--hidden",         "64",   "--layers", "4", "--batch",  "2",
      "--seq",      "16",        "--vocab",          "256",  "--steps",  "2", "--warmup", "1",
      "--schedule", "deepspeed", "--sub-group-size", "20000"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

const nlohmann::json& phase(const nlohmann::json& arm, const char* name) {
  static const nlohmann::json none;
  const auto& phases = arm.at("phases");
  return phases.contains(name) ? phases.at(name) : none;
}

std::int64_t phase_params(const nlohmann::json& arm, const char* name) {
  const auto& p = phase(arm, name);
  return p.is_null() ? 0 : p.at("params").get<std::int64_t>();
}

// The plan of each ratio without a device: the CPU's fp32 arrays shrink by what the device
// takes (the pinned fp32 gradients: 4 B/param; the pageable master and Adam states: 12), the
// device grows by at least its 16 B/param of optimizer state; the bf16 buffers stay.
TEST(OffloadRatio, TheDryRunPlansEachRatio) {
  const std::string json = temp_path("ratio-plan.json");
  const Result r =
      run_bench(ratio_run({"--offload-ratio", "1,0.5,0", "--dry-run", "--json", json}));
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(read_text(json));
  const auto params = j.at("workload").at("params").get<std::uint64_t>();
  const auto& points = j.at("plan").at("configurations");
  ASSERT_EQ(points.size(), 3u);
  std::vector<std::uint64_t> pinned, pageable, device;
  for (const auto& p : points) {
    EXPECT_TRUE(p.at("fits").get<bool>()) << p;
    pinned.push_back(p.at("host_pinned_bytes"));
    pageable.push_back(p.at("host_pageable_bytes"));
    device.push_back(p.at("device_bytes"));
  }
  EXPECT_EQ(points[1].at("offload_ratio"), 0.5);
  EXPECT_EQ(pinned[0] - pinned[2], 4 * params);
  // Ratio 1 also maps the copy-back's bf16 temporary (its largest CPU sub-group, 2 B/element),
  // which ratio 0, with every sub-group on the device, has none of.
  std::uint64_t copy_back_temp = 0;
  for (const auto& b : j.at("plan").at("host_buffers")) {
    if (b.at("name") == "bf16 copy-back temporary") copy_back_temp = b.at("bytes");
  }
  EXPECT_GT(copy_back_temp, 0u);
  EXPECT_LT(copy_back_temp, 2 * params);  // one sub-group of several
  EXPECT_EQ(pageable[0] - pageable[2], 12 * params + copy_back_temp);
  EXPECT_GT(pinned[1], pinned[2]);
  EXPECT_LT(pinned[1], pinned[0]);
  EXPECT_GE(device[2], device[0] + 16 * params);
  EXPECT_GT(device[1], device[0]);
  EXPECT_GT(device[2], device[1]);
  for (const char* ratio : {"offload_ratio=1:", "offload_ratio=0.5:", "offload_ratio=0:"}) {
    EXPECT_NE(r.out.find(ratio), std::string::npos) << ratio << "\n" << r.out;
  }

  // A device limit between ratio 1's peak and ratio 0's: the run is refused before any arm,
  // naming the configuration that does not fit and the fix; the dry run marks it.
  const std::string limit = std::to_string((device[0] + device[2]) / 2);
  const Result over =
      run_bench(ratio_run({"--offload-ratio", "1,0", "--device-memory", limit, "--json", json}));
  EXPECT_EQ(over.rc, 2) << over.err;
  expect_one_error_line(over, "offload_ratio=0;");
  EXPECT_NE(over.err.find("a higher --offload-ratio"), std::string::npos) << over.err;
  EXPECT_EQ(over.out.find("DRIVERRESULT="), std::string::npos) << over.out;
  const Result dry = run_bench(
      ratio_run({"--offload-ratio", "1,0", "--device-memory", limit, "--dry-run", "--json", json}));
  EXPECT_EQ(dry.rc, 2) << dry.err;
  const auto marked = nlohmann::json::parse(read_text(json)).at("plan").at("configurations");
  ASSERT_EQ(marked.size(), 2u);
  EXPECT_TRUE(marked[0].at("fits").get<bool>());
  EXPECT_FALSE(marked[1].at("fits").get<bool>());
  expect_no_leftovers();
}

// The sweep runs each ratio: the CPU's Adam covers the CPU's sub-groups and device_adam the
// rest, every parameter once; the locked bytes fall with the ratio; the arms of each
// configuration agree bit for bit.
TEST(OffloadRatio, ASweepSplitsTheOptimizerBetweenCpuAndDevice) {
  const Result r = run_bench(ratio_run({"--offload-ratio", "1,0.5,0"}), {}, nullptr, 120);
  expect_no_leftovers();
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = driver_result(r.out);
  EXPECT_TRUE(j.at("validation").at("ok").get<bool>()) << j.at("validation");
  const auto params = j.at("workload").at("params").get<std::int64_t>();
  const auto& sweep = j.at("sweep");
  ASSERT_EQ(sweep.size(), 3u);
  std::vector<std::uint64_t> locked;
  for (const auto& point : sweep) {
    const auto& a = point.at("registered");
    ASSERT_TRUE(a.at("ok").get<bool>()) << a;
    const std::int64_t cpu = phase_params(a, "adam"), dev = phase_params(a, "device_adam");
    EXPECT_EQ(cpu + dev, params) << point.at("offload_ratio");
    locked.push_back(a.at("locked_bytes"));
    EXPECT_EQ(a.at("param_checksum"), point.at("unregistered").at("param_checksum"));
  }
  EXPECT_EQ(phase_params(sweep[0].at("registered"), "device_adam"), 0);
  EXPECT_GT(phase_params(sweep[1].at("registered"), "device_adam"), 0);
  EXPECT_GT(phase_params(sweep[1].at("registered"), "adam"), 0);
  EXPECT_EQ(phase_params(sweep[2].at("registered"), "adam"), 0);
  EXPECT_GT(phase(sweep[2].at("registered"), "device_adam").at("device_s").get<double>(), 0);
  EXPECT_GT(locked[0], locked[1]);
  EXPECT_GT(locked[1], locked[2]);
  for (const char* label : {"offload_ratio=1)", "offload_ratio=0.5)", "offload_ratio=0)"}) {
    EXPECT_NE(r.out.find(label), std::string::npos) << label;
  }
}

// The device's AdamW (torch's foreach kernels) and the CPU's Adam are the same update in other
// roundings: from the same first loss (no update yet), the losses of ratio 0 track ratio 1's
// to 1e-4 while each step moves the loss by far more.
TEST(OffloadRatio, TheDeviceOptimizerTrainsAsTheCpusDoes) {
  std::vector<std::vector<double>> losses;
  for (const char* ratio : {"1", "0"}) {
    const Result r = run_bench(ratio_run({"--offload-ratio", ratio, "--steps", "3"}));
    ASSERT_EQ(r.rc, 0) << r.err;
    losses.push_back(driver_result(r.out).at("registered").at("losses"));
  }
  ASSERT_EQ(losses[0].size(), 4u);
  ASSERT_EQ(losses[1].size(), losses[0].size());
  EXPECT_EQ(losses[1][0], losses[0][0]);
  for (std::size_t i = 1; i < losses[0].size(); ++i) {
    EXPECT_GT(std::abs(losses[0][i] - losses[0][i - 1]), 1e-2 * std::abs(losses[0][i])) << i;
    EXPECT_NEAR(losses[1][i], losses[0][i], 1e-4 * std::abs(losses[0][i])) << i;
  }
}

// Two ranks: each rank's own sub-groups, some on its device.
TEST(OffloadRatio, TwoRanksEachKeepTheirDeviceSubGroups) {
  const Result r = run_bench(
      ratio_run({"--offload-ratio", "0.5", "--gpus", "2", "--threads", "1", "--steps", "1"}), {},
      nullptr, 120);
  expect_no_leftovers();
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = driver_result(r.out);
  EXPECT_TRUE(j.at("validation").at("ok").get<bool>()) << j.at("validation");
  EXPECT_GT(phase_params(j.at("registered"), "device_adam"), 0);
  EXPECT_GT(phase_params(j.at("registered"), "adam"), 0);
}

}  // namespace

int main(int argc, char** argv) {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
