// Byte accounting of one arm: what it allocates (plan_memory) and what a step moves
// (step_traffic). Pure arithmetic on the configuration.
#include <algorithm>

#include "step/decoder/decoder_math.hpp"
#include "step/ranks/partitioned_step.hpp"
#include "step/schedule_case.hpp"
#include "step/step_internal.hpp"
#include "zob/errors.hpp"
#include "zob/host_memory.hpp"
#include "zob/model.hpp"
#include "zob/stats.hpp"
#include "zob/step.hpp"

namespace zob {
namespace step_detail {

std::int64_t largest_module(const ModelLayout& layout) {
  std::int64_t m = 0;
  for (const auto& mod : layout.modules) m = std::max(m, mod.count);
  return m;
}

// The largest fetch unit: a module with its shared tensors (a tied head holds the table).
std::int64_t largest_fetch(const ModelLayout& layout) {
  std::int64_t m = 0;
  for (const auto& mod : layout.modules) m = std::max(m, mod.fetch_count());
  return m;
}

std::int64_t shared_owner_module(const ModelLayout& layout, const TensorSlice& t) {
  for (std::size_t m = 0; m < layout.modules.size(); ++m) {
    const ModuleSlice& mod = layout.modules[m];
    if (mod.offset == t.offset && mod.count == t.count()) return static_cast<std::int64_t>(m);
  }
  throw UsageError("the shared tensor " + t.name +
                   " is not a whole module, which several ranks cannot gather; use --gpus 1");
}

RankFetch rank_fetch(const ModelLayout& layout, const ShardLayout& shards, std::int64_t j) {
  const auto at = [](std::int64_t m) { return static_cast<std::size_t>(m); };
  RankFetch f{shards.shard[at(j)], shards.shard[at(j)] * shards.ranks};
  for (const TensorSlice& t : layout.modules[at(j)].shared) {
    const std::int64_t owner = shared_owner_module(layout, t);
    f.shard += shards.shard[at(owner)];
    f.gathered += shards.shard[at(owner)] * shards.ranks;
  }
  return f;
}

std::int64_t fetched_elements(const ModelLayout& layout) {
  std::int64_t n = 0;
  for (const auto& mod : layout.modules) n += 2 * mod.fetch_count();
  return n - layout.modules.back().fetch_count();
}

std::vector<std::pair<std::string, std::uint64_t>> DeviceSizes::named() const {
  std::uint64_t walked = 0;
  for (const auto& part : deepspeed_step_parts) walked += part.second;
  const bool split = !deepspeed_step_parts.empty() && walked == deepspeed_step;
  const std::pair<const char*, std::uint64_t> fixed[] = {
      {"parameters (resident)", params},
      {"fetch slots", 2 * param_slot},
      {"gradient slots", 2 * (grad_slot_bf16 + grad_slot_f32)},
      {"hidden states", hidden},
      {"pre-activations", pre},
      {"activations", act},
      {"logits (resident)", logits},
      {"hidden gradients", 2 * grad_hidden},
      {"ffn gradients", 2 * grad_ffn},
      {"token tables", tokens + loss},
      {"reduce bucket", reduce_bucket},
      {"persistent tensors", persistent},
      {"the step's peak", split ? 0 : deepspeed_step},
      {"shard stage", shard_stage},
      {"decoder buffers", decoder},
      {"rank buffers", deepspeed_ranks},
      {"device optimizer", device_optimizer}};
  std::vector<std::pair<std::string, std::uint64_t>> out;
  for (const auto& [name, bytes] : fixed) {
    if (bytes > 0) out.emplace_back(name, bytes);
  }
  if (split) out.insert(out.end(), deepspeed_step_parts.begin(), deepspeed_step_parts.end());
  return out;
}

DeviceSizes device_sizes(const RunConfig& c, const ModelLayout& layout, int ranks) {
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  const std::uint64_t T = u(c.tokens()), h = u(c.model.hidden), V = u(c.model.vocab);
  const std::uint64_t n = u(c.model.layers), F = 4 * h;
  const ShardLayout shards = ShardLayout::build(layout, ranks);
  const std::uint64_t S = u(shards.total);  // N = 1: every parameter
  std::uint64_t biggest_shard = 0;
  for (std::int64_t v : shards.shard) biggest_shard = std::max(biggest_shard, u(v));
  const std::uint64_t biggest = biggest_shard * u(ranks);  // a module gathered, padded
  // A fetch with several ranks: the module's shard and its shared tensors' (a tied head's
  // table), staged and gathered back to back.
  std::uint64_t fetch_shard = 0, fetch_gathered = 0;
  for (std::size_t j = 0; ranks > 1 && j < layout.modules.size(); ++j) {
    const RankFetch f = rank_fetch(layout, shards, static_cast<std::int64_t>(j));
    fetch_shard = std::max(fetch_shard, u(f.shard));
    fetch_gathered = std::max(fetch_gathered, u(f.gathered));
  }
  DeviceSizes s;
  if (c.loop == Loop::copy_back) {
    s.params = 2 * S;
    if (ranks > 1) s.param_slot = 2 * fetch_gathered;  // the all-gathers' ring
  } else {
    s.param_slot = 2 * std::max({biggest, fetch_gathered, u(largest_fetch(layout))});
    if (ranks > 1) s.shard_stage = 2 * fetch_shard;
  }
  s.grad_slot_bf16 = 2 * biggest;
  s.grad_slot_f32 = 4 * biggest_shard;
  s.hidden = 2 * hidden_states_held(c) * T * h;
  // A --model decoder under activations_per_layer takes its logits from the pool, per step.
  s.logits = c.model.decoder() && step_detail::activations_per_layer(c) ? 0 : 2 * T * V;
  s.grad_hidden = 2 * T * h;
  if (c.model.decoder()) {
    s.decoder = decoder_sizes(c).total();
  } else {
    s.pre = 2 * n * T * F;
    s.act = 2 * n * T * F;
    s.grad_ffn = 2 * T * F;
  }
  s.tokens = 4 * (T + T + (T + 1) + T);  // ids, unique ids, offsets, positions
  s.loss = 4;
  schedule_case(c.schedule).plan_device(c, layout, ranks, s);
  return s;
}

std::uint64_t host_memory_bytes(const StepSample& s) {
  // Every phase whose bytes pass through host memory once: the CPU passes over the host arrays
  // and the copies (a copy's link bytes are its host bytes: the DMA reads or writes each once).
  // Not the device's own work, nor the collectives between devices.
  constexpr Phase kHostPhases[] = {Phase::grad_offload, Phase::grad_norm, Phase::grad_scale,
                                   Phase::adam,         Phase::adam_cast, Phase::copy_back,
                                   Phase::param_fetch,  Phase::host_cast};
  std::uint64_t bytes = 0;
  for (Phase p : kHostPhases) {
    const auto it = s.phases.find(to_string(p));
    if (it != s.phases.end()) bytes += it->second.bytes;
  }
  return bytes;
}

StepBound step_bound(const ArmResult& r, const std::vector<StepLinkTimes>& links,
                     double probe_gb_per_s, std::int64_t params) {
  std::vector<double> adam, d2h, h2d, compute, wall, host_bytes, serial, serial_bytes;
  double fastest_adam_gb_per_s = 0;
  const std::size_t first = static_cast<std::size_t>(std::max(r.warmup, 0));
  for (std::size_t i = first; i < r.samples.size(); ++i) {
    const StepSample& s = r.samples[i];
    auto it = s.phases.find(to_string(Phase::adam));
    if (it == s.phases.end()) it = s.phases.find(to_string(Phase::adam_cast));
    adam.push_back(it == s.phases.end() ? 0.0 : it->second.host_s);
    if (it != s.phases.end() && it->second.host_s > 0) {
      fastest_adam_gb_per_s = std::max(
          fastest_adam_gb_per_s, static_cast<double>(it->second.bytes) / it->second.host_s / 1e9);
    }
    wall.push_back(s.wall_s);
    host_bytes.push_back(static_cast<double>(host_memory_bytes(s)));
  }
  for (const StepLinkTimes& l : links) {
    d2h.push_back(l.d2h_s);
    h2d.push_back(l.h2d_s);
    compute.push_back(l.compute_s);
    serial.push_back(l.serial_s);
    serial_bytes.push_back(l.serial_host_bytes);
  }
  StepBound b;
  b.probe_gb_per_s = probe_gb_per_s;
  b.adam_s = probe_gb_per_s > 0 ? 28.0 * static_cast<double>(params) / (probe_gb_per_s * 1e9) : 0;
  b.adam_measured_s = median(adam);
  b.d2h_s = median(d2h);
  b.h2d_s = median(h2d);
  b.pcie_s = std::max(b.d2h_s, b.h2d_s);
  b.compute_s = median(compute);
  b.bound_s = std::max(b.adam_s, b.pcie_s) + b.compute_s;
  b.ratio = b.bound_s > 0 ? median(wall) / b.bound_s : 0;
  b.host_bytes = median(host_bytes);
  b.serial_s = serial.empty() ? 0 : median(serial);
  b.serial_host_bytes = serial_bytes.empty() ? 0 : median(serial_bytes);
  b.host_gb_per_s = probe_gb_per_s;
  b.host_rate_from = "probe";
  b.adam_pass_gb_per_s = fastest_adam_gb_per_s;
  b.finish_physical(median(wall), wall.empty() ? 0 : *std::min_element(wall.begin(), wall.end()));
  return b;
}

}  // namespace step_detail

void StepBound::finish_physical(double median_wall_s, double fastest_wall_s) {
  StepBound& b = *this;
  const double rest_bytes = std::max(0.0, b.host_bytes - b.serial_host_bytes);
  const double rate = b.host_gb_per_s * 1e9;
  b.host_memory_s = rate > 0 ? b.host_bytes / rate : 0;
  const double host_side = b.serial_s + (rate > 0 ? rest_bytes / rate : 0);
  b.physical_s = std::max({host_side, b.pcie_s, b.compute_s});
  b.physical_ratio = b.physical_s > 0 ? median_wall_s / b.physical_s : 0;
  // Never moved to fit the step: a step below it says the probe misread this run.
  b.fastest_step_s = fastest_wall_s;
  b.beaten = b.physical_s > 0 && fastest_wall_s > 0 && fastest_wall_s < b.physical_s;
  b.physical_verdict = b.physical_s <= 0 ? "" : b.beaten ? "not known" : "holds";
}

MemoryPlan plan_memory(const RunConfig& config, int ranks_on_node) {
  const ModelLayout layout = ModelLayout::build(config.model);
  const int ranks = std::max(config.gpus, 1);
  const step_detail::ScheduleCase& schedule = step_detail::schedule_case(config.schedule);
  const std::uint64_t P = schedule.rank_params(config, layout, ranks);
  MemoryPlan plan;
  plan.ranks = ranks_on_node > 0 ? ranks_on_node : ranks;
  // The common host state (docs/anatomy.md section 3); the schedule changes it to its own.
  plan.host_buffers = {{"fp32 master", 4 * P, true, true},
                       {"fp32 gradients", 4 * P, true, true},
                       {"Adam exp_avg", 4 * P, false, true},
                       {"Adam exp_avg_sq", 4 * P, false, true}};
  if (config.loop == Loop::offload_param) {
    plan.host_buffers.push_back({"bf16 parameters", 2 * P, true, true});
  }
  schedule.plan_host(config, P, plan.host_buffers);
  for (const PlannedHostBuffer& b : plan.host_buffers) {
    (b.pinned ? plan.host_pinned_bytes : plan.host_pageable_bytes) += b.bytes;
    if (b.pinned) plan.hostalloc_pinned_bytes += caching_host_allocation(b.bytes);
  }
  const step_detail::DeviceSizes device = step_detail::device_sizes(config, layout, ranks);
  plan.device_bytes = device.total();
  plan.device_parts = device.named();
  schedule.plan_sub_groups(config, plan.optimizer_sub_groups, plan.device_sub_groups);
  if (config.model.decoder())
    plan.layer_activation_bytes = step_detail::decoder_sizes(config).layer_block;
  return plan;
}

StepTraffic step_traffic(const RunConfig& config) {
  const ModelLayout layout = ModelLayout::build(config.model);
  const auto P = static_cast<std::uint64_t>(layout.total);
  StepTraffic t;
  t.grad_offload_d2h = 4 * P;
  t.adam_bytes = 30 * P;
  if (config.loop == Loop::copy_back) {
    t.copy_back_h2d = 2 * P;
  } else {
    t.param_fetch_h2d = 2 * static_cast<std::uint64_t>(step_detail::fetched_elements(layout));
  }
  return t;
}

}  // namespace zob
