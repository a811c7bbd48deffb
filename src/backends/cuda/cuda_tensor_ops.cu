// The CUDA backend's generic strided tensor kernels (cuda_tensor_ops.hpp): one thread per
// output element for elementwise (as PyTorch's elementwise_kernel with its offset calculator);
// reduce_last over a contiguous last dimension one warp per output (each lane a fixed strided
// subsequence, then a fixed butterfly: deterministic), over a strided one a thread per output. The
// fp32 expressions are those of the CPU reference (src/backends/cpu/cpu_tensor_ops.hpp,
// tensor_op_value), with __fmul_rn / __fadd_rn where nvcc would otherwise contract a product and an
// add into one fma.
#include <cstdint>

#include <cuda_runtime.h>

#include "backends/cuda/cuda_tensor_ops.hpp"

namespace zob::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = std::int64_t{1} << 20;

unsigned grid_for(std::int64_t units) {
  std::int64_t blocks = (units + kThreads - 1) / kThreads;
  if (blocks < 1) blocks = 1;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return static_cast<unsigned>(blocks);
}

__device__ __forceinline__ float load(const View& v, std::int64_t at) {
  if (v.f32 != 0) return static_cast<const float*>(v.data)[at];
  const std::uint16_t bits = static_cast<const std::uint16_t*>(v.data)[at];
  return __uint_as_float(unsigned{bits} << 16);
}

// Bit-exact with zob::f32_to_bf16: NaN keeps its sign and payload.
__device__ __forceinline__ void store(const View& v, std::int64_t at, float f) {
  if (v.f32 != 0) {
    static_cast<float*>(const_cast<void*>(v.data))[at] = f;
    return;
  }
  std::uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    u = (u >> 16) | 0x0040u;
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    u >>= 16;
  }
  static_cast<std::uint16_t*>(const_cast<void*>(v.data))[at] = static_cast<std::uint16_t>(u);
}

// The element offset in v of linear index i over dimensions [lo, hi) of v's sizes. I: 32-bit
// unsigned where every index fits (a 64-bit division is many times a 32-bit one).
template <typename I>
__device__ __forceinline__ std::int64_t offset_of(const View& v, I i, int lo, int hi) {
  std::int64_t at = 0;
  for (int d = hi - 1; d >= lo; --d) {
    const I n = static_cast<I>(v.size[d]);
    const I q = i / n;
    at += static_cast<std::int64_t>(i - q * n) * v.stride[d];
    i = q;
  }
  return at;
}

// zob::ElementwiseOp, in its order.
__device__ __forceinline__ float op_value(std::int32_t op, float a, float b, float scalar) {
  switch (op) {
    case 0: return a;
    case 1: return -a;
    case 2: return __fadd_rn(a, b);
    case 3: return __fmul_rn(a, b);
    case 4: return __fadd_rn(a, scalar);
    case 5: return __fmul_rn(a, scalar);
    case 6: return __fmul_rn(a, a);
    case 7: return __fmul_rn(__fmul_rn(a, a), a);
    case 8: return 1.0f / sqrtf(a);
    case 9: return a / (1.0f + expf(-a));
    case 10: {
      const float s = 1.0f / (1.0f + expf(-b));
      return __fmul_rn(a, __fmul_rn(s, __fadd_rn(1.0f, __fmul_rn(b, 1.0f - s))));
    }
    default: return 0.0f;
  }
}

// cat_last (op 11): out's element i from a or b, at the offset of out's index in it.
template <typename I>
__global__ void cat_last_kernel(View out, View a, View b, I n, int lo) {
  const int last = kViewDims - 1;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I width = static_cast<I>(out.size[last]);
    const I rest = i / width, k = i - rest * width;
    const I na = static_cast<I>(a.size[last]);
    const View& v = k < na ? a : b;
    const float x = load(v, offset_of(v, rest, lo, last) +
                                static_cast<std::int64_t>(k < na ? k : k - na) * v.stride[last]);
    store(out, offset_of(out, i, lo, kViewDims), x);
  }
}

template <typename I>
__global__ void elementwise_kernel(std::int32_t op, View out, View a, View b, bool binary,
                                   float scalar, I n, int lo) {
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const float x = load(a, offset_of(a, i, lo, kViewDims));
    const float y = binary ? load(b, offset_of(b, i, lo, kViewDims)) : 0.0f;
    store(out, offset_of(out, i, lo, kViewDims), op_value(op, x, y, scalar));
  }
}

