// End-to-end --model on the CPU device through the real binary: a config.json path (tied and
// untied, Qwen2 biases and Llama's grouped-query attention) gives the same parameters and
// losses in both loops under stock and overlap, with 1, 2 and 3 ranks (the tied table gathered
// with the head: module shards in stock / overlap, DeepSpeed's per-tensor partitions in
// deepspeed --decoder fused, two independent paths that must agree bit for bit); deepspeed by
// default, whose decoder runs eager PyTorch's kernels (more bf16 roundings: decoder_gradient_test
// bounds both against a double forward), the same in both loops and different from stock's; a
// built-in name's dry run; refusals (exit 2, one line).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "e2e_support.hpp"

namespace {

// The shared helper runs the binary with a time limit and reaps it (e2e_support.hpp).
using BenchRun = zob_e2e::Result;
using zob_e2e::run_bench;

nlohmann::json driver_result(const BenchRun& r) {
  const auto at = r.out.find("DRIVERRESULT=");
  if (at == std::string::npos) return nullptr;
  const auto end = r.out.find('\n', at);
  return nlohmann::json::parse(r.out.substr(at + 13, end - at - 13));
}

std::string fixture(const char* name) {
  return std::string(ZOB_SOURCE_DIR) + "/tests/models/" + name;
}

class ModelE2E : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(ModelE2E, ConfigPathGivesTheSameStepInEveryLoopAndSchedule) {
  const std::string model = fixture(std::get<0>(GetParam()));
  const std::string gpus = std::to_string(std::get<1>(GetParam()));
  nlohmann::json first, first_eager;
  for (const char* schedule : {"stock", "overlap", "deepspeed --decoder fused", "deepspeed"}) {
    for (const bool offload : {false, true}) {
      SCOPED_TRACE(std::string(schedule) + (offload ? " offload_param" : " copy_back"));
      const bool eager = std::string(schedule) == "deepspeed";
      const bool fused_deepspeed = std::string(schedule) == "deepspeed --decoder fused";
      std::vector<std::string> args{
          "--device", "cpu",        "--model",
          model,      "--schedule", fused_deepspeed ? "deepspeed" : schedule,
          "--arms",   "pageable",   "--batch",
          "2",        "--seq",      "7",
          "--steps",  "2",          "--warmup",
          "1",        "--threads",  "2",
          "--gpus",   gpus};
      if (offload) args.push_back("--offload-param");
      if (fused_deepspeed) args.insert(args.end(), {"--decoder", "fused"});
      const BenchRun r = run_bench(args);
      ASSERT_EQ(r.rc, 0) << r.err;
      const nlohmann::json d = driver_result(r);
      ASSERT_FALSE(d.is_null()) << r.out;
      const nlohmann::json& arm = d.at("pageable");
      EXPECT_EQ(arm.at("model"), model);  // the upstream script's model key: the text given
      EXPECT_EQ(d.at("workload").at("model"), model);
      EXPECT_EQ(d.at("workload").at("architecture").at("name"), model);
      const auto losses = arm.at("losses");
      ASSERT_EQ(losses.size(), 3u);
      EXPECT_NE(losses[0], losses[2]) << "Adam changed nothing";
      nlohmann::json& same = eager ? first_eager : first;
      if (eager) EXPECT_NE(losses, first.at("losses")) << "deepspeed ran the fused decoder";
      if (same.is_null()) {
        same = arm;
        continue;
      }
      EXPECT_EQ(arm.at("param_checksum"), same.at("param_checksum"));
      EXPECT_EQ(losses, same.at("losses"));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelE2E,
                         ::testing::Combine(::testing::Values("tiny-qwen2",
                                                              "tiny-llama-tied/config.json"),
                                            ::testing::Values(1, 2, 3)),
                         [](const ::testing::TestParamInfo<std::tuple<const char*, int>>& info) {
                           std::string name = std::get<0>(info.param);
                           name = name.substr(0, name.find('/'));
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name + "_" + std::to_string(std::get<1>(info.param)) + "gpus";
                         });

// DeepSpeed's own copies in a run's device_ops, module by module: the parameter fetches and the
// gradient copies counted through the Device equal the plan's. At the defaults one bucket holds
// every gradient, so the end-of-backward flush, counted with the embedding, copies them all:
// bf16 and fp32 out, bf16 back. Returns the fetches counted (forward and backward).
std::int64_t expect_copies_as_planned(const nlohmann::json& ops) {
  std::int64_t fetches = 0;
  for (const auto& m : ops) {
    SCOPED_TRACE(m.at("module").get<std::string>());
    EXPECT_EQ(m.at("fetches"), m.at("plan_fetches"));
    EXPECT_EQ(m.at("grad_copies"), m.at("plan_grad_copies"));
    fetches += m.at("fetches")[0].get<std::int64_t>() + m.at("fetches")[1].get<std::int64_t>();
    if (&m != &ops[0]) EXPECT_EQ(m.at("grad_copies"), nlohmann::json::array({0, 0}));
  }
  const std::int64_t grad_h2d = ops[0].at("grad_copies")[1].get<std::int64_t>();
  EXPECT_GT(grad_h2d, 0);
  EXPECT_EQ(ops[0].at("grad_copies")[0], 2 * grad_h2d);
  return fetches;
}

// One registered step of --schedule deepspeed (its eager decoder by default) on the CPU device.
BenchRun run_eager_deepspeed(const std::string& model, const char* gpus, bool offload) {
  std::vector<std::string> args{"--device",  "cpu",       "--model",    model,     "--schedule",
                                "deepspeed", "--arms",    "registered", "--batch", "2",
                                "--seq",     "5",         "--steps",    "1",       "--warmup",
                                "0",         "--threads", "2",          "--gpus",  gpus};
  if (offload) args.push_back("--offload-param");
  return run_bench(args);
}

// --schedule deepspeed's decoder is eager PyTorch's kernel sequence: every module's Device
// calls, counted through the Device in a real CPU-device run, equal the plan's (device_ops),
// in both loops and with 2 ranks (rank 0's); per layer they are eager's counts of
// results/h200/2026-12-02-deepspeed-account/eager-kernels.md less what the tool does not
// issue itself (cuBLAS's workspace memsets: 2 forward and 4 backward per layer, 3 more
// backward with q/k/v biases) and with its explicit attention in place of cuDNN's sdpa
// (6 calls forward against 2, 8 backward against 6): Llama 41 - 2 + 4 = 43 forward,
// 84 - 4 + 2 = 82 backward; Qwen2 with biases 41 - 2 + 4 + 3 bias adds = 46 (eager adds them
// in the gemm's epilogue), 90 - 7 + 2 = 85. The module math copies nothing. DeepSpeed's own
// copies per module, counted too, are the plan's: the parameter fetches of its visits
// (offload_param only) and its gradient flushes; at the defaults one bucket holds every
// gradient, so the end-of-backward flush, counted with the embedding, copies them all.
TEST(ModelE2EFacts, DeepSpeedCountsEveryModulesDeviceOpsAsThePlanStatesThem) {
  struct Case {
    const char* fixture;
    std::int64_t layer_forward, layer_backward, embedding_backward;
  };
  for (const Case& c :
       {Case{"tiny-qwen2", 46, 89, 2}, Case{"tiny-llama-tied/config.json", 43, 86, 3}}) {
    for (const char* gpus : {"1", "2"}) {
      for (const bool offload : {false, true}) {
        SCOPED_TRACE(std::string(c.fixture) + " gpus " + gpus + (offload ? " offload" : ""));
        const BenchRun r = run_eager_deepspeed(fixture(c.fixture), gpus, offload);
        ASSERT_EQ(r.rc, 0) << r.err;
        const nlohmann::json d = driver_result(r);
        ASSERT_FALSE(d.is_null()) << r.out;
        const nlohmann::json& ops = d.at("registered").at("device_ops");
        ASSERT_EQ(ops.size(), 4u);  // embedding, 2 layers, head
        for (const auto& m : ops) {
          SCOPED_TRACE(m.at("module").get<std::string>());
          EXPECT_EQ(m.at("kernels"), m.at("plan"));
          EXPECT_EQ(m.at("copies"), nlohmann::json::array({0, 0}));
        }
        // Every tensor of these models is under the persistence threshold: nothing is fetched
        // per module (DeepSpeedCountsEveryModulesFetches... fetches).
        EXPECT_EQ(expect_copies_as_planned(ops), 0);
        for (const std::size_t layer : {std::size_t{1}, std::size_t{2}}) {
          EXPECT_EQ(ops[layer].at("plan"),
                    nlohmann::json::array({c.layer_forward, c.layer_backward}));
        }
        EXPECT_EQ(ops[0].at("plan"), nlohmann::json::array({1, c.embedding_backward}));
        // The final norm (8 / 16), lm_head, the sum; its backward: the sum's fill, 2 gemms.
        EXPECT_EQ(ops[3].at("plan"), nlohmann::json::array({10, 19}));
      }
    }
  }
  // stock keeps the fused decoder and states nothing.
  const BenchRun r = run_bench({"--device", "cpu", "--model", fixture("tiny-qwen2"), "--schedule",
                                "stock", "--arms", "registered", "--batch", "2", "--seq", "5",
                                "--steps", "1", "--warmup", "0", "--threads", "2"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_FALSE(driver_result(r).at("registered").contains("device_ops"));
}

// A model whose projections and tables exceed DeepSpeed's persistence threshold (1e5 elements:
// 384 x 384, 384 x 512, 512 x 384; its 384 x 128 k / v projections and norms persist): each
// module's forward fetches them (offload_param; the reuse distance keeps them for backward),
// one H2D copy per tensor on every rank, as the plan states, with 1 and 2 ranks; the copy_back
// loop fetches nothing over the link.
TEST(ModelE2EFacts, DeepSpeedCountsEveryModulesFetchesAndGradientCopiesAsThePlanStatesThem) {
  for (const char* gpus : {"1", "2"}) {
    for (const bool offload : {false, true}) {
      SCOPED_TRACE(std::string("gpus ") + gpus + (offload ? " offload" : ""));
      const BenchRun r = run_eager_deepspeed(fixture("small-llama"), gpus, offload);
      ASSERT_EQ(r.rc, 0) << r.err;
      const nlohmann::json d = driver_result(r);
      ASSERT_FALSE(d.is_null()) << r.out;
      const nlohmann::json& ops = d.at("registered").at("device_ops");
      ASSERT_EQ(ops.size(), 4u);
      const std::int64_t fetches = expect_copies_as_planned(ops);
      // embedding, per layer q / o / gate / up / down, head.
      EXPECT_EQ(fetches, offload ? 1 + 2 * 5 + 1 : 0);
      for (const auto& m : ops) EXPECT_EQ(m.at("fetches")[1], 0) << m.at("module");
    }
  }
}

// The dry run names what its device figure is made of (text and plan.device_parts, summing to
// plan.device_bytes), with the step's parts at its peak under --schedule deepspeed
// --offload-param (small-llama b2 s64); and a real run on the CPU device peaks where the plan says
// (within 5 %, the issue's bound: the walk and the runner take the same per-tensor blocks in the
// same order).
TEST(ModelE2EFacts, DeepSpeedDryRunNamesWhatItsDevicePeakIsMadeOfAndTheRunPeaksThere) {
  const std::string json = ::testing::TempDir() + "zob_device_parts_dry_run.json";
  std::remove(json.c_str());
  std::vector<std::string> args{"--device",
                                "cpu",
                                "--model",
                                fixture("small-llama"),
                                "--schedule",
                                "deepspeed",
                                "--offload-param",
                                "--arms",
                                "registered",
                                "--batch",
                                "2",
                                "--seq",
                                "64",
                                "--threads",
                                "2"};
  std::vector<std::string> dry = args;
  for (const char* a : {"--dry-run", "--json"}) dry.emplace_back(a);
  dry.push_back(json);
  const BenchRun r = run_bench(dry);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("device at its peak: "), std::string::npos) << r.out;
  std::ifstream in(json);
  ASSERT_TRUE(in) << "no --json file";
  const nlohmann::json plan = nlohmann::json::parse(in).at("plan");
  std::uint64_t sum = 0;
  std::set<std::string> names;
  for (const auto& p : plan.at("device_parts")) {
    EXPECT_GT(p.at("bytes").get<std::uint64_t>(), 0u) << p;
    sum += p.at("bytes").get<std::uint64_t>();
    names.insert(p.at("name").get<std::string>());
  }
  const auto planned = plan.at("device_bytes").get<std::uint64_t>();
  EXPECT_EQ(sum, planned);
  // At this shape the peak lies in a layer's backward, before its hooks.
  for (const char* part : {"reduce bucket", "fetched parameters", "module gradients",
                           "saved activations", "module scratch"}) {
    EXPECT_TRUE(names.count(part)) << part << " missing from " << plan.at("device_parts");
  }
  for (const char* a : {"--steps", "1", "--warmup", "1"}) args.emplace_back(a);
  const BenchRun run = run_bench(args);
  ASSERT_EQ(run.rc, 0) << run.err;
  const double peak = driver_result(run).at("registered").at("gpu_peak_gb").get<double>() * 1e9;
  EXPECT_NEAR(peak, static_cast<double>(planned), 0.05 * static_cast<double>(planned));
}

// The plan for the two models of eager-kernels.md, from their configs, without running them:
// DRIVERRESULT's device_ops_plan in the dry run's document (plan.device_ops) and its text line.
TEST(ModelE2EFacts, DeepSpeedDryRunStatesTheEagerDecodersDeviceOps) {
  struct Case {
    const char* config;
    std::int64_t layer_forward, layer_backward;
  };
  for (const Case& c : {Case{"Llama-3.2-3B.json", 43, 86}, Case{"Qwen2.5-1.5B.json", 46, 89}}) {
    SCOPED_TRACE(c.config);
    const std::string json = ::testing::TempDir() + "zob_eager_ops_dry_run.json";
    std::remove(json.c_str());
    const BenchRun r = run_bench({"--device", "cpu", "--model",
                                  std::string(ZOB_SOURCE_DIR) + "/bench/models/configs/" + c.config,
                                  "--schedule", "deepspeed", "--batch", "4", "--seq", "512",
                                  "--dry-run", "--skip-preflight", "--json", json});
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("each layer " + std::to_string(c.layer_forward) + " / " +
                         std::to_string(c.layer_backward)),
              std::string::npos)
        << r.out;
    std::ifstream in(json);
    ASSERT_TRUE(in) << "no --json file";
    const nlohmann::json ops = nlohmann::json::parse(in).at("plan").at("device_ops");
    EXPECT_EQ(ops.at("layer"), nlohmann::json::array({c.layer_forward, c.layer_backward}));
    EXPECT_EQ(ops.at("head"), nlohmann::json::array({10, 19}));
    EXPECT_EQ(ops.at("embedding"), nlohmann::json::array({1, 3}));  // both tie the head
  }
}

TEST(ModelE2EFacts, BuiltinDryRunRecordsTheArchitecture) {
  const std::string json = ::testing::TempDir() + "zob_model_dry_run.json";
  std::remove(json.c_str());
  // Exit 0 where it fits, 2 where the pre-flight refuses it (then with --model's advice).
  const BenchRun r =
      run_bench({"--device", "cpu", "--model", "Qwen/Qwen2.5-14B", "--dry-run", "--json", json});
  ASSERT_TRUE(r.rc == 0 || r.rc == 2) << r.err;
  if (r.rc == 2) EXPECT_NE(r.err.find("use a smaller --model"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("model: Qwen/Qwen2.5-14B, 14770033664 params"), std::string::npos) << r.out;
  std::ifstream in(json);
  ASSERT_TRUE(in) << "no --json file";
  const nlohmann::json w = nlohmann::json::parse(in).at("workload");
  EXPECT_EQ(w.at("params"), 14770033664);
  EXPECT_EQ(w.at("hidden"), 5120);
  EXPECT_EQ(w.at("layers"), 48);
  EXPECT_EQ(w.at("architecture").at("model_type"), "qwen2");
  EXPECT_EQ(w.at("architecture").at("num_key_value_heads"), 8);
  EXPECT_EQ(w.at("architecture").at("intermediate_size"), 13824);
  std::remove(json.c_str());
  // --layers overrides a config's layer count; the architecture keeps the published one.
  const BenchRun small = run_bench(
      {"--device", "cpu", "--model", "Llama-3.2-1B", "--layers", "2", "--dry-run", "--json", json});
  ASSERT_TRUE(small.rc == 0 || small.rc == 2) << small.err;
  std::ifstream in2(json);
  const nlohmann::json w2 = nlohmann::json::parse(in2).at("workload");
  EXPECT_EQ(w2.at("layers"), 2);
  EXPECT_EQ(w2.at("architecture").at("config_layers"), 16);
  std::remove(json.c_str());
}

TEST(ModelE2EFacts, RefusalsExitTwoWithOneLine) {
  const std::string bad_config = ::testing::TempDir() + "zob_bad_model_config.json";
  {
    std::ofstream out(bad_config);
    out << R"({"model_type": "gpt2", "vocab_size": 10, "hidden_size": 8})";
  }
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--model", "Qwen2.5-7"}, "did you mean Qwen2.5-7B?"},
      {{"--model", "no-such-model"}, "built-in: Llama-3.2-1B"},
      {{"--model", bad_config}, "model_type 'gpt2'"},
      {{"--model", "Qwen2.5-0.5B", "--hidden", "64"}, "--hidden with --model"},
  };
  for (const auto& [args, says] : cases) {
    std::vector<std::string> full{"--device", "cpu", "--dry-run"};
    full.insert(full.end(), args.begin(), args.end());
    const BenchRun r = run_bench(full);
    EXPECT_EQ(r.rc, 2) << args[1] << ": " << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  std::remove(bad_config.c_str());
}

}  // namespace
