// Launchers for the CUDA backend's own kernels (cuda_kernels.cu). Each enqueues on `stream`
// and returns the launch's cudaError_t (cudaGetLastError after the launch); the caller turns a
// failure into a DeviceError naming the kernel and the shape. Plain C++ so cuda_device.cpp
// compiles with the host compiler.
#pragma once
#include <cstdint>

#include <cuda_runtime_api.h>

#include "zob/bf16.hpp"

namespace zob::cuda {

// Scratch for the two-pass sum: kSumBlocks fp32 partials, allocated once by the device.
inline constexpr int kSumBlocks = 1024;

cudaError_t launch_cast_f32_to_bf16(const float* src, bf16* dst, std::int64_t n,
                                    cudaStream_t stream);
cudaError_t launch_cast_bf16_to_f32(const bf16* src, float* dst, std::int64_t n,
                                    cudaStream_t stream);
// parts: n_parts contiguous arrays of n elements (bf16 when bf16_parts, else fp32);
// out[i] = fp32 sum over r in order 0, 1, ... of parts[r][i]: the collectives' reduction.
cudaError_t launch_sum_rank_parts(const void* parts, int n_parts, std::int64_t n, bool bf16_parts,
                                  float* out, cudaStream_t stream);
cudaError_t launch_embedding_forward(const std::int32_t* ids, const bf16* table, bf16* out,
                                     std::int64_t tokens, std::int64_t hidden, cudaStream_t stream);
cudaError_t launch_embedding_backward(const std::int32_t* unique_ids, const std::int32_t* offsets,
                                      const std::int32_t* positions, std::int64_t n_unique,
                                      const bf16* dout, bf16* dtable, std::int64_t hidden,
                                      cudaStream_t stream);
cudaError_t launch_bias_add(bf16* y, const bf16* bias, std::int64_t rows, std::int64_t cols,
                            cudaStream_t stream);
cudaError_t launch_bias_gelu_forward(bf16* pre, const bf16* bias, bf16* act, std::int64_t rows,
                                     std::int64_t cols, cudaStream_t stream);
cudaError_t launch_gelu_backward(const bf16* dact, const bf16* pre, bf16* dpre, std::int64_t n,
                                 cudaStream_t stream);
cudaError_t launch_column_sum(const bf16* x, bf16* out, std::int64_t rows, std::int64_t cols,
                              cudaStream_t stream);
cudaError_t launch_residual_add(bf16* x, const bf16* y, std::int64_t n, cudaStream_t stream);
cudaError_t launch_fill(bf16* x, float value, std::int64_t n, cudaStream_t stream);
// partials: kSumBlocks floats of device scratch.
cudaError_t launch_sum(const bf16* x, std::int64_t n, float* partials, float* result,
                       cudaStream_t stream);

}  // namespace zob::cuda