// One warp per output: lane l sums j = l, l+32, ... ascending, then a butterfly.
template <typename I>
__global__ void reduce_last_kernel(View out, View in, float scale, I outputs, int lo) {
  const int lane = threadIdx.x & 31;
  const I warps = static_cast<I>(gridDim.x) * (blockDim.x / 32);
  const int outer = kViewDims - 1;
  const std::int64_t n = in.size[outer], step = in.stride[outer];
  for (I i = static_cast<I>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; i < outputs;
       i += warps) {
    const std::int64_t base = offset_of(in, i, lo, outer);
    float acc = 0.0f;
    for (std::int64_t j = lane; j < n; j += 32) acc += load(in, base + j * step);
    for (int offset = 16; offset > 0; offset >>= 1)
      acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    if (lane == 0) store(out, offset_of(out, i, lo, outer), __fmul_rn(scale, acc));
  }
}

// One thread per output, j ascending (the CPU reference's order): for a strided last dimension
// (a column sum, GQA's repeats), where neighbouring outputs are neighbours in memory and a
// warp's loads stay coalesced; a warp per output would scatter them.
template <typename I>
__global__ void reduce_strided_kernel(View out, View in, float scale, I outputs, int lo) {
  const int outer = kViewDims - 1;
  const std::int64_t n = in.size[outer], step = in.stride[outer];
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < outputs;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const std::int64_t base = offset_of(in, i, lo, outer);
    float acc = 0.0f;
    for (std::int64_t j = 0; j < n; ++j) acc += load(in, base + j * step);
    store(out, offset_of(out, i, lo, outer), __fmul_rn(scale, acc));
  }
}

// 32-bit indices where n (and the grid's stride past it) fits.
bool fits_32(std::int64_t n) { return n < (std::int64_t{1} << 31); }

std::int64_t elements(const View& v) {
  std::int64_t n = 1;
  for (std::int64_t s : v.size) n *= s;
  return n;
}

}  // namespace

cudaError_t launch_elementwise(std::int32_t op, const View& out, const View& a, const View& b,
                               float scalar, int lo, cudaStream_t stream) {
  const std::int64_t n = elements(out);
  if (n <= 0) return cudaSuccess;
  const unsigned grid = grid_for(n);
  if (op == 11) {
    if (fits_32(n)) {
      cat_last_kernel<std::uint32_t>
          <<<grid, kThreads, 0, stream>>>(out, a, b, static_cast<std::uint32_t>(n), lo);
    } else {
      cat_last_kernel<std::int64_t><<<grid, kThreads, 0, stream>>>(out, a, b, n, lo);
    }
    return cudaGetLastError();
  }
  const bool binary = op == 2 || op == 3 || op == 10;
  if (fits_32(n)) {
    elementwise_kernel<std::uint32_t><<<grid, kThreads, 0, stream>>>(
        op, out, a, b, binary, scalar, static_cast<std::uint32_t>(n), lo);
  } else {
    elementwise_kernel<std::int64_t>
        <<<grid, kThreads, 0, stream>>>(op, out, a, b, binary, scalar, n, lo);
  }
  return cudaGetLastError();
}

cudaError_t launch_reduce_last(const View& out, const View& in, float scale, int lo,
                               cudaStream_t stream) {
  const std::int64_t outputs = elements(out);
  if (outputs <= 0) return cudaSuccess;
  if (in.stride[kViewDims - 1] != 1) {
    const unsigned grid = grid_for(outputs);
    if (fits_32(outputs)) {
      reduce_strided_kernel<std::uint32_t>
          <<<grid, kThreads, 0, stream>>>(out, in, scale, static_cast<std::uint32_t>(outputs), lo);
    } else {
      reduce_strided_kernel<std::int64_t>
          <<<grid, kThreads, 0, stream>>>(out, in, scale, outputs, lo);
    }
    return cudaGetLastError();
  }
  const unsigned grid = grid_for(outputs * 32);
  if (fits_32(outputs * 32)) {
    reduce_last_kernel<std::uint32_t>
        <<<grid, kThreads, 0, stream>>>(out, in, scale, static_cast<std::uint32_t>(outputs), lo);
  } else {
    reduce_last_kernel<std::int64_t><<<grid, kThreads, 0, stream>>>(out, in, scale, outputs, lo);
  }
  return cudaGetLastError();
}

}  // namespace zob::cuda
