// The CUDA backend's kernels. All are deterministic (no atomics: every output element is
// written by one thread, every reduction has a fixed shape and order) and memory bound, so
// the work is in the access pattern: consecutive threads touch consecutive addresses, and
// where pointers are 16-byte aligned each thread moves 16 bytes per access (8 bf16 or 4 fp32).
// Unaligned pointers and ragged tails take a scalar path with the same arithmetic, so the
// result's bits never depend on the path.
#include <cstdint>

#include <cuda_runtime.h>

#include "backends/cuda/cuda_kernels.hpp"

namespace zob::cuda {
namespace {

constexpr int kThreads = 256;
// Grid-stride loops with a capped grid: enough blocks to fill any current GPU many times over,
// while sizes beyond 2^31 elements still work.
constexpr std::int64_t kMaxBlocks = std::int64_t{1} << 20;

unsigned grid_for(std::int64_t units) {
  std::int64_t blocks = (units + kThreads - 1) / kThreads;
  if (blocks < 1) blocks = 1;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return static_cast<unsigned>(blocks);
}

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

__device__ __forceinline__ float bf2f(std::uint32_t bits16) {
  return __uint_as_float(bits16 << 16);
}

// Bit-exact with zob::f32_to_bf16 (bf16.hpp). Not __float2bfloat16_rn: its NaN result is the
// canonical 0x7fff, which drops the sign and the payload the contract keeps.
__device__ __forceinline__ std::uint32_t f2bf(float f) {
  std::uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x0040u;
  u += 0x7fffu + ((u >> 16) & 1u);
  return u >> 16;
}

__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const std::uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = bf2f(w[i] & 0xffffu);
    f[2 * i + 1] = bf2f(w[i] >> 16);
  }
}

__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  std::uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) w[i] = f2bf(f[2 * i]) | (f2bf(f[2 * i + 1]) << 16);
  return uint4{w[0], w[1], w[2], w[3]};
}

__device__ __forceinline__ std::uint32_t ld16(const bf16* p) { return p->bits; }
__device__ __forceinline__ void st16(bf16* p, std::uint32_t bits) {
  p->bits = static_cast<std::uint16_t>(bits);
}

__device__ __forceinline__ float gelu(float x) {
  return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}
__device__ __forceinline__ float gelu_grad(float x) {
  const float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
  const float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
  return cdf + x * pdf;
}

#define ZOB_GRID_STRIDE(i, count)                                                         \
  for (std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < (count); \
       i += std::int64_t{gridDim.x} * blockDim.x)

// ---- casts ----

__global__ void cast_f32_bf16_vec(const float4* __restrict__ src, uint4* __restrict__ dst,
                                  std::int64_t units) {
  ZOB_GRID_STRIDE(i, units) {
    const float4 a = src[2 * i];
    const float4 b = src[2 * i + 1];
    dst[i] = uint4{f2bf(a.x) | (f2bf(a.y) << 16), f2bf(a.z) | (f2bf(a.w) << 16),
                   f2bf(b.x) | (f2bf(b.y) << 16), f2bf(b.z) | (f2bf(b.w) << 16)};
  }
}
__global__ void cast_f32_bf16_scalar(const float* __restrict__ src, bf16* __restrict__ dst,
                                     std::int64_t n) {
  ZOB_GRID_STRIDE(i, n) { st16(dst + i, f2bf(src[i])); }
}
__global__ void cast_bf16_f32_vec(const uint4* __restrict__ src, float4* __restrict__ dst,
                                  std::int64_t units) {
  ZOB_GRID_STRIDE(i, units) {
    float f[8];
    unpack8(src[i], f);
    dst[2 * i] = float4{f[0], f[1], f[2], f[3]};
    dst[2 * i + 1] = float4{f[4], f[5], f[6], f[7]};
  }
}
__global__ void cast_bf16_f32_scalar(const bf16* __restrict__ src, float* __restrict__ dst,
                                     std::int64_t n) {
  ZOB_GRID_STRIDE(i, n) { dst[i] = bf2f(ld16(src + i)); }
}

