// The eager decoder's device operations per module (eager_op_counts, what --schedule deepspeed's
// plan states) for the two models of results/h200/2026-12-02-deepspeed-account/eager-kernels.md,
// from their configs (bench/models/configs): eager's measured per-layer counts, part by part,
// less what the tool does not launch itself and with its attention in place of cuDNN's sdpa.
// The e2e test ModelE2EFacts.DeepSpeedCountsEveryModulesDeviceOpsAsThePlanStatesThem counts the
// same through the Device in real CPU-device runs.
#include <gtest/gtest.h>

#include "step/decoder/eager_decoder.hpp"
#include "zob/model.hpp"

namespace zob::step_detail {
namespace {

EagerOpCounts counts_of(const char* config) {
  RunConfig c;
  c.model = resolve_model(std::string(ZOB_SOURCE_DIR) + "/bench/models/configs/" + config);
  c.batch = 4;
  c.seq = 512;
  c.schedule = Schedule::deepspeed;
  return eager_op_counts(c);
}

// eager-kernels.md, per decoder layer (device ops = kernels + memsets), and the parts the tool
// runs differently: cuBLAS's memsets beside its gemms (gate and up forward; down x2, up, gate
// backward; with q/k/v biases one more per biased projection backward), cuDNN's sdpa (2 forward,
// 6 backward) against the tool's attention (K and V repeat copies, QK^T, softmax, PV, the
// output permute: 6; the dO permute, the recompute of what SDPA does not save (K and V repeat
// copies, QK^T, softmax: 4), 4 batched gemms, softmax backward, the sums over the K and V
// repeats: 12), and Qwen2's q/k/v bias adds, which eager runs in the gemm's epilogue.
struct EagerLayer {
  std::int64_t forward, backward;  // measured
  std::int64_t memsets_forward, memsets_backward;
  bool bias;
};

void expect_layer(const EagerOpCounts& tool, const EagerLayer& eager) {
  const std::int64_t attention_forward = 6 - 2, attention_backward = 12 - 6;
  EXPECT_EQ(tool.layer_forward,
            eager.forward - eager.memsets_forward + attention_forward + (eager.bias ? 3 : 0));
  EXPECT_EQ(tool.layer_backward, eager.backward - eager.memsets_backward + attention_backward);
}

TEST(EagerOpCounts, Llama32_3BLayersAreEagersLessCublasMemsetsWithTheToolsAttention) {
  const EagerOpCounts n = counts_of("Llama-3.2-3B.json");
  expect_layer(n, {41, 84, 2, 4, false});
  EXPECT_EQ(n.layer_forward, 43);
  EXPECT_EQ(n.layer_backward, 86);
  // The final norm (8), lm_head, the sum (eager: 8 + 2 + 2 with cuBLAS's and the sum's
  // memsets); backward: the sum's fill, 2 gemms, the norm's 16 (eager 1 + 3 + 16).
  EXPECT_EQ(n.head_forward, 10);
  EXPECT_EQ(n.head_backward, 19);
  // Tied: the fill, the embedding's scatter-sum, the lm_head's gradient added (eager's 3).
  EXPECT_EQ(n.embedding_backward, 3);
}

TEST(EagerOpCounts, Qwen25_1_5BLayersAreEagersLessCublasMemsetsWithTheToolsAttention) {
  const EagerOpCounts n = counts_of("Qwen2.5-1.5B.json");
  expect_layer(n, {41, 90, 2, 7, true});
  EXPECT_EQ(n.layer_forward, 46);
  EXPECT_EQ(n.layer_backward, 89);
}

}  // namespace
}  // namespace zob::step_detail
