#include "step/decoder/module_math.hpp"

#include <algorithm>
#include <vector>

#include "step/step_internal.hpp"

namespace zob::step_detail {

ModuleMath::ModuleMath(Device& dev, const RunConfig& c, const ModelLayout& layout,
                       std::uint64_t token_seed, CachingPoolDevice* pool)
    : dev_(&dev) {
  T_ = c.tokens();
  h_ = c.model.hidden;
  F_ = 4 * h_;
  V_ = c.model.vocab;
  n_ = c.model.layers;
  const DeviceSizes ds = device_sizes(c, layout);
  xs_ = DeviceBuffer(dev, ds.hidden);
  pre_ = DeviceBuffer(dev, ds.pre);
  act_ = DeviceBuffer(dev, ds.act);
  logits_ = DeviceBuffer(dev, ds.logits);
  dy_ = DeviceBuffer(dev, ds.grad_hidden);
  dtmp_ = DeviceBuffer(dev, ds.grad_hidden);
  dact_ = DeviceBuffer(dev, ds.grad_ffn);
  dpre_ = DeviceBuffer(dev, ds.grad_ffn);
  loss_ = DeviceBuffer(dev, ds.loss);

  // Token ids and the deterministic embedding-gradient index (distinct ids ascending, each
  // with its positions ascending), built once on the host.
  const std::vector<std::int32_t> ids = token_ids(T_, V_, token_seed);
  std::vector<std::int32_t> order(ids.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int32_t a, std::int32_t b) { return ids[a] < ids[b]; });
  std::vector<std::int32_t> uniq, offsets;
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (i == 0 || ids[order[i]] != ids[order[i - 1]]) {
      uniq.push_back(ids[order[i]]);
      offsets.push_back(static_cast<std::int32_t>(i));
    }
  }
  offsets.push_back(static_cast<std::int32_t>(order.size()));
  ids_ = DeviceBuffer(dev, 4 * ids.size());
  uniq_ = DeviceBuffer(dev, 4 * uniq.size());
  offsets_ = DeviceBuffer(dev, 4 * offsets.size());
  positions_ = DeviceBuffer(dev, 4 * order.size());
  dev.copy_to_device(Queue::h2d, ids_.as<void>(), ids.data(), 4 * ids.size());
  dev.copy_to_device(Queue::h2d, uniq_.as<void>(), uniq.data(), 4 * uniq.size());
  dev.copy_to_device(Queue::h2d, offsets_.as<void>(), offsets.data(), 4 * offsets.size());
  dev.copy_to_device(Queue::h2d, positions_.as<void>(), order.data(), 4 * order.size());
  dev.synchronize();  // the host vectors die at the end of this scope
  index_ =
      EmbeddingGradIndex{uniq_.as<std::int32_t>(), offsets_.as<std::int32_t>(),
                         positions_.as<std::int32_t>(), static_cast<std::int64_t>(uniq.size())};
  if (c.model.decoder()) {
    decoder_ =
        std::make_unique<DecoderMath>(dev, c, xs_.as<bf16>(), logits_.as<bf16>(), loss_.as<float>(),
                                      dy_.as<bf16>(), ids_.as<std::int32_t>(), index_, pool);
  }
}

void ModuleMath::forward(std::int64_t j, const ModuleWeights& w, const bf16* shared) const {
  if (decoder_) {
    decoder_->forward(j, w, shared);
    return;
  }
  Device& dev = *dev_;
  if (j == 0) {
    dev.embedding_forward(ids_.as<std::int32_t>(), w + 0, x(0), T_, h_);
  } else if (j == n_ + 1) {
    dev.gemm({false, true, T_, V_, h_, x(n_), h_, w + 0, h_, logits_.as<bf16>(), V_});
    dev.sum(logits_.as<bf16>(), T_ * V_, loss_.as<float>());
  } else {
    const std::int64_t i = j - 1;
    const bf16* w1 = w + 0;  // fc1 weight and bias, fc2 weight and bias (tensor by tensor)
    const bf16* b1 = w + F_ * h_;
    const bf16* w2 = w + (F_ * h_ + F_);
    const bf16* b2 = w + (2 * F_ * h_ + F_);
    dev.gemm({false, true, T_, F_, h_, x(i), h_, w1, h_, pre(i), F_});
    dev.bias_gelu_forward(pre(i), b1, act(i), T_, F_);
    // x_{i+1} = x_i + fc2(act): fc2 lands in x_{i+1}, then the residual is added in place
    // (bf16(a + b) is symmetric, so this equals x_i += fc2 out).
    dev.gemm({false, true, T_, h_, F_, act(i), F_, w2, F_, x(i + 1), h_});
    dev.bias_add(x(i + 1), b2, T_, h_);
    dev.residual_add(x(i + 1), x(i), T_ * h_);
  }
}

void ModuleMath::backward(std::int64_t j, const ModuleWeights& w, const ModuleGrads& g,
                          const std::function<void()>& grads_done, const bf16* shared) const {
  if (decoder_) {
    decoder_->backward(j, w, g, grads_done, shared);
    return;
  }
  Device& dev = *dev_;
  bf16* dy = dy_.as<bf16>();
  if (j == n_ + 1) {
    bf16* dlogits = logits_.as<bf16>();  // the logits are dead once the loss is summed
    dev.fill(dlogits, 1.0f, T_ * V_);    // d(sum)/d(logit) = 1
    dev.gemm({true, false, V_, h_, T_, dlogits, V_, x(n_), h_, g + 0, h_});
    if (grads_done) grads_done();
    dev.gemm({false, false, T_, h_, V_, dlogits, V_, w + 0, h_, dy, h_});
  } else if (j == 0) {
    dev.fill_zero(Queue::compute, g + 0, static_cast<std::size_t>(V_ * h_) * 2);
    dev.embedding_backward(index_, dy, g + 0, h_);
    if (grads_done) grads_done();
  } else {
    const std::int64_t i = j - 1;
    const bf16* w1 = w + 0;
    const bf16* w2 = w + (F_ * h_ + F_);
    bf16* gw1 = g + 0;
    bf16* gb1 = g + F_ * h_;
    bf16* gw2 = g + (F_ * h_ + F_);
    bf16* gb2 = g + (2 * F_ * h_ + F_);
    bf16* dact = dact_.as<bf16>();
    bf16* dpre = dpre_.as<bf16>();
    dev.gemm({false, false, T_, F_, h_, dy, h_, w2, F_, dact, F_});
    dev.gemm({true, false, h_, F_, T_, dy, h_, act(i), F_, gw2, F_});
    dev.column_sum(dy, gb2, T_, h_);
    dev.gelu_backward(dact, pre(i), dpre, T_ * F_);
    dev.gemm({true, false, F_, h_, T_, dpre, F_, x(i), h_, gw1, h_});
    dev.column_sum(dpre, gb1, T_, F_);
    if (grads_done) grads_done();
    dev.gemm({false, false, T_, h_, F_, dpre, F_, w1, h_, dtmp_.as<bf16>(), h_});
    dev.residual_add(dy, dtmp_.as<bf16>(), T_ * h_);
  }
}

}  // namespace zob::step_detail
