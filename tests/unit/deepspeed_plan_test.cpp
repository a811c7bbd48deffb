// The deepspeed schedule's plan against the anatomy of a real DeepSpeed 0.19.8 step
// (torch.profiler of one registered step of the synthetic model at the defaults, offload_param +
// offload_optimizer, results/h200/2026-12-01-deepspeed-reference/run2-no-stack: 102 H2D and
// 103 D2H copies, 10 fetch-stream waits in forward), and the coordinator's rules one by one.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "small_model_config.hpp"
#include "step/deepspeed/deepspeed_plan.hpp"
#include "zob/model.hpp"

namespace zob::step_detail {
namespace {

ModelLayout layout(std::int64_t h, std::int64_t n, std::int64_t vocab = 32000) {
  ModelShape s;
  s.hidden = h;
  s.layers = n;
  s.vocab = vocab;
  return ModelLayout::build(s);
}

std::int64_t elements(const DeepSpeedPlan& p, const std::vector<int>& ids) {
  std::int64_t n = 0;
  for (int t : ids) n += p.tensors[static_cast<std::size_t>(t)].count;
  return n;
}

TEST(DeepSpeedPlan, DefaultsMatchTheProfiledCopyCounts) {
  const ModelLayout l = layout(2048, 12);
  const DeepSpeedPlan p = build_deepspeed_plan(l, Loop::offload_param);
  ASSERT_EQ(p.tensors.size(), 50u);
  EXPECT_EQ(p.persistent.size(), 24u);  // the biases: <= 1e5 elements
  // H2D: 26 fetches in forward (1,067,450,368 B), none in backward (reuse distance 1e9 keeps
  // them), 50 gradients back to the device (1,067,696,128 B), 2 norm scalars (8 B), 24
  // persistent tensors gathered after the step (245,760 B).
  EXPECT_EQ(p.h2d().copies, 26 + 50 + 2 + 24);
  EXPECT_EQ(p.h2d().bytes, 1067450368ull + 1067696128ull + 8 + 245760);
  // D2H: 50 bf16 + 50 fp32 gradients (3,203,088,384 B), 3 norm scalars (16 B).
  EXPECT_EQ(p.d2h().copies, 100 + 3);
  EXPECT_EQ(p.d2h().bytes, 3203088384ull + 16);
  EXPECT_EQ(p.host_waits(), 10);
  // The whole model is fetched once: nothing is released before its backward use.
  EXPECT_EQ(p.fetched_elements(), l.total);
  for (std::size_t v = 0; v < p.visits.size(); ++v) {
    if (!p.visits[v].forward) {
      EXPECT_TRUE(p.visits[v].fetch.empty() && p.visits[v].prefetch.empty());
    }
  }
}

// The recorded profile itself (bench/deepspeed/harness.py --profile, committed): per phase and
// direction, the plan's copies and bytes are the profile's. Fails when either changes.
TEST(DeepSpeedPlan, MatchesTheRecordedProfilePerPhase) {
  std::ifstream in(
      std::string(ZOB_SOURCE_DIR) +
      "/results/h200/2026-12-01-deepspeed-reference/run2-no-stack/profile-registered.json");
  ASSERT_TRUE(in) << "the recorded profile is missing";
  const nlohmann::json prof = nlohmann::json::parse(in);
  const DeepSpeedPlan p = build_deepspeed_plan(layout(2048, 12), Loop::offload_param);
  const auto bytes = [&](const std::vector<int>& ids, std::uint64_t per) {
    return per * static_cast<std::uint64_t>(elements(p, ids));
  };
  std::int64_t fwd_copies = 0, bwd_fetch = 0;
  std::uint64_t fwd_bytes = 0;
  std::vector<int> flushed;
  for (const DsVisit& v : p.visits) {
    const std::int64_t n = static_cast<std::int64_t>(v.fetch.size() + v.prefetch.size());
    (v.forward ? fwd_copies : bwd_fetch) += n;
    if (v.forward) fwd_bytes += bytes(v.fetch, 2) + bytes(v.prefetch, 2);
  }
  for (const DsFlush& f : p.flushes)
    flushed.insert(flushed.end(), f.tensors.begin(), f.tensors.end());
  const auto& ph = prof.at("phases");
  const auto copies = [&](const char* phase, const char* dir) {
    return ph.at(phase).at("copies").at(dir);
  };
  EXPECT_EQ(copies("forward", "HtoD").at("count").get<std::int64_t>(), fwd_copies);
  EXPECT_EQ(copies("forward", "HtoD").at("bytes").get<std::uint64_t>(), fwd_bytes);
  EXPECT_FALSE(ph.at("forward").at("copies").contains("DtoH"));
  EXPECT_EQ(bwd_fetch, 0);
  EXPECT_EQ(copies("backward", "HtoD").at("count").get<std::size_t>(), flushed.size());
  EXPECT_EQ(copies("backward", "HtoD").at("bytes").get<std::uint64_t>(), bytes(flushed, 2));
  EXPECT_EQ(copies("backward", "DtoH").at("count").get<std::size_t>(), 2 * flushed.size());
  EXPECT_EQ(copies("backward", "DtoH").at("bytes").get<std::uint64_t>(), bytes(flushed, 6));
  EXPECT_EQ(copies("optimizer_step", "HtoD").at("count").get<std::size_t>(),
            p.persistent.size() + static_cast<std::size_t>(kNormWrites));
  EXPECT_EQ(copies("optimizer_step", "HtoD").at("bytes").get<std::uint64_t>(),
            bytes(p.persistent, 2) + 4 * kNormWrites);
  EXPECT_EQ(copies("optimizer_step", "DtoH").at("count").get<int>(), kNormReads);
  EXPECT_EQ(copies("optimizer_step", "DtoH").at("bytes").get<std::uint64_t>(),
            8u + 4 * (kNormReads - 1));
  // The forward's fetch-stream waits (cudaStreamSynchronize from the handles' wait()).
  EXPECT_EQ(ph.at("forward").at("sync_counts").at("cudaStreamSynchronize").get<int>(),
            p.host_waits());
}

TEST(DeepSpeedPlan, BucketFlushesBeforeTheGradientThatOverflowsIt) {
  const DeepSpeedPlan p = build_deepspeed_plan(layout(2048, 12), Loop::offload_param);
  // 468 M gradients fit the 5e8 bucket; the embedding's 65.5 M do not: two flushes.
  ASSERT_EQ(p.flushes.size(), 2u);
  EXPECT_EQ(p.flushes.back().tensors, std::vector<int>{0});
  ASSERT_EQ(p.flushes.front().tensors.size(), 49u);
  // In ds_id order: block 0's fc1.weight first, the head last.
  EXPECT_TRUE(std::is_sorted(p.flushes.front().tensors.begin(), p.flushes.front().tensors.end()));
  EXPECT_EQ(p.tensors[static_cast<std::size_t>(p.flushes.front().tensors.front())].name,
            "layer0.fc1.weight");
  EXPECT_LE(elements(p, p.flushes.front().tensors), 500'000'000);
  int flags = 0;
  for (const DsVisit& v : p.visits)
    flags += static_cast<int>(std::count(v.flush_before.begin(), v.flush_before.end(), true));
  EXPECT_EQ(flags, 1);
}

TEST(DeepSpeedPlan, ModelsBeyondTheReuseDistanceAreFetchedAgainInBackward) {
  // h4096 l8: 1.34 B parameters, more than 1e9 between a first block's two uses.
  const ModelLayout l = layout(4096, 8);
  const DeepSpeedPlan p = build_deepspeed_plan(l, Loop::offload_param);
  // Some tensors are fetched twice (a prefetch late in forward may already bring one back
  // for its backward use), none more than twice, and every one at least once.
  std::vector<int> times(p.tensors.size(), 0);
  for (const DsVisit& v : p.visits) {
    for (int t : v.fetch) ++times[static_cast<std::size_t>(t)];
    for (int t : v.prefetch) ++times[static_cast<std::size_t>(t)];
  }
  for (int t : p.persistent) ++times[static_cast<std::size_t>(t)];
  EXPECT_EQ(*std::min_element(times.begin(), times.end()), 1);
  EXPECT_EQ(*std::max_element(times.begin(), times.end()), 2);
  EXPECT_GT(p.fetched_elements(), l.total);
  EXPECT_LT(p.fetched_elements(), 2 * l.total);
  // Every tensor a visit needs is on the device when it runs: fetched now, earlier and not
  // released since, or persistent.
  std::set<int> on_device(p.persistent.begin(), p.persistent.end());
  for (const DsVisit& v : p.visits) {
    on_device.insert(v.fetch.begin(), v.fetch.end());
    for (int id : v.tensors)
      EXPECT_TRUE(on_device.count(id)) << p.tensors[static_cast<std::size_t>(id)].name;
    on_device.insert(v.prefetch.begin(), v.prefetch.end());
    for (int t : v.released) on_device.erase(t);
  }
}

TEST(DeepSpeedPlan, PrefetchStaysWithinItsBucketAndLiveLimit) {
  DeepSpeedKnobs k;
  k.prefetch_bucket = 20'000'000;
  const DeepSpeedPlan p = build_deepspeed_plan(layout(2048, 12), Loop::offload_param, k);
  for (const DsVisit& v : p.visits) {
    if (v.prefetch.empty()) continue;
    // The loop stops once the bucket is reached: all but the last tensor fit below it.
    std::vector<int> but_last(v.prefetch.begin(), v.prefetch.end() - 1);
    EXPECT_LT(elements(p, but_last), k.prefetch_bucket);
  }
  DeepSpeedKnobs none;
  none.prefetch_bucket = 0;
  const DeepSpeedPlan q = build_deepspeed_plan(layout(2048, 12), Loop::offload_param, none);
  for (const DsVisit& v : q.visits) EXPECT_TRUE(v.prefetch.empty());
  // Without prefetch every fetch is waited on: one wait per visit that fetched.
  int fetching = 0;
  for (const DsVisit& v : q.visits) fetching += v.fetch.empty() ? 0 : 1;
  EXPECT_EQ(q.host_waits(), fetching);
}

TEST(DeepSpeedPlan, CopyBackLoopMovesNoParameters) {
  const DeepSpeedPlan p = build_deepspeed_plan(layout(2048, 12), Loop::copy_back);
  EXPECT_EQ(p.h2d().copies, 50 + 2);  // only the gradients' round trip and the norm
  EXPECT_EQ(p.d2h().copies, 100 + 3);
  EXPECT_EQ(p.fetched_elements(), 0);
}

TEST(DeepSpeedPlan, SmallReuseDistanceReleasesAfterEveryUse) {
  DeepSpeedKnobs k;
  k.max_reuse_distance = 0;
  k.prefetch_bucket = 0;
  const ModelLayout l = layout(64, 3, 1000);
  const DeepSpeedPlan p = build_deepspeed_plan(l, Loop::offload_param, k);
  // Each non-persistent tensor is fetched for forward and again for backward, the head too
  // (a reuse distance of 0 looks at no later module).
  const std::int64_t persistent = elements(p, p.persistent);
  EXPECT_EQ(p.fetched_elements(), 2 * (l.total - persistent) + persistent);
}

// The per-module statement (device_ops' plan_fetches / plan_grad_copies) is the plan's copies
// split by module: with the persistent gathers after the step and the norm's scalars it sums to
// h2d() and d2h(). The tiny knobs flush in the hooks of several modules: each flush counts with
// the module whose hook issued it, the rest of the bucket with the epilogue module.
TEST(DeepSpeedPlan, ModuleCopiesSumToThePlansTotals) {
  const DeepSpeedKnobs tiny = test::tiny_deepspeed_knobs();
  const ModelLayout small = ModelLayout::build(test::small_model_config(1, 0, 1, 1).model);
  for (const Loop loop : {Loop::copy_back, Loop::offload_param}) {
    for (const DeepSpeedKnobs& k : {DeepSpeedKnobs{}, tiny}) {
      const bool flushes_in_hooks = k.reduce_bucket == tiny.reduce_bucket;
      SCOPED_TRACE(std::string(to_string(loop)) + (flushes_in_hooks ? " tiny knobs" : ""));
      const DeepSpeedPlan p = build_deepspeed_plan(small, loop, k);
      const auto M = static_cast<std::int64_t>(small.modules.size());
      const std::vector<DsModuleCopies> per = p.module_copies(M);
      ASSERT_EQ(per.size(), small.modules.size());
      std::int64_t fetches = 0, d2h = 0, h2d = 0, hook_modules = 0;
      for (const DsModuleCopies& m : per) {
        fetches += m.fetch_forward + m.fetch_backward;
        d2h += m.grad_d2h;
        h2d += m.grad_h2d;
        EXPECT_EQ(m.grad_d2h, 2 * m.grad_h2d);  // bf16 and fp32 out, bf16 back
        hook_modules += m.grad_h2d > 0 ? 1 : 0;
      }
      const auto persistent = loop == Loop::offload_param ? std::ssize(p.persistent) : 0;
      EXPECT_EQ(fetches + persistent + h2d + kNormWrites, p.h2d().copies);
      EXPECT_EQ(d2h + kNormReads, p.d2h().copies);
      EXPECT_EQ(h2d, std::ssize(p.tensors));  // every gradient flushed once
      if (loop == Loop::copy_back) EXPECT_EQ(fetches, 0);
      EXPECT_EQ(p.epilogue_module(), 0);  // the embedding's hooks run last
      const DsFlush& epilogue = p.flushes.back();
      EXPECT_GE(per[0].grad_h2d, std::ssize(epilogue.tensors));
      if (flushes_in_hooks) {
        EXPECT_GT(hook_modules, 2);  // flushes issued by several modules' hooks
      } else {
        EXPECT_EQ(hook_modules, 1);  // one bucket: the epilogue flushes it all
        EXPECT_EQ(per[0].grad_h2d, std::ssize(p.tensors));
      }
    }
  }
}

}  // namespace
}  // namespace zob::step_detail
