// --schedule deepspeed on the CPU device: the same losses and final master as stock, bit for
// bit, in both loops, with DeepSpeed's knobs shrunk so a tiny model reaches every rule
// (fetch, prefetch, release and re-fetch, several bucket flushes, the flush back-pressure);
// its phases and their byte counts; and plan_memory's accounting of its buffers.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backends/cpu/cpu_device.hpp"
#include "small_model_config.hpp"
#include "step/deepspeed/deepspeed_plan.hpp"
#include "step/deepspeed/deepspeed_runner.hpp"
#include "step/step_internal.hpp"
#include "zob/model.hpp"
#include "zob/step.hpp"

namespace zob {
namespace {

using step_detail::DeepSpeedKnobs;

// Tiny model: P = 2632, modules of 488 / 552; tensors of 8..512 elements.
DeepSpeedKnobs tiny_knobs() { return test::tiny_deepspeed_knobs(); }

struct ArmRun {
  ArmResult result;
  std::vector<float> master;
};

ArmRun run(const RunConfig& c, Arm arm, const DeepSpeedKnobs* knobs) {
  CpuDevice dev(2);
  ArmRun r;
  r.result = knobs == nullptr ? step_detail::run_arm_capture(c, arm, dev, &r.master)
                              : step_detail::run_deepspeed_arm(c, arm, dev, &r.master, *knobs);
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class DeepSpeedStep : public ::testing::TestWithParam<Loop> {};

TEST_P(DeepSpeedStep, EqualsStockBitForBit) {
  RunConfig c = test::small_model_config(3, 1, 2, 2468);
  c.loop = GetParam();
  c.sub_group_size = 1000;  // three sub-groups
  c.chunk_elems = 300;
  const ArmRun stock = run(c, Arm::registered, nullptr);
  c.schedule = Schedule::deepspeed;
  const DeepSpeedKnobs k = tiny_knobs();
  const step_detail::DeepSpeedPlan plan =
      step_detail::build_deepspeed_plan(ModelLayout::build(c.model), c.loop, k);
  ASSERT_GE(plan.flushes.size(), 3u);
  if (c.loop == Loop::offload_param) {
    ASSERT_GT(plan.fetched_elements(), ModelLayout::build(c.model).total);
  }
  for (const DeepSpeedKnobs& knobs : {k, DeepSpeedKnobs{}}) {
    const ArmRun ds = run(c, Arm::registered, &knobs);
    ASSERT_TRUE(ds.result.ok) << ds.result.error;
    EXPECT_EQ(ds.result.schedule, "deepspeed");
    ASSERT_EQ(ds.result.samples.size(), stock.result.samples.size());
    for (std::size_t i = 0; i < ds.result.samples.size(); ++i) {
      const float a = ds.result.samples[i].loss, b = stock.result.samples[i].loss;
      EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << "step " << i;
    }
    EXPECT_TRUE(same_bits(ds.master, stock.master));
    EXPECT_EQ(ds.result.param_checksum, stock.result.param_checksum);
  }
}

TEST_P(DeepSpeedStep, ReportsDeepSpeedsPhases) {
  RunConfig c = test::small_model_config(2, 1, 2, 1357);
  c.loop = GetParam();
  c.schedule = Schedule::deepspeed;
  c.sub_group_size = 1000;  // several sub-groups: one copy-back each
  const DeepSpeedKnobs k = tiny_knobs();
  const ArmRun ds = run(c, Arm::unregistered, &k);
  ASSERT_TRUE(ds.result.ok) << ds.result.error;
  const auto P = static_cast<std::uint64_t>(ModelLayout::build(c.model).total);
  const auto& phases = ds.result.samples.back().phases;
  EXPECT_EQ(phases.at("grad_offload").bytes, 8 * P);
  EXPECT_EQ(phases.at("grad_scale").bytes, 8 * P);
  EXPECT_EQ(phases.at("grad_norm").bytes, 24u);
  EXPECT_EQ(phases.at("adam").bytes, 28 * P);
  EXPECT_GE(phases.at("grad_offload").device_s, 0.0);
  const auto plan = step_detail::build_deepspeed_plan(ModelLayout::build(c.model), c.loop, k);
  if (c.loop == Loop::offload_param) {
    EXPECT_EQ(phases.at("param_fetch").bytes,
              2 * static_cast<std::uint64_t>(plan.fetched_elements()));
    EXPECT_EQ(phases.count("copy_back"), 0u);
  } else {
    EXPECT_EQ(phases.count("param_fetch"), 0u);
    // PyTorch's blocking copy_ of each CPU sub-group: the CPU cast (4 + 2 B/param), then one
    // H2D of the bf16 (2 B/param), a copy_back span per sub-group and no fp32 on the device.
    EXPECT_EQ(phases.at("copy_back").bytes, 8 * P);
    const auto groups =
        step_detail::ds_sub_groups(plan, step_detail::DsPartitions::build(plan, 1, 0), c);
    std::size_t copy_backs = 0;
    for (const TraceSpan& s : ds.result.samples.back().spans)
      copy_backs += s.name.rfind("copy_back", 0) == 0 && s.track == "h2d" ? 1 : 0;
    EXPECT_EQ(copy_backs, groups.groups.size());
    EXPECT_GT(groups.groups.size(), 1u) << "the test wants several sub-groups";
  }
  // One span per copy of the plan, per direction (fetches, gathers and the gradients' trips).
  std::int64_t h2d = 0, d2h = 0;
  for (const TraceSpan& s : ds.result.samples.back().spans) {
    if (s.name.rfind("copy_back", 0) == 0) continue;
    h2d += s.track == "h2d" ? 1 : 0;
    d2h += s.track == "d2h" ? 1 : 0;
  }
  EXPECT_EQ(h2d, plan.h2d().copies - step_detail::kNormWrites);  // the norm's scalars: no span
  EXPECT_EQ(d2h, plan.d2h().copies - step_detail::kNormReads);
}

// The eager decoder (deepspeed with --model): each module's parameter fetches and gradient copies,
// counted through the Device in the last of two steps, are the plan's (device_ops), with
// DeepSpeed's knobs shrunk to tiny-qwen2 (about 78k parameters) so that backward fetches again and
// several modules' hooks flush the bucket.
TEST_P(DeepSpeedStep, CountsEachModulesCopiesAsThePlanStatesThem) {
  RunConfig c = test::small_model_config(2, 0, 2, 4321);
  c.model = resolve_model(std::string(ZOB_SOURCE_DIR) + "/tests/models/tiny-qwen2");
  c.loop = GetParam();
  c.schedule = Schedule::deepspeed;
  c.decoder = DecoderKernels::eager;
  DeepSpeedKnobs k;
  k.persistence_threshold = 64;  // the norms and biases stay on the device
  k.prefetch_bucket = 8000;
  k.max_live = 20000;
  k.max_reuse_distance = 20000;  // the first layer is released in forward, fetched again
  k.reduce_bucket = 20000;       // a flush every layer or so
  const step_detail::DeepSpeedPlan plan =
      step_detail::build_deepspeed_plan(ModelLayout::build(c.model), c.loop, k);
  const auto modules = static_cast<std::int64_t>(ModelLayout::build(c.model).modules.size());
  std::int64_t fetched_in_backward = 0, flushing_modules = 0;
  for (const step_detail::DsModuleCopies& m : plan.module_copies(modules)) {
    fetched_in_backward += m.fetch_backward;
    flushing_modules += m.grad_h2d > 0 ? 1 : 0;
  }
  if (c.loop == Loop::offload_param) ASSERT_GT(fetched_in_backward, 0);
  ASSERT_GT(flushing_modules, 1);
  const ArmRun ds = run(c, Arm::registered, &k);
  ASSERT_TRUE(ds.result.ok) << ds.result.error;
  ASSERT_EQ(std::ssize(ds.result.device_ops), modules);
  for (const ModuleDeviceOps& m : ds.result.device_ops) {
    SCOPED_TRACE(m.module);
    EXPECT_EQ(m.fetch_forward, m.plan_fetch_forward);
    EXPECT_EQ(m.fetch_backward, m.plan_fetch_backward);
    EXPECT_EQ(m.grad_d2h, m.plan_grad_d2h);
    EXPECT_EQ(m.grad_h2d, m.plan_grad_h2d);
    EXPECT_EQ(m.copies_forward + m.copies_backward, 0);  // the math's own: none of these
  }
}

INSTANTIATE_TEST_SUITE_P(Loops, DeepSpeedStep,
                         ::testing::Values(Loop::copy_back, Loop::offload_param),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// The decoders (eager kernels) with parameters released and fetched again, several flushes and
// persistent tensors in fetched modules: the caching pool reuses every block, so a read of a
// block's bytes that this step did not write would change the numbers. Same bits as with
// DeepSpeed's defaults (everything live), over several steps and both loops.
TEST(DeepSpeedStepMemory, ReleasedAndReusedBlocksChangeNoBit) {
  for (const char* fixture : {"tiny-qwen2", "tiny-llama-tied"}) {
    for (const Loop loop : {Loop::copy_back, Loop::offload_param}) {
      SCOPED_TRACE(std::string(fixture) + " " + to_string(loop));
      RunConfig c;
      c.model = resolve_model(std::string(ZOB_SOURCE_DIR) + "/tests/models/" + fixture);
      c.batch = 2, c.seq = 5, c.steps = 4, c.warmup = 0, c.threads = 2, c.seed = 77;
      c.schedule = Schedule::deepspeed;
      c.loop = loop;
      DeepSpeedKnobs k = tiny_knobs();
      k.persistence_threshold = 64;  // the norms stay: copied into each fetched block
      k.max_reuse_distance = 2000;
      const ArmRun live = run(c, Arm::registered, nullptr);
      const ArmRun reused = run(c, Arm::registered, &k);
      ASSERT_TRUE(reused.result.ok) << reused.result.error;
      for (std::size_t i = 0; i < live.result.samples.size(); ++i) {
        const float a = live.result.samples[i].loss, b = reused.result.samples[i].loss;
        EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << "step " << i << ": " << a << " vs " << b;
      }
      EXPECT_TRUE(same_bits(live.master, reused.master));
    }
  }
}

TEST(DeepSpeedStepPlan, MemoryPlanHoldsDeepSpeedsBuffers) {
  RunConfig c;  // the defaults
  c.loop = Loop::offload_param;
  c.schedule = Schedule::stock;
  const MemoryPlan stock = plan_memory(c);
  c.schedule = Schedule::deepspeed;
  const MemoryPlan ds = plan_memory(c);
  const std::uint64_t P = 533848064;
  // + the bf16 gradient partition and the per-parameter bf16 partitions; the fp32 master moves
  // to plain memory: 10 B/param locked, as DeepSpeed locks.
  EXPECT_EQ(ds.host_pinned_bytes, stock.host_pinned_bytes + 2 * P + 2 * P - 4 * P);
  EXPECT_EQ(ds.host_pinned_bytes, 10 * P);
  EXPECT_EQ(ds.host_pageable_bytes, stock.host_pageable_bytes + 4 * P);
  // No resident array: parameters live from fetch to release. Every one is live at the end
  // of forward (stage3_max_reuse_distance 1e9), so the step holds at least 2 B/param; the
  // reduce bucket is reduce_bucket_size bf16 elements.
  const auto sizes = step_detail::device_sizes(c, ModelLayout::build(c.model));
  EXPECT_EQ(sizes.params, 0u);
  EXPECT_EQ(sizes.reduce_bucket, 1'000'341'504u);  // 5e8 bf16 in a 2 MiB-rounded segment
  EXPECT_GE(sizes.deepspeed_step, 2 * P);
  // ... and at most that, the largest module's gradients and one flush's temporaries of the
  // largest tensor (the embedding, 32000 x 2048: 2 + 8 + 4 B/element).
  EXPECT_LE(sizes.deepspeed_step, 2 * P + 2u * 32000 * 2048 + 14u * 32000 * 2048 + (1u << 20));
  EXPECT_EQ(ds.device_bytes, sizes.total());
  // The copy_back loop on one rank: the flat bf16 array resident, as DeepSpeed's partitions.
  c.loop = Loop::copy_back;
  EXPECT_EQ(step_detail::device_sizes(c, ModelLayout::build(c.model)).params, 2 * P);
}

}  // namespace
}  // namespace zob