// out[i] = fp32(part 0)[i] + fp32(part 1)[i] + ... in rank order, one add at a time
// (__fadd_rn: never contracted or reassociated), as collectives_detail::sum_in_rank_order.
template <bool kBf16>
__global__ void sum_rank_parts_kernel(const void* __restrict__ parts, int n_parts, std::int64_t n,
                                      float* __restrict__ out) {
  ZOB_GRID_STRIDE(i, n) {
    float acc;
    if constexpr (kBf16) {
      const auto* p = static_cast<const bf16*>(parts);
      acc = bf2f(ld16(p + i));
      for (int r = 1; r < n_parts; ++r) acc = __fadd_rn(acc, bf2f(ld16(p + r * n + i)));
    } else {
      const auto* p = static_cast<const float*>(parts);
      acc = p[i];
      for (int r = 1; r < n_parts; ++r) acc = __fadd_rn(acc, p[r * n + i]);
    }
    out[i] = acc;
  }
}

// ---- elementwise ----

// Vector kernels: unit i covers elements [8i, 8i+8); bias kernels need cols % 8 == 0 so a unit
// never straddles two rows.
__global__ void bias_add_vec(uint4* y, const uint4* __restrict__ bias, std::int64_t units,
                             std::int64_t col_units) {
  ZOB_GRID_STRIDE(i, units) {
    float a[8], b[8];
    unpack8(y[i], a);
    unpack8(bias[i % col_units], b);
#pragma unroll
    for (int k = 0; k < 8; ++k) a[k] += b[k];
    y[i] = pack8(a);
  }
}
__global__ void bias_add_scalar(bf16* y, const bf16* __restrict__ bias, std::int64_t n,
                                std::int64_t cols) {
  ZOB_GRID_STRIDE(i, n) { st16(y + i, f2bf(bf2f(ld16(y + i)) + bf2f(ld16(bias + i % cols)))); }
}

__global__ void bias_gelu_vec(uint4* pre, const uint4* __restrict__ bias, uint4* __restrict__ act,
                              std::int64_t units, std::int64_t col_units) {
  ZOB_GRID_STRIDE(i, units) {
    float a[8], b[8];
    unpack8(pre[i], a);
    unpack8(bias[i % col_units], b);
#pragma unroll
    for (int k = 0; k < 8; ++k) a[k] = bf2f(f2bf(a[k] + b[k]));  // gelu of the stored pre
    pre[i] = pack8(a);
#pragma unroll
    for (int k = 0; k < 8; ++k) a[k] = gelu(a[k]);
    act[i] = pack8(a);
  }
}
__global__ void bias_gelu_scalar(bf16* pre, const bf16* __restrict__ bias, bf16* __restrict__ act,
                                 std::int64_t n, std::int64_t cols) {
  ZOB_GRID_STRIDE(i, n) {
    const std::uint32_t p = f2bf(bf2f(ld16(pre + i)) + bf2f(ld16(bias + i % cols)));
    st16(pre + i, p);
    st16(act + i, f2bf(gelu(bf2f(p))));
  }
}

__global__ void gelu_backward_vec(const uint4* __restrict__ dact, const uint4* __restrict__ pre,
                                  uint4* __restrict__ dpre, std::int64_t units) {
  ZOB_GRID_STRIDE(i, units) {
    float d[8], x[8];
    unpack8(dact[i], d);
    unpack8(pre[i], x);
#pragma unroll
    for (int k = 0; k < 8; ++k) d[k] *= gelu_grad(x[k]);
    dpre[i] = pack8(d);
  }
}
__global__ void gelu_backward_scalar(const bf16* __restrict__ dact, const bf16* __restrict__ pre,
                                     bf16* __restrict__ dpre, std::int64_t n) {
  ZOB_GRID_STRIDE(i, n) {
    st16(dpre + i, f2bf(bf2f(ld16(dact + i)) * gelu_grad(bf2f(ld16(pre + i)))));
  }
}

__global__ void residual_add_vec(uint4* x, const uint4* __restrict__ y, std::int64_t units) {
  ZOB_GRID_STRIDE(i, units) {
    float a[8], b[8];
    unpack8(x[i], a);
    unpack8(y[i], b);
#pragma unroll
    for (int k = 0; k < 8; ++k) a[k] += b[k];
    x[i] = pack8(a);
  }
}
__global__ void residual_add_scalar(bf16* x, const bf16* __restrict__ y, std::int64_t n) {
  ZOB_GRID_STRIDE(i, n) { st16(x + i, f2bf(bf2f(ld16(x + i)) + bf2f(ld16(y + i)))); }
}

