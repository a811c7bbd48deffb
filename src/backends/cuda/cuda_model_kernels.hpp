// Launchers for the decoder-transformer kernels of the CUDA backend (cuda_model_kernels.cu):
// RMSNorm, rotary embedding with the head permutes, causal softmax and the gated MLP's SiLU.
// Each enqueues on `stream` and returns the launch's cudaError_t, like cuda_kernels.hpp.
// Semantics: include/zob/device.hpp, "decoder-transformer kernels (--model)".
#pragma once
#include <cstdint>

#include <cuda_runtime_api.h>

#include "zob/bf16.hpp"

namespace zob::cuda {

cudaError_t launch_rmsnorm_forward(const bf16* x, const bf16* weight, bf16* y, float* rstd,
                                   std::int64_t rows, std::int64_t cols, float eps,
                                   cudaStream_t stream);
cudaError_t launch_rmsnorm_backward(const bf16* dy, const bf16* x, const bf16* weight,
                                    const float* rstd, bf16* dx, bf16* dweight, std::int64_t rows,
                                    std::int64_t cols, cudaStream_t stream);
cudaError_t launch_to_heads(const bf16* x, bf16* out, std::int64_t batch, std::int64_t seq,
                            std::int64_t heads, std::int64_t head_dim, std::int64_t repeat,
                            double theta, cudaStream_t stream);
cudaError_t launch_from_heads(const bf16* g, bf16* out, std::int64_t batch, std::int64_t seq,
                              std::int64_t heads, std::int64_t head_dim, std::int64_t repeat,
                              double theta, cudaStream_t stream);
cudaError_t launch_causal_softmax_forward(const bf16* scores, bf16* probs, std::int64_t n,
                                          std::int64_t seq, float scale, cudaStream_t stream);
cudaError_t launch_causal_softmax_backward(const bf16* probs, const bf16* dprobs, bf16* dscores,
                                           std::int64_t n, std::int64_t seq, float scale,
                                           cudaStream_t stream);
cudaError_t launch_silu_mul_forward(const bf16* gate, const bf16* up, bf16* out, std::int64_t n,
                                    cudaStream_t stream);
cudaError_t launch_silu_mul_backward(const bf16* dout, const bf16* gate, const bf16* up,
                                     bf16* dgate, bf16* dup, std::int64_t n, cudaStream_t stream);

}  // namespace zob::cuda
