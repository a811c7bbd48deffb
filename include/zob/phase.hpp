// The phases of a training step, declared once: the steps record their times under these
// names, the report prints its rows in this order, and docs/result-schema.json lists the same
// names (a unit test compares them). See docs/anatomy.md for what each phase does.
#pragma once
#include <optional>
#include <string_view>

namespace zob {

// In the order a step runs them (the report's row order). all_gather and reduce_scatter are
// the --gpus N collectives of the partitioned step.
enum class Phase {
  forward,
  backward,
  grad_offload,    // D2H of the fp32 gradients
  grad_norm,       // --schedule deepspeed: the gradient norm reads
  grad_scale,      // --schedule deepspeed: the CPU scaling pass over the gradients
  adam,            // CPU Adam, 28 B/param
  adam_cast,       // stock/overlap --offload-param: CPU Adam fused with the host cast, 30 B/param
  copy_back,       // H2D of the fp32 master + device cast to bf16
  param_fetch,     // --offload-param: bf16 parameters H2D
  host_cast,       // --offload-param: fp32 -> bf16 on the CPU
  all_gather,      // --gpus N: the bf16 parameters of every rank
  reduce_scatter,  // --gpus N: each rank's slice of the summed gradients
  device_adam,     // --offload-ratio < 1: the device sub-groups' unscale and AdamW on the GPU
};

inline constexpr Phase kAllPhases[] = {Phase::forward,    Phase::backward,   Phase::grad_offload,
                                       Phase::grad_norm,  Phase::grad_scale, Phase::adam,
                                       Phase::adam_cast,  Phase::copy_back,  Phase::param_fetch,
                                       Phase::host_cast,  Phase::all_gather, Phase::reduce_scatter,
                                       Phase::device_adam};

// The phase's key in StepSample::phases, DRIVERRESULT and the phase table.
constexpr const char* to_string(Phase p) {
  switch (p) {
    case Phase::forward: return "forward";
    case Phase::backward: return "backward";
    case Phase::grad_offload: return "grad_offload";
    case Phase::grad_norm: return "grad_norm";
    case Phase::grad_scale: return "grad_scale";
    case Phase::adam: return "adam";
    case Phase::adam_cast: return "adam_cast";
    case Phase::copy_back: return "copy_back";
    case Phase::param_fetch: return "param_fetch";
    case Phase::host_cast: return "host_cast";
    case Phase::all_gather: return "all_gather";
    case Phase::reduce_scatter: return "reduce_scatter";
    case Phase::device_adam: return "device_adam";
  }
  return "?";
}

// The phase named `name`; nullopt for a name this build does not know (a newer step's).
constexpr std::optional<Phase> parse_phase(std::string_view name) {
  for (Phase p : kAllPhases) {
    if (name == to_string(p)) return p;
  }
  return std::nullopt;
}

}  // namespace zob