__global__ void fill_vec(uint4* x, std::uint32_t bits, std::int64_t units) {
  const std::uint32_t w = bits | (bits << 16);
  ZOB_GRID_STRIDE(i, units) { x[i] = uint4{w, w, w, w}; }
}
__global__ void fill_scalar(bf16* x, std::uint32_t bits, std::int64_t n) {
  ZOB_GRID_STRIDE(i, n) { st16(x + i, bits); }
}

// ---- embedding ----

// One block per token; the row is copied 16 bytes per thread when it allows.
template <bool kVec>
__global__ void embedding_forward_kernel(const std::int32_t* __restrict__ ids,
                                         const bf16* __restrict__ table, bf16* __restrict__ out,
                                         std::int64_t hidden) {
  const std::int64_t t = blockIdx.x;
  const bf16* src = table + std::int64_t{ids[t]} * hidden;
  bf16* dst = out + t * hidden;
  if constexpr (kVec) {
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (std::int64_t c = threadIdx.x; c < hidden / 8; c += blockDim.x) d[c] = s[c];
  } else {
    for (std::int64_t c = threadIdx.x; c < hidden; c += blockDim.x) dst[c] = src[c];
  }
}

// One block per distinct id (the CSR index of EmbeddingGradIndex); each thread owns columns
// and sums the id's positions in ascending order in fp32, so the result is independent of the
// launch shape and equal to the CPU reference bit for bit.
template <bool kVec>
__global__ void embedding_backward_kernel(const std::int32_t* __restrict__ unique_ids,
                                          const std::int32_t* __restrict__ offsets,
                                          const std::int32_t* __restrict__ positions,
                                          const bf16* __restrict__ dout, bf16* __restrict__ dtable,
                                          std::int64_t hidden) {
  const std::int64_t u = blockIdx.x;
  const std::int32_t begin = offsets[u];
  const std::int32_t end = offsets[u + 1];
  bf16* row = dtable + std::int64_t{unique_ids[u]} * hidden;
  if constexpr (kVec) {
    for (std::int64_t c = threadIdx.x; c < hidden / 8; c += blockDim.x) {
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (std::int32_t p = begin; p < end; ++p) {
        float v[8];
        unpack8(reinterpret_cast<const uint4*>(dout + std::int64_t{positions[p]} * hidden)[c], v);
#pragma unroll
        for (int k = 0; k < 8; ++k) acc[k] += v[k];
      }
      reinterpret_cast<uint4*>(row)[c] = pack8(acc);
    }
  } else {
    for (std::int64_t c = threadIdx.x; c < hidden; c += blockDim.x) {
      float acc = 0.0f;
      for (std::int32_t p = begin; p < end; ++p) {
        acc += bf2f(ld16(dout + std::int64_t{positions[p]} * hidden + c));
      }
      st16(row + c, f2bf(acc));
    }
  }
}

// ---- reductions ----

// Column sums: a block owns 32 adjacent columns (one warp reads 64 contiguous bytes per row);
// its 16 thread rows take rows y, y+16, ... in order, then thread row 0 adds the 16 partials
// in order. Fixed shape, fixed order: deterministic.
constexpr int kColX = 32;
constexpr int kColY = 16;
__global__ void column_sum_kernel(const bf16* __restrict__ x, bf16* __restrict__ out,
                                  std::int64_t rows, std::int64_t cols) {
  __shared__ float partial[kColY][kColX + 1];
  const std::int64_t c = std::int64_t{blockIdx.x} * kColX + threadIdx.x;
  float acc = 0.0f;
  if (c < cols) {
    for (std::int64_t r = threadIdx.y; r < rows; r += kColY) acc += bf2f(ld16(x + r * cols + c));
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float s = 0.0f;
    for (int k = 0; k < kColY; ++k) s += partial[k][threadIdx.x];
    st16(out + c, f2bf(s));
  }
}

__device__ float block_tree_sum(float v, float* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  return shared[0];
}

