// Launchers of the CUDA backend's generic strided tensor kernels (cuda_tensor_ops.cu):
// Device::elementwise and Device::reduce_last (include/zob/device.hpp). The view is a plain
// copy of zob::TensorView (nvcc compiles the kernels as C++17 without the project's headers).
#pragma once
#include <cstdint>

#include <cuda_runtime_api.h>

namespace zob::cuda {

inline constexpr int kViewDims = 6;
struct View {
  const void* data;
  std::int32_t f32;  // 0: bf16, 1: fp32 (zob::DType)
  std::int64_t size[kViewDims];
  std::int64_t stride[kViewDims];
};

// op: zob::ElementwiseOp's value; lo: the first dimension in use (the views coalesced by
// zob::coalesce_views, dimensions before lo of size 1).
cudaError_t launch_elementwise(std::int32_t op, const View& out, const View& a, const View& b,
                               float scalar, int lo, cudaStream_t stream);
cudaError_t launch_reduce_last(const View& out, const View& in, float scale, int lo,
                               cudaStream_t stream);

}  // namespace zob::cuda
