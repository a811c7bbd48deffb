// zob/step.hpp's statement of the decoder a run uses and the eager decoder's planned Device
// calls, from decoder/eager_counts.cpp's arithmetic: like it, no device code, so the reports
// and the fuzz target link both files alone.
#include <optional>

#include "step/decoder/eager_decoder.hpp"
#include "zob/step.hpp"

namespace zob {

const char* decoder_kernels_used(const RunConfig& config) {
  if (!config.model.decoder()) return nullptr;
  return step_detail::uses_eager_decoder(config) ? "eager" : "fused";
}

std::optional<PlannedDeviceOps> planned_device_ops(const RunConfig& config) {
  if (!step_detail::uses_eager_decoder(config)) return std::nullopt;
  const step_detail::EagerOpCounts n = step_detail::eager_op_counts(config);
  PlannedDeviceOps p;
  p.embedding[0] = n.embedding_forward;
  p.embedding[1] = n.embedding_backward;
  p.layer[0] = n.layer_forward;
  p.layer[1] = n.layer_backward;
  p.head[0] = n.head_forward;
  p.head[1] = n.head_backward;
  return p;
}

}  // namespace zob
