// Byte accounting of one arm: what it allocates (plan_memory) and what a step moves
// (step_traffic). Pure arithmetic on the configuration.
#include <algorithm>

#include "step/step_internal.hpp"
#include "zob/model.hpp"
#include "zob/step.hpp"

namespace zob {
namespace step_detail {

std::int64_t largest_module(const ModelLayout& layout) {
  std::int64_t m = 0;
  for (const auto& mod : layout.modules) m = std::max(m, mod.count);
  return m;
}

std::int64_t fetched_elements(const ModelLayout& layout) {
  return 2 * layout.total - layout.modules.back().count;
}

DeviceSizes device_sizes(const RunConfig& c, const ModelLayout& layout) {
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  const std::uint64_t T = u(c.tokens()), h = u(c.model.hidden), V = u(c.model.vocab);
  const std::uint64_t n = u(c.model.layers), F = 4 * h, P = u(layout.total);
  const std::uint64_t biggest = u(largest_module(layout));
  DeviceSizes s;
  if (c.loop == Loop::copy_back) {
    s.params = 2 * P;
    s.copy_temp = 4 * std::min(u(c.chunk_elems), P);
  } else {
    s.param_slot = 2 * biggest;
  }
  s.grad_slot_bf16 = 2 * biggest;
  s.grad_slot_f32 = 4 * biggest;
  s.hidden = 2 * (n + 1) * T * h;
  s.pre = 2 * n * T * F;
  s.act = 2 * n * T * F;
  s.logits = 2 * T * V;
  s.grad_hidden = 2 * T * h;
  s.grad_ffn = 2 * T * F;
  s.tokens = 4 * (T + T + (T + 1) + T);  // ids, unique ids, offsets, positions
  s.loss = 4;
  return s;
}

}  // namespace step_detail

MemoryPlan plan_memory(const RunConfig& config) {
  const ModelLayout layout = ModelLayout::build(config.model);
  const auto P = static_cast<std::uint64_t>(layout.total);
  MemoryPlan plan;
  plan.host_pinned_bytes = 4 * P + 4 * P;  // fp32 master + fp32 gradients
  if (config.loop == Loop::offload_param) plan.host_pinned_bytes += 2 * P;  // bf16 params
  plan.host_pageable_bytes = 4 * P + 4 * P;  // exp_avg + exp_avg_sq
  plan.device_bytes = step_detail::device_sizes(config, layout).total();
  return plan;
}

StepTraffic step_traffic(const RunConfig& config) {
  const ModelLayout layout = ModelLayout::build(config.model);
  const auto P = static_cast<std::uint64_t>(layout.total);
  StepTraffic t;
  t.grad_offload_d2h = 4 * P;
  t.adam_bytes = 28 * P;
  if (config.loop == Loop::copy_back) {
    t.copy_back_h2d = 4 * P;
  } else {
    t.param_fetch_h2d = 2 * static_cast<std::uint64_t>(step_detail::fetched_elements(layout));
  }
  return t;
}

}  // namespace zob
