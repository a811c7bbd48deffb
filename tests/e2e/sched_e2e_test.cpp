// End-to-end on the CPU device: a 2x2 sweep under --schedule overlap, the per-arm bound,
// placement and time-to-result keys, and refusals of the new flags (exit 2, one line).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "e2e_support.hpp"

namespace {

// The shared helper runs the binary with a time limit and reaps it (e2e_support.hpp).
using BenchRun = zob_e2e::Result;
using zob_e2e::run_bench;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

nlohmann::json driver_result(const std::string& out) {
  for (const auto& line : lines_of(out)) {
    if (line.rfind("DRIVERRESULT=", 0) == 0) return nlohmann::json::parse(line.substr(13));
  }
  ADD_FAILURE() << "no DRIVERRESULT line in:\n" << out;
  return {};
}

const std::vector<std::string> kTiny{"--device", "cpu", "--hidden", "32", "--layers", "2",
                                     "--batch",  "2",   "--seq",    "8",  "--vocab",  "300",
                                     "--steps",  "2",   "--warmup", "1"};

std::vector<std::string> tiny(std::vector<std::string> extra) {
  auto args = kTiny;
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(SchedE2E, TwoByTwoSweepUnderOverlap) {
  // P = 2*300*32 + 2*(8*32*32 + 160) = 35968 parameters.
  const BenchRun r = run_bench(tiny({"--threads", "2", "--schedule", "overlap", "--chunk-elems",
                                     "1000,30000", "--sub-group-size", "7000,1000000"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  std::vector<std::string> headers;
  for (const auto& line : lines_of(r.out)) {
    if (line.rfind("chunk_elems=", 0) == 0) headers.push_back(line);
  }
  EXPECT_EQ(headers, (std::vector<std::string>{"chunk_elems=1000 sub_group_size=7000",
                                               "chunk_elems=1000 sub_group_size=1000000",
                                               "chunk_elems=30000 sub_group_size=7000",
                                               "chunk_elems=30000 sub_group_size=1000000"}));
  const nlohmann::json j = driver_result(r.out);
  ASSERT_EQ(j.at("sweep").size(), 4u);
  // The sweep's arms are compact (no per-step arrays): the same values for the keys they keep.
  for (const auto& [key, value] : j.at("sweep")[0].at("registered").items()) {
    if (key != "phases") EXPECT_EQ(j.at("registered").at(key), value) << key;
  }
  EXPECT_EQ(j.at("speedup"), j.at("sweep")[0].at("speedup"));
  EXPECT_EQ(j.at("workload").at("schedule"), "overlap");
  EXPECT_TRUE(j.at("validation").at("ok").get<bool>());
  const std::string checksum = j.at("registered").at("param_checksum");
  std::set<int> pids;
  for (const auto& e : j.at("sweep")) {
    for (const char* a : {"registered", "unregistered"}) {
      const auto& arm = e.at(a);
      SCOPED_TRACE(std::string(a) + " chunk " + e.at("chunk_elems").dump());
      EXPECT_TRUE(arm.at("ok").get<bool>());
      EXPECT_EQ(arm.at("schedule"), "overlap");
      // Pieces and sub-groups change the order, never the math.
      EXPECT_EQ(arm.at("param_checksum"), checksum);
      pids.insert(arm.at("pid").get<int>());
      const auto& b = arm.at("bound");
      EXPECT_GT(b.at("adam_s").get<double>(), 0);
      EXPECT_GT(b.at("pcie_s").get<double>(), 0);
      EXPECT_GE(b.at("compute_s").get<double>(), 0);
      EXPECT_NEAR(b.at("bound_s").get<double>(),
                  std::max(b.at("adam_s").get<double>(), b.at("pcie_s").get<double>()) +
                      b.at("compute_s").get<double>(),
                  1e-12);
      EXPECT_GT(b.at("ratio").get<double>(), 0);
      EXPECT_EQ(arm.at("placement").at("policy"), "none");  // the CPU device has no NUMA node
      const double wall = arm.at("wall_s"), setup = arm.at("setup_s");
      EXPECT_GT(setup, 0);
      // The sweep's arms are compact: the timed steps' sum from their statistics.
      const auto& st = arm.at("step_stats");
      const double steps = st.at("mean").get<double>() * st.at("n").get<double>();
      EXPECT_GT(wall, setup + steps) << "time to result covers setup and the steps";
    }
  }
  EXPECT_EQ(pids.size(), 8u) << "each arm of each combination in its own process";
  int placement_lines = 0;
  for (const auto& line : lines_of(r.err)) {
    placement_lines += line.find("Adam threads: 2, placement none") != std::string::npos;
  }
  EXPECT_EQ(placement_lines, 8) << r.err;
}

TEST(SchedE2E, CpuAffinityPinsAndIsReported) {
  const BenchRun r =
      run_bench(tiny({"--cpu-affinity", "0", "--threads", "1", "--arms", "unregistered"}));
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = driver_result(r.out);
  EXPECT_EQ(j.at("unregistered").at("placement").at("policy"), "cpu-affinity");
  EXPECT_EQ(j.at("unregistered").at("placement").at("cpus"), (std::vector<int>{0}));
  EXPECT_EQ(j.at("unregistered").at("schedule"), "deepspeed");  // the default
  EXPECT_EQ(j.at("sweep").size(), 1u);
  EXPECT_NE(r.err.find("placement cpu-affinity, CPUs 0"), std::string::npos) << r.err;
}

TEST(SchedE2E, BadFlagsExitTwoWithOneLine) {
  for (const auto& extra :
       std::vector<std::vector<std::string>>{{"--schedule", "eager"},
                                             {"--cpu-affinity", "0-70000"},
                                             {"--cpu-affinity", "4095"},
                                             {"--cpu-affinity", "0", "--threads", "2"},
                                             {"--chunk-elems", "1000,0"},
                                             {"--sub-group-size", "10,,20"}}) {
    const BenchRun r = run_bench(tiny(extra));
    EXPECT_EQ(r.rc, 2) << extra[0] << " " << extra[1] << "\n" << r.err;
    const auto lines = lines_of(r.err);
    ASSERT_EQ(lines.size(), 1u) << r.err;
    EXPECT_NE(lines[0].find(extra[0]), std::string::npos) << lines[0];
    EXPECT_TRUE(r.out.empty());
  }
}

// Through the binary: the deepspeed schedule (the default) on a model whose weights exceed
// DeepSpeed's persistence threshold (1e5 elements), so they are fetched per tensor and their
// gradients flushed; every arm, both loops, gives stock's losses and checksum; the header and
// DRIVERRESULT name the schedule.
TEST(SchedE2E, DeepSpeedScheduleEqualsStockThroughTheBinary) {
  const std::vector<std::string> shape{
      "--device", "cpu", "--hidden", "160", "--layers", "2",
      "--batch",  "2",   "--seq",    "8",   "--vocab",  "700",
      "--steps",  "2",   "--warmup", "1",   "--arms",   "registered,unregistered,pageable"};
  for (const std::vector<std::string> loop : {std::vector<std::string>{}, {"--offload-param"}}) {
    auto args = shape;
    args.insert(args.end(), loop.begin(), loop.end());
    const BenchRun ds = run_bench(args);
    args.insert(args.end(), {"--schedule", "stock"});
    const BenchRun stock = run_bench(args);
    ASSERT_EQ(ds.rc, 0) << ds.err;
    ASSERT_EQ(stock.rc, 0) << stock.err;
    const std::string loop_name = loop.empty() ? "copy_back" : "offload_param";
    EXPECT_NE(ds.out.find("# step: " + loop_name + " loop, deepspeed schedule"), std::string::npos)
        << ds.out;
    EXPECT_NE(stock.out.find("# step: " + loop_name + " loop, stock schedule"), std::string::npos);
    const nlohmann::json d = driver_result(ds.out), s = driver_result(stock.out);
    for (const char* arm : {"registered", "unregistered", "pageable"}) {
      EXPECT_EQ(d.at(arm).at("schedule"), "deepspeed");
      EXPECT_EQ(d.at(arm).at("losses"), s.at(arm).at("losses")) << arm;
      EXPECT_EQ(d.at(arm).at("param_checksum"), s.at(arm).at("param_checksum")) << arm;
      EXPECT_TRUE(d.at(arm).at("phases").contains("grad_scale")) << arm;
      EXPECT_TRUE(d.at(arm).at("phases").contains("grad_norm")) << arm;
      EXPECT_FALSE(s.at(arm).at("phases").contains("grad_scale")) << arm;
    }
    EXPECT_EQ(d.at("validation").at("ok"), true);
  }
}

// Through the binary in both loops: stock and overlap run Adam fused with the cast to bf16 (one
// pass, phase adam_cast at 30 B/param, no adam or host_cast phase; in the copy-back loop the
// bf16 go to the device, 2 B/param), deepspeed keeps its separate passes (adam, then the host
// cast or the fp32 copy-back with its device cast); all three give the same losses and
// checksums bit for bit, with sub-groups and pieces that end off the vector width and two Adam
// threads. Every arm reports both bounds, in DRIVERRESULT and in the text, the physical one
// never below the lower one.
TEST(SchedE2E, FusedAdamCastEqualsTheSeparatePassesAndBothBoundsAreReported) {
  for (const bool offload : {false, true}) {
    std::vector<nlohmann::json> results;
    for (const char* schedule : {"deepspeed", "stock", "overlap"}) {
      std::vector<std::string> extra{"--threads",        "2",
                                     "--schedule",       schedule,
                                     "--sub-group-size", "7001",
                                     "--chunk-elems",    "999",
                                     "--arms",           "registered,pageable"};
      if (offload) extra.push_back("--offload-param");
      const BenchRun r = run_bench(tiny(extra));
      ASSERT_EQ(r.rc, 0) << schedule << ": " << r.err;
      const nlohmann::json j = driver_result(r.out);
      for (const char* arm : {"registered", "pageable"}) {
        SCOPED_TRACE(std::string(schedule) + " " + arm + (offload ? " offload_param" : ""));
        const auto& a = j.at(arm);
        const auto& ph = a.at("phases");
        const double P = a.at("params").get<double>();
        const bool fused = std::string(schedule) != "deepspeed";
        EXPECT_EQ(ph.contains("adam_cast"), fused);
        EXPECT_EQ(ph.contains("adam"), !fused);
        EXPECT_EQ(ph.contains("host_cast"), offload && !fused);
        if (fused) EXPECT_EQ(ph.at("adam_cast").at("bytes").get<double>(), 30 * P);
        if (!offload) {
          // deepspeed: the CPU cast (4 + 2 B/param) and the H2D of its bf16 (2 B/param).
          EXPECT_EQ(ph.at("copy_back").at("bytes").get<double>(), (fused ? 2 : 8) * P);
        }
        if (!results.empty()) {
          EXPECT_EQ(a.at("losses"), results[0].at(arm).at("losses"));
          EXPECT_EQ(a.at("param_checksum"), results[0].at(arm).at("param_checksum"));
        }
        const auto& b = a.at("bound");
        const double host_bytes = b.at("host_bytes"), physical = b.at("physical_s");
        EXPECT_GE(host_bytes, (fused ? 30 : 34) * P);
        EXPECT_GT(b.at("host_memory_s").get<double>(), 0);
        // The probe's rate, independent of the step it judges; the fastest Adam pass beside it
        // (at least the median pass). No host memory streams 2 TB/s, and a probe that misreads
        // by 1000x (a unit slip) fails here. The lower bound leaves 100x: a tiny model's pass
        // runs from cache while the probe streams memory, and a loaded 2-core CI runner read a
        // probe 11x below the pass (a 10x margin failed there). A tiny overlapped pass can be
        // far slower than the probe: no check that way.
        EXPECT_DOUBLE_EQ(b.at("host_gb_per_s").get<double>(), b.at("probe_gb_per_s").get<double>());
        EXPECT_DOUBLE_EQ(b.at("host_memory_s").get<double>(),
                         host_bytes / (b.at("host_gb_per_s").get<double>() * 1e9));
        const auto& adam_phase = ph.at(fused ? "adam_cast" : "adam");
        const double pass = b.at("adam_pass_gb_per_s");
        EXPECT_GE(pass * (1 + 1e-9), adam_phase.at("bytes").get<double>() /
                                         adam_phase.at("host_s").get<double>() / 1e9);
        EXPECT_LT(b.at("probe_gb_per_s").get<double>(), 2000);
        EXPECT_GT(b.at("probe_gb_per_s").get<double>(), pass / 100);
        // The busiest of the host memory after the serial part (none reported by deepspeed;
        // the forward's fetches' bytes under offload_param), each link direction and the
        // device's compute; a step that beats it makes it "not known".
        const double serial = b.at("serial_s"), serial_bytes = b.at("serial_host_bytes");
        EXPECT_EQ(serial > 0, fused);
        EXPECT_EQ(serial_bytes > 0, fused && offload);
        const std::string from = b.at("host_rate_from");
        EXPECT_EQ(from, "probe");
        // The probe's median is of 5 passes before the steps and one after each timed step.
        EXPECT_EQ(b.at("probe_passes").get<int>(), 5 + a.at("steps").get<int>());
        EXPECT_DOUBLE_EQ(physical,
                         std::max({serial + (host_bytes - serial_bytes) /
                                                (b.at("host_gb_per_s").get<double>() * 1e9),
                                   b.at("pcie_s").get<double>(), b.at("compute_s").get<double>()}));
        const bool beaten = b.at("beaten");
        EXPECT_EQ(beaten, b.at("fastest_step_s").get<double>() < physical);
        EXPECT_EQ(b.at("physical_verdict"), beaten ? "not known" : "holds");
        EXPECT_EQ(beaten, r.out.find(std::string("physical bound: ") + arm + ": not known") !=
                              std::string::npos)
            << r.out;
        EXPECT_NE(r.out.find(std::string("physical bound: ") + arm + ": "), std::string::npos)
            << r.out;
        EXPECT_NE(r.out.find(std::string("\nbound: ") + arm + ": "), std::string::npos);
      }
      EXPECT_EQ(j.at("validation").at("ok"), true);
      results.push_back(j);
    }
  }
}

// --dry-run: the plan and the pre-flight verdict, no arm started; the JSON file holds them.
TEST(SchedE2E, DryRunPrintsThePlanAndThePreflightVerdict) {
  const std::string json = ::testing::TempDir() + "zob_dry_run.json";
  std::remove(json.c_str());
  const BenchRun fits = run_bench({"--device", "cpu", "--dry-run", "--offload-param", "--arms",
                                   "registered,pageable", "--json", json});
  ASSERT_EQ(fits.rc, 0) << fits.err;
  EXPECT_NE(fits.out.find("dry run: nothing allocated"), std::string::npos) << fits.out;
  EXPECT_NE(fits.out.find("533848064 params"), std::string::npos) << fits.out;
  EXPECT_NE(fits.out.find("layer0..layer11: 4 tensors each"), std::string::npos) << fits.out;
  EXPECT_NE(fits.out.find("pre-flight: fits"), std::string::npos) << fits.out;
  EXPECT_EQ(fits.out.find("DRIVERRESULT="), std::string::npos);
  EXPECT_EQ(fits.err.find("step 1/"), std::string::npos) << "an arm ran: " << fits.err;
  std::ifstream in(json);
  ASSERT_TRUE(in) << "no --json file";
  const nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("workload").at("params"), 533848064);
  // The run's workload (report.cpp's one writer) plus the module count: settings appear too.
  EXPECT_EQ(j.at("workload").at("loop"), "offload_param");
  EXPECT_TRUE(j.at("workload").contains("seed")) << j.at("workload").dump();
  EXPECT_TRUE(j.at("workload").contains("chunk_elems")) << j.at("workload").dump();
  EXPECT_EQ(j.at("workload").at("modules"), 14);
  EXPECT_EQ(j.at("preflight").at("ok"), true);
  const auto& arms = j.at("plan").at("arms");
  EXPECT_GT(arms.at("registered").at("host_locked_bytes").get<std::uint64_t>(), 0u);
  EXPECT_EQ(arms.at("pageable").at("host_locked_bytes").get<std::uint64_t>(), 0u);
  EXPECT_EQ(arms.at("registered").at("device_bytes"), j.at("plan").at("device_bytes"));
  std::remove(json.c_str());
  // A model the host cannot hold: refused with the numbers, exit 2, still nothing run.
  const BenchRun refused =
      run_bench({"--device", "cpu", "--dry-run", "--hidden", "65536", "--layers", "64"});
  EXPECT_EQ(refused.rc, 2) << refused.err;
  EXPECT_NE(refused.out.find("pre-flight: refused: an arm needs"), std::string::npos)
      << refused.out;
  EXPECT_NE(refused.err.find("MemAvailable"), std::string::npos) << refused.err;
}

// --device-memory through the real binary (issue 36), the deepspeed schedule under
// --offload-param on the CPU device: the dry run's plan is the run's peak (within 5 %), a cap
// 5 % above it runs, a cap 5 % below it is refused by the pre-flight (exit 2, nothing started)
// and, with --skip-preflight, by the caching pool in the arm (exit 1, naming the flag); the dry
// run's "what would fit" batch fits and the next one does not.
std::vector<std::string> capped_run(std::uint64_t cap, std::vector<std::string> more = {}) {
  std::vector<std::string> a{"--device",
                             "cpu",
                             "--schedule",
                             "deepspeed",
                             "--offload-param",
                             "--hidden",
                             "128",
                             "--layers",
                             "3",
                             "--vocab",
                             "4096",
                             "--seq",
                             "64",
                             "--arms",
                             "pageable",
                             "--steps",
                             "2",
                             "--warmup",
                             "1",
                             "--threads",
                             "2",
                             "--device-memory",
                             std::to_string(cap)};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

std::uint64_t planned_device_bytes(const std::vector<std::string>& args) {
  // One file per test: ctest runs this suite's tests in parallel processes.
  const std::string json = ::testing::TempDir() + "zob_plan_" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                           ".json";
  std::vector<std::string> a = args;
  a.insert(a.end(), {"--dry-run", "--json", json});
  const BenchRun r = run_bench(a);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  std::ifstream in(json);
  if (!in) return 0;
  const nlohmann::json j = nlohmann::json::parse(in);
  std::remove(json.c_str());
  return j.at("plan").at("device_bytes").get<std::uint64_t>();
}

TEST(SchedE2E, DeviceMemoryCapsTheRunWhereThePlanSays) {
  const std::uint64_t plan = planned_device_bytes(capped_run(1ull << 40, {"--batch", "8"}));
  ASSERT_GT(plan, 0u);
  const auto cap = [&](double f) {
    return static_cast<std::uint64_t>(static_cast<double>(plan) * f);
  };

  const BenchRun ran = run_bench(capped_run(cap(1.05), {"--batch", "8"}), {}, nullptr, 110);
  ASSERT_EQ(ran.rc, 0) << ran.err;
  const nlohmann::json j = driver_result(ran.out);
  ASSERT_TRUE(j.is_object()) << ran.out;
  EXPECT_EQ(j.at("workload").at("device_memory_bytes").get<std::uint64_t>(), cap(1.05));
  const double peak = j.at("pageable").at("gpu_peak_gb").get<double>() * 1e9;
  EXPECT_NEAR(peak / static_cast<double>(plan), 1.0, 0.05) << "plan " << plan << " peak " << peak;
  EXPECT_LE(j.at("pageable").at("gpu_reserved_peak_gb").get<double>() * 1e9,
            static_cast<double>(cap(1.05)) + 1e6);

  const BenchRun refused = run_bench(capped_run(cap(0.95), {"--batch", "8"}));
  EXPECT_EQ(refused.rc, 2) << refused.err;
  zob_e2e::expect_one_error_line(refused, "--device-memory allows");
  EXPECT_EQ(refused.err.find("step 1/"), std::string::npos) << "an arm ran: " << refused.err;

  const BenchRun pool =
      run_bench(capped_run(cap(0.95), {"--batch", "8", "--skip-preflight"}), {}, nullptr, 110);
  EXPECT_EQ(pool.rc, 1) << pool.err;
  const nlohmann::json failed = driver_result(pool.out);
  ASSERT_TRUE(failed.is_object()) << pool.out;
  EXPECT_EQ(failed.at("pageable").at("ok"), false);
  EXPECT_NE(failed.at("pageable").at("error").get<std::string>().find("--device-memory"),
            std::string::npos)
      << failed.at("pageable").at("error");
  // The refusal says what the pool held, per queue (cached but free, or live).
  EXPECT_NE(failed.at("pageable").at("error").get<std::string>().find("; compute queue: "),
            std::string::npos)
      << failed.at("pageable").at("error");

  // What would fit: a shape whose activations outweigh the reduce bucket (dry runs only, no
  // step), capped between its batch-1 and batch-16 plans; the batch it names passes the
  // pre-flight and the next one does not. Sized so that host + device at batch 16 (8.6 GB)
  // stays far below a CI box's MemAvailable: on the cpu device the host check adds the device
  // peak, and a shape near the box's RAM would be refused for the host, not the cap.
  const std::vector<std::string> big{
      "--device", "cpu", "--schedule", "deepspeed", "--offload-param", "--hidden", "2048",
      "--layers", "4",   "--seq",      "1024",      "--vocab",         "8192"};
  const auto with = [&](std::uint64_t limit, int batch) {
    std::vector<std::string> a = big;
    a.insert(a.end(), {"--dry-run", "--device-memory", std::to_string(limit), "--batch",
                       std::to_string(batch)});
    return a;
  };
  const auto plan_at = [&](int batch) {
    std::vector<std::string> a = big;
    a.insert(a.end(), {"--batch", std::to_string(batch)});
    return planned_device_bytes(a);
  };
  const std::uint64_t limit = (plan_at(1) + plan_at(16)) / 2;
  const BenchRun advice = run_bench(with(limit, 16));
  EXPECT_EQ(advice.rc, 2) << advice.out;
  const std::string tag = "what would fit: --batch ";
  const auto at = advice.out.find(tag);
  ASSERT_NE(at, std::string::npos) << advice.out;
  const int batch = std::stoi(advice.out.substr(at + tag.size()));
  ASSERT_GE(batch, 1);
  ASSERT_LT(batch, 16);
  EXPECT_EQ(run_bench(with(limit, batch)).rc, 0);
  EXPECT_EQ(run_bench(with(limit, batch + 1)).rc, 2);
}

// On a device another process shares, the pre-flight holds the plan against the free memory
// the device probe found (its own context made), not the total: refused (exit 2, before any
// arm) where the free memory is below the plan, though the device's total holds it; the dry
// run says so and prints the free figure. (ZOB_TEST_DEVICE_SHARED=probe:N:BYTES: a device of
// 64 GiB free where the CPU device cannot tell, less BYTES held by another process.)
TEST(SchedE2E, ThePreflightHoldsThePlanAgainstTheFreeMemoryTheProbeFound) {
  const std::uint64_t plan = planned_device_bytes(capped_run(1ull << 40, {"--batch", "8"}));
  ASSERT_GT(plan, 0u);
  const std::uint64_t known_free = std::uint64_t{64} << 30;
  const auto holding = [&](double leave) {  // another process leaving leave x the plan free
    const auto left = static_cast<std::uint64_t>(static_cast<double>(plan) * leave);
    return zob_e2e::Env{{"ZOB_TEST_DEVICE_SHARED", "probe:1:" + std::to_string(known_free - left)}};
  };
  const BenchRun refused = run_bench(capped_run(1ull << 40, {"--batch", "8"}), holding(0.9));
  EXPECT_EQ(refused.rc, 2) << refused.err;
  zob_e2e::expect_one_error_line(refused, "free now (of ");
  EXPECT_EQ(refused.err.find("step 1/"), std::string::npos) << "an arm ran: " << refused.err;

  const std::string json = ::testing::TempDir() + "zob_free_plan.json";
  for (const double leave : {0.9, 1.5}) {
    std::vector<std::string> a = capped_run(1ull << 40, {"--batch", "8"});
    a.insert(a.end(), {"--dry-run", "--json", json});
    const BenchRun dry = run_bench(a, holding(leave));
    EXPECT_EQ(dry.rc, leave < 1 ? 2 : 0) << dry.out << dry.err;
    EXPECT_NE(dry.out.find(" free now)"), std::string::npos) << dry.out;
    std::ifstream in(json);
    ASSERT_TRUE(in) << dry.err;
    const nlohmann::json j = nlohmann::json::parse(in);
    const auto left = static_cast<std::uint64_t>(static_cast<double>(plan) * leave);
    EXPECT_EQ(j.at("plan").at("device_free_bytes").get<std::uint64_t>(), left) << j.at("plan");
    EXPECT_EQ(j.at("plan").at("device_limit_bytes").get<std::uint64_t>(), left);
    std::remove(json.c_str());
  }
}

// The host memory each arm holds is what the dry run's plan says (to the page), through the real
// binary, for every schedule and both loops: the locking arms lock host_locked_bytes (deepspeed
// under
// --offload-param: 10 B/param, DeepSpeed's), the hostalloc arm maps host_mapped_bytes (its
// pinned buffers each a power of two, as torch's caching host allocator).
TEST(SchedE2E, EachArmHoldsTheHostBytesOfThePlan) {
  for (const char* schedule : {"stock", "deepspeed"}) {
    for (const bool offload : {false, true}) {
      SCOPED_TRACE(std::string(schedule) + (offload ? " offload_param" : " copy_back"));
      std::vector<std::string> args{
          "--device",  "cpu",  "--schedule", schedule,
          "--hidden",  "96",   "--layers",   "2",
          "--vocab",   "1000", "--batch",    "2",
          "--seq",     "16",   "--arms",     "registered,unregistered,hostalloc",
          "--steps",   "1",    "--warmup",   "0",
          "--threads", "2"};
      if (offload) args.push_back("--offload-param");
      const std::string json = ::testing::TempDir() + "zob_host_plan.json";
      std::vector<std::string> dry = args;
      dry.insert(dry.end(), {"--dry-run", "--json", json});
      ASSERT_EQ(run_bench(dry).rc, 0);
      std::ifstream in(json);
      ASSERT_TRUE(in);
      const nlohmann::json plan = nlohmann::json::parse(in).at("plan");
      std::remove(json.c_str());
      const BenchRun r = run_bench(args, {}, nullptr, 110);
      ASSERT_EQ(r.rc, 0) << r.err;
      const nlohmann::json j = driver_result(r.out);
      const std::uint64_t params = j.at("workload").at("params").get<std::uint64_t>();
      // The plan counts the bytes asked for; the arm locks whole pages of each buffer.
      const std::uint64_t pages = 4096 * plan.at("host_buffers").size();
      for (const char* arm : {"registered", "unregistered"}) {
        const auto locked = j.at(arm).at("locked_bytes").get<std::uint64_t>();
        const auto planned = plan.at("arms").at(arm).at("host_locked_bytes").get<std::uint64_t>();
        EXPECT_GE(locked, planned) << arm;
        EXPECT_LT(locked, planned + pages) << arm;
      }
      if (std::string(schedule) == "deepspeed" && offload) {
        // 10 B/param, each buffer page-rounded: within a page per buffer of 10 * params.
        const auto locked = plan.at("arms").at("registered").at("host_locked_bytes");
        EXPECT_GE(locked.get<std::uint64_t>(), 10 * params);
        EXPECT_LT(locked.get<std::uint64_t>(), 10 * params + 5 * 4096);
      }
      // The CPU device reports no runtime-pinned bytes (its "pinned" memory is plain), but the
      // hostalloc arm maps the powers of two the plan counts.
      for (const char* arm : {"registered", "hostalloc"}) {
        const auto mapped = j.at(arm).at("host_mapped_bytes").get<std::uint64_t>();
        const auto planned = plan.at("arms").at(arm).at("host_mapped_bytes").get<std::uint64_t>();
        EXPECT_GE(mapped, planned) << arm;
        EXPECT_LT(mapped, planned + pages) << arm;
      }
      EXPECT_GT(
          plan.at("arms").at("hostalloc").at("host_runtime_pinned_bytes").get<std::uint64_t>(),
          plan.at("host_pinned_bytes").get<std::uint64_t>());
      for (const auto& b : plan.at("host_buffers")) {
        EXPECT_EQ(b.at("read_after_init").get<bool>(),
                  !(std::string(schedule) == "deepspeed" && offload &&
                    b.at("name") == "bf16 per-parameter partitions"))
            << b.dump();
      }
    }
  }
}

}  // namespace

// stock and overlap under --offload-param (issue 36) hold on the device what streaming needs:
// two fetch slots and two gradient slots of the largest module, not the model. Through the
// real binary: tripling the layers grows the plan's device bytes by far less than the bf16
// parameters those layers add (holding every parameter would add at least 2 B/param), and the
// run's measured peak is the plan's.
TEST(SchedE2E, StreamingSchedulesHoldModulesNotTheModel) {
  for (const char* schedule : {"stock", "overlap"}) {
    SCOPED_TRACE(schedule);
    const auto args = [&](int layers) {
      return std::vector<std::string>{"--device",
                                      "cpu",
                                      "--schedule",
                                      schedule,
                                      "--offload-param",
                                      "--hidden",
                                      "512",
                                      "--layers",
                                      std::to_string(layers),
                                      "--vocab",
                                      "512",
                                      "--batch",
                                      "1",
                                      "--seq",
                                      "8",
                                      "--arms",
                                      "pageable",
                                      "--steps",
                                      "1",
                                      "--warmup",
                                      "0",
                                      "--threads",
                                      "2"};
    };
    const std::uint64_t two = planned_device_bytes(args(2)), six = planned_device_bytes(args(6));
    const BenchRun r = run_bench(args(6), {}, nullptr, 110);
    ASSERT_EQ(r.rc, 0) << r.err;
    const nlohmann::json j = driver_result(r.out);
    ASSERT_TRUE(j.is_object()) << r.out;
    const auto params6 = j.at("workload").at("params").get<std::uint64_t>();
    const std::uint64_t layer_params = (params6 - 2 * 512 * 512) / 6;  // less embedding and head
    ASSERT_GT(six, two);
    EXPECT_LT(six - two, 2 * 4 * layer_params / 10) << "two layers " << two << ", six " << six;
    const double peak = j.at("pageable").at("gpu_peak_gb").get<double>() * 1e9;
    EXPECT_NEAR(peak / static_cast<double>(six), 1.0, 0.05) << "plan " << six << " peak " << peak;
  }
}
