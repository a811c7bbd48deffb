// What DeepSpeed's own estimator says of a model, and the largest --batch or --layers that the
// pre-flight would let through (include/zob/preflight.hpp).
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "zob/errors.hpp"
#include "zob/model.hpp"
#include "zob/preflight.hpp"
#include "zob/step.hpp"

namespace zob {

DeepSpeedEstimate deepspeed_estimate(const ModelShape& model, int gpus_per_node,
                                     bool offload_param) {
  // estimate_zero3_model_states_mem_needs (deepspeed/runtime/zero/stage3.py, 0.19.8), with
  // cpu_offload (the optimizer) on, zero_init on and its additional_buffer_factor of 1.5. Its
  // "largest layer" is the largest module's own parameters (recurse=False): a leaf, whose
  // tensors share the name before the last dot here ("layer3.self_attn.q_proj").
  const ModelLayout layout = ModelLayout::build(model);
  std::map<std::string, std::int64_t> leaves;
  for (const ModuleSlice& m : layout.modules) {
    for (const TensorSlice& t : m.tensors) {
      const std::size_t dot = t.name.rfind('.');
      leaves[dot == std::string::npos ? t.name : t.name.substr(0, dot)] += t.count();
    }
  }
  DeepSpeedEstimate e;
  for (const auto& [name, count] : leaves)
    e.largest_layer_params = std::max(e.largest_layer_params, count);
  const auto total = static_cast<double>(layout.total);
  const auto largest_layer_memory = static_cast<std::uint64_t>(4 * e.largest_layer_params);
  constexpr double kBufferFactor = 1.5;  // additional_buffer_factor
  const int gpus = std::max(gpus_per_node, 1);
  if (offload_param) {
    e.gpu_bytes = largest_layer_memory;
    e.cpu_bytes = static_cast<std::uint64_t>(total * 18 * kBufferFactor);
  } else {
    e.gpu_bytes = largest_layer_memory + static_cast<std::uint64_t>(2 * total / gpus);
    e.cpu_bytes = static_cast<std::uint64_t>(total * 16 * kBufferFactor);
  }
  return e;
}

namespace {

bool fits(const RunConfig& c, const HostEnvironment& host, DeviceMemory device) {
  try {
    preflight_check(c, plan_memory(c), host, device);
    return true;
  } catch (const UsageError&) {
    return false;
  }
}

// The largest value v in [1, below) for which the pre-flight passes once set(c, v) (0: none).
template <class Set>
std::int64_t largest_fitting(RunConfig c, Set set, std::int64_t below, const HostEnvironment& host,
                             DeviceMemory device) {
  std::int64_t lo = 0, hi = below;  // lo fits (or is 0), hi does not
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    set(c, mid);
    (fits(c, host, device) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace

std::string what_would_fit(const RunConfig& config, const HostEnvironment& host,
                           DeviceMemory device) {
  // Only the device and host figures depend on these; a memlock shortfall does not shrink
  // with the batch, so the search then finds nothing and says so.
  const auto batch = [](RunConfig& c, std::int64_t v) { c.batch = v; };
  if (const std::int64_t b = largest_fitting(config, batch, config.batch, host, device); b > 0) {
    return fmt::format("--batch {} fits (the largest that does)", b);
  }
  const auto layers_at_batch_1 = [](RunConfig& c, std::int64_t v) {
    c.batch = 1;
    c.model.layers = v;
  };
  if (const std::int64_t l =
          largest_fitting(config, layers_at_batch_1, config.model.layers, host, device);
      l > 0) {
    return fmt::format("--batch 1 --layers {} fits (the most layers that do)", l);
  }
  return "no --batch or --layers fits: a smaller model, or more memory";
}

}  // namespace zob