// Pass 1: kSumBlocks blocks, each thread a fixed grid-strided subsequence; a fixed tree per
// block. Pass 2: one block folds the partials. The grid never depends on the GPU, so the
// bits do not either.
__global__ void sum_pass1(const bf16* __restrict__ x, std::int64_t n, float* partials) {
  __shared__ float shared[kThreads];
  float acc = 0.0f;
  ZOB_GRID_STRIDE(i, n) { acc += bf2f(ld16(x + i)); }
  const float s = block_tree_sum(acc, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}
__global__ void sum_pass2(const float* __restrict__ partials, float* result) {
  __shared__ float shared[kSumBlocks];
  const float s = block_tree_sum(partials[threadIdx.x], shared);
  if (threadIdx.x == 0) *result = s;
}

}  // namespace

cudaError_t launch_cast_f32_to_bf16(const float* src, bf16* dst, std::int64_t n,
                                    cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  std::int64_t done = 0;
  if (aligned16(src) && aligned16(dst)) {
    const std::int64_t units = n / 8;
    if (units > 0) {
      cast_f32_bf16_vec<<<grid_for(units), kThreads, 0, stream>>>(
          reinterpret_cast<const float4*>(src), reinterpret_cast<uint4*>(dst), units);
    }
    done = units * 8;
  }
  if (done < n) {
    cast_f32_bf16_scalar<<<grid_for(n - done), kThreads, 0, stream>>>(src + done, dst + done,
                                                                      n - done);
  }
  return cudaGetLastError();
}

cudaError_t launch_cast_bf16_to_f32(const bf16* src, float* dst, std::int64_t n,
                                    cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  std::int64_t done = 0;
  if (aligned16(src) && aligned16(dst)) {
    const std::int64_t units = n / 8;
    if (units > 0) {
      cast_bf16_f32_vec<<<grid_for(units), kThreads, 0, stream>>>(
          reinterpret_cast<const uint4*>(src), reinterpret_cast<float4*>(dst), units);
    }
    done = units * 8;
  }
  if (done < n) {
    cast_bf16_f32_scalar<<<grid_for(n - done), kThreads, 0, stream>>>(src + done, dst + done,
                                                                      n - done);
  }
  return cudaGetLastError();
}

cudaError_t launch_sum_rank_parts(const void* parts, int n_parts, std::int64_t n, bool bf16_parts,
                                  float* out, cudaStream_t stream) {
  if (n <= 0 || n_parts <= 0) return cudaSuccess;
  if (bf16_parts) {
    sum_rank_parts_kernel<true><<<grid_for(n), kThreads, 0, stream>>>(parts, n_parts, n, out);
  } else {
    sum_rank_parts_kernel<false><<<grid_for(n), kThreads, 0, stream>>>(parts, n_parts, n, out);
  }
  return cudaGetLastError();
}

cudaError_t launch_embedding_forward(const std::int32_t* ids, const bf16* table, bf16* out,
                                     std::int64_t tokens, std::int64_t hidden,
                                     cudaStream_t stream) {
  if (tokens <= 0 || hidden <= 0) return cudaSuccess;
  if (hidden % 8 == 0 && aligned16(table) && aligned16(out)) {
    embedding_forward_kernel<true>
        <<<static_cast<unsigned>(tokens), 128, 0, stream>>>(ids, table, out, hidden);
  } else {
    embedding_forward_kernel<false>
        <<<static_cast<unsigned>(tokens), 256, 0, stream>>>(ids, table, out, hidden);
  }
  return cudaGetLastError();
}

cudaError_t launch_embedding_backward(const std::int32_t* unique_ids, const std::int32_t* offsets,
                                      const std::int32_t* positions, std::int64_t n_unique,
                                      const bf16* dout, bf16* dtable, std::int64_t hidden,
                                      cudaStream_t stream) {
  if (n_unique <= 0 || hidden <= 0) return cudaSuccess;
  if (hidden % 8 == 0 && aligned16(dout) && aligned16(dtable)) {
    embedding_backward_kernel<true><<<static_cast<unsigned>(n_unique), 128, 0, stream>>>(
        unique_ids, offsets, positions, dout, dtable, hidden);
  } else {
    embedding_backward_kernel<false><<<static_cast<unsigned>(n_unique), 256, 0, stream>>>(
        unique_ids, offsets, positions, dout, dtable, hidden);
  }
  return cudaGetLastError();
}

