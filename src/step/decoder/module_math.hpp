// Internal to src/step: the model's device state (activations, token ids, the embedding-
// gradient index) and each module's forward and backward as a fixed sequence of Device calls
// on it. run_arm and run_partitioned_arm both use this one copy, so their math, and the order
// of their kernels, cannot drift apart (one rank reproduces run_arm bit for bit).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "step/decoder/decoder_math.hpp"
#include "step/device_buffer.hpp"
#include "zob/config.hpp"
#include "zob/device.hpp"
#include "zob/model.hpp"

namespace zob::step_detail {

class ModuleMath {
 public:
  ModuleMath() = default;
  // Allocates the activation buffers (sizes of device_sizes), then uploads the token ids of
  // token_seed and their embedding-gradient index; returns with the device idle.
  // `pool`: the caching pool a --model decoder takes its per-layer activation blocks from
  // (activations_per_layer, decoder_math.hpp: --schedule deepspeed, where it is required).
  ModuleMath(Device& dev, const RunConfig& config, const ModelLayout& layout,
             std::uint64_t token_seed, CachingPoolDevice* pool = nullptr);

  // Module j (0: embedding, 1..n: blocks, n+1: head) with its bf16 parameters w. `shared`:
  // the module's shared tensors (ModuleSlice::shared: a --model decoder's tied lm_head, the
  // embedding table) wherever the caller holds them; required when the module has any.
  void forward(std::int64_t j, const ModuleWeights& w, const bf16* shared = nullptr) const;
  // Module j's gradients into g (laid out like the module's slice of the flat array). dy
  // holds the gradient of the module's output on entry and of its input on exit.
  // grads_done, if set, runs as soon as g is complete, before the input gradient is. A shared
  // tensor's gradient goes to its owner's g (the tied table's: the embedding's).
  void backward(std::int64_t j, const ModuleWeights& w, const ModuleGrads& g,
                const std::function<void()>& grads_done, const bf16* shared = nullptr) const;

  float* loss() const { return loss_.as<float>(); }

 private:
  bf16* x(std::int64_t i) const { return xs_.as<bf16>() + i * T_ * h_; }
  bf16* pre(std::int64_t i) const { return pre_.as<bf16>() + i * T_ * F_; }
  bf16* act(std::int64_t i) const { return act_.as<bf16>() + i * T_ * F_; }

  Device* dev_ = nullptr;
  std::int64_t T_ = 0, h_ = 0, F_ = 0, V_ = 0, n_ = 0;
  DeviceBuffer xs_, pre_, act_, logits_, dy_, dtmp_, dact_, dpre_, loss_;
  DeviceBuffer ids_, uniq_, offsets_, positions_;
  EmbeddingGradIndex index_;
  std::unique_ptr<DecoderMath> decoder_;  // --model: the decoder transformer's math
};

}  // namespace zob::step_detail