cudaError_t launch_bias_add(bf16* y, const bf16* bias, std::int64_t rows, std::int64_t cols,
                            cudaStream_t stream) {
  const std::int64_t n = rows * cols;
  if (n <= 0) return cudaSuccess;
  if (cols % 8 == 0 && aligned16(y) && aligned16(bias)) {
    bias_add_vec<<<grid_for(n / 8), kThreads, 0, stream>>>(
        reinterpret_cast<uint4*>(y), reinterpret_cast<const uint4*>(bias), n / 8, cols / 8);
  } else {
    bias_add_scalar<<<grid_for(n), kThreads, 0, stream>>>(y, bias, n, cols);
  }
  return cudaGetLastError();
}

cudaError_t launch_bias_gelu_forward(bf16* pre, const bf16* bias, bf16* act, std::int64_t rows,
                                     std::int64_t cols, cudaStream_t stream) {
  const std::int64_t n = rows * cols;
  if (n <= 0) return cudaSuccess;
  if (cols % 8 == 0 && aligned16(pre) && aligned16(bias) && aligned16(act)) {
    bias_gelu_vec<<<grid_for(n / 8), kThreads, 0, stream>>>(
        reinterpret_cast<uint4*>(pre), reinterpret_cast<const uint4*>(bias),
        reinterpret_cast<uint4*>(act), n / 8, cols / 8);
  } else {
    bias_gelu_scalar<<<grid_for(n), kThreads, 0, stream>>>(pre, bias, act, n, cols);
  }
  return cudaGetLastError();
}

cudaError_t launch_gelu_backward(const bf16* dact, const bf16* pre, bf16* dpre, std::int64_t n,
                                 cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  std::int64_t done = 0;
  if (aligned16(dact) && aligned16(pre) && aligned16(dpre)) {
    const std::int64_t units = n / 8;
    if (units > 0) {
      gelu_backward_vec<<<grid_for(units), kThreads, 0, stream>>>(
          reinterpret_cast<const uint4*>(dact), reinterpret_cast<const uint4*>(pre),
          reinterpret_cast<uint4*>(dpre), units);
    }
    done = units * 8;
  }
  if (done < n) {
    gelu_backward_scalar<<<grid_for(n - done), kThreads, 0, stream>>>(dact + done, pre + done,
                                                                      dpre + done, n - done);
  }
  return cudaGetLastError();
}

cudaError_t launch_column_sum(const bf16* x, bf16* out, std::int64_t rows, std::int64_t cols,
                              cudaStream_t stream) {
  if (cols <= 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>((cols + kColX - 1) / kColX);
  column_sum_kernel<<<blocks, dim3(kColX, kColY), 0, stream>>>(x, out, rows < 0 ? 0 : rows, cols);
  return cudaGetLastError();
}

cudaError_t launch_residual_add(bf16* x, const bf16* y, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  std::int64_t done = 0;
  if (aligned16(x) && aligned16(y)) {
    const std::int64_t units = n / 8;
    if (units > 0) {
      residual_add_vec<<<grid_for(units), kThreads, 0, stream>>>(
          reinterpret_cast<uint4*>(x), reinterpret_cast<const uint4*>(y), units);
    }
    done = units * 8;
  }
  if (done < n) {
    residual_add_scalar<<<grid_for(n - done), kThreads, 0, stream>>>(x + done, y + done, n - done);
  }
  return cudaGetLastError();
}

cudaError_t launch_fill(bf16* x, float value, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const std::uint32_t bits = f32_to_bf16(value).bits;
  std::int64_t done = 0;
  if (aligned16(x)) {
    const std::int64_t units = n / 8;
    if (units > 0) {
      fill_vec<<<grid_for(units), kThreads, 0, stream>>>(reinterpret_cast<uint4*>(x), bits, units);
    }
    done = units * 8;
  }
  if (done < n) fill_scalar<<<grid_for(n - done), kThreads, 0, stream>>>(x + done, bits, n - done);
  return cudaGetLastError();
}

cudaError_t launch_sum(const bf16* x, std::int64_t n, float* partials, float* result,
                       cudaStream_t stream) {
  // n == 0 still runs: every partial becomes 0 and *result is written.
  sum_pass1<<<kSumBlocks, kThreads, 0, stream>>>(x, n < 0 ? 0 : n, partials);
  sum_pass2<<<1, kSumBlocks, 0, stream>>>(partials, result);
  return cudaGetLastError();
}

}  // namespace zob::cuda
