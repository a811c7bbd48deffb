// The decoder-transformer kernels of the CUDA backend (--model). Deterministic like the rest of
// the backend: no atomics; every row reduction is one block with a fixed shape (each thread a
// fixed strided subsequence, then warp shuffles and the warps' partials in a fixed order), so
// the bits never depend on scheduling. The fp32 evaluation order follows the CPU reference
// (src/backends/cpu/cpu_decoder_kernels.hpp) operation for operation; products that the
// reference rounds before an add are written with __fmul_rn / __fadd_rn / __fsub_rn, because
// nvcc would otherwise contract them into one fma with another rounding. What still differs
// from the reference: the order of the row sums (rmsnorm, softmax), expf (CUDA's differs from
// glibc's by an ulp), and cos / sin in double (CUDA's are within 2 double ulps).
#include <cstdint>

#include <cuda_runtime.h>

#include "backends/cuda/cuda_model_kernels.hpp"

namespace zob::cuda {
namespace {

constexpr int kRowThreads = 256;  // one block per row: 8 warps
constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = std::int64_t{1} << 20;

unsigned grid_for(std::int64_t units) {
  std::int64_t blocks = (units + kThreads - 1) / kThreads;
  if (blocks < 1) blocks = 1;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return static_cast<unsigned>(blocks);
}

__device__ __forceinline__ float bf2f(const bf16* p) {
  return __uint_as_float(unsigned{p->bits} << 16);
}

// Bit-exact with zob::f32_to_bf16 (as in cuda_kernels.cu): NaN keeps its sign and payload.
__device__ __forceinline__ void st_bf16(bf16* p, float f) {
  std::uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    u = (u >> 16) | 0x0040u;
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    u >>= 16;
  }
  p->bits = static_cast<std::uint16_t>(u);
}

#define ZOB_GRID_STRIDE(i, count)                                                         \
  for (std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < (count); \
       i += std::int64_t{gridDim.x} * blockDim.x)

// ---- block reductions: fixed shape and order, the same value in every thread ----

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;  // a butterfly: every lane adds the same pairs (a + b == b + a), same bits
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// `shared` holds kRowThreads / 32 floats; it may be reused after the call returns.
template <bool kMax>
__device__ float block_reduce(float v, float* shared) {
  constexpr int kWarps = kRowThreads / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = kMax ? warp_max(v) : warp_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float t = lane < kWarps ? shared[lane] : (kMax ? -INFINITY : 0.0f);
  t = kMax ? warp_max(t) : warp_sum(t);  // every warp folds the partials the same way
  __syncthreads();                       // all reads of `shared` done before its reuse
  return t;
}

// ---- RMSNorm ----

// One block per row: ss = sum of x^2; rstd = 1 / sqrtf(ss / cols + eps); y = w * (x * rstd).
__global__ void rmsnorm_forward_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w,
                                       bf16* __restrict__ y, float* __restrict__ rstd,
                                       std::int64_t cols, float eps) {
  __shared__ float shared[kRowThreads / 32];
  const std::int64_t r = blockIdx.x;
  const bf16* xr = x + r * cols;
  float ss = 0.0f;
  for (std::int64_t c = threadIdx.x; c < cols; c += kRowThreads) {
    const float v = bf2f(xr + c);
    ss = __fadd_rn(ss, __fmul_rn(v, v));
  }
  ss = block_reduce<false>(ss, shared);
  const float rs = 1.0f / sqrtf(ss / static_cast<float>(cols) + eps);
  if (threadIdx.x == 0) rstd[r] = rs;
  for (std::int64_t c = threadIdx.x; c < cols; c += kRowThreads) {
    st_bf16(y + r * cols + c, bf2f(w + c) * (bf2f(xr + c) * rs));
  }
}

// dx, one block per row: dot = sum of g * xhat; dx = rstd * (g - xhat * (dot / cols)).
__global__ void rmsnorm_backward_dx_kernel(const bf16* __restrict__ dy, const bf16* __restrict__ x,
                                           const bf16* __restrict__ w,
                                           const float* __restrict__ rstd, bf16* __restrict__ dx,
                                           std::int64_t cols) {
  __shared__ float shared[kRowThreads / 32];
  const std::int64_t r = blockIdx.x;
  const std::int64_t base = r * cols;
  const float rs = rstd[r];
  float dot = 0.0f;
  for (std::int64_t c = threadIdx.x; c < cols; c += kRowThreads) {
    const float g = bf2f(dy + base + c) * bf2f(w + c);
    dot = __fadd_rn(dot, __fmul_rn(g, bf2f(x + base + c) * rs));
  }
  dot = block_reduce<false>(dot, shared);
  const float mean = dot / static_cast<float>(cols);
  for (std::int64_t c = threadIdx.x; c < cols; c += kRowThreads) {
    const float g = bf2f(dy + base + c) * bf2f(w + c);
    const float xhat = bf2f(x + base + c) * rs;
    st_bf16(dx + base + c, rs * __fsub_rn(g, __fmul_rn(xhat, mean)));
  }
}

// dweight: a block owns 32 adjacent columns (a warp reads 64 contiguous bytes of a row); its 16
// thread rows take rows y, y + 16, ... in order, then thread row 0 adds the 16 partials in
// order - the shape of column_sum in cuda_kernels.cu.
constexpr int kColX = 32;
constexpr int kColY = 16;
__global__ void rmsnorm_backward_dw_kernel(const bf16* __restrict__ dy, const bf16* __restrict__ x,
                                           const float* __restrict__ rstd,
                                           bf16* __restrict__ dweight, std::int64_t rows,
                                           std::int64_t cols) {
  __shared__ float partial[kColY][kColX + 1];
  const std::int64_t c = std::int64_t{blockIdx.x} * kColX + threadIdx.x;
  float acc = 0.0f;
  if (c < cols) {
    for (std::int64_t r = threadIdx.y; r < rows; r += kColY) {
      const std::int64_t i = r * cols + c;
      acc = __fadd_rn(acc, __fmul_rn(bf2f(dy + i), bf2f(x + i) * rstd[r]));
    }
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float s = 0.0f;
    for (int k = 0; k < kColY; ++k) s += partial[k][threadIdx.x];
    st_bf16(dweight + c, s);
  }
}

// ---- rotary embedding and the head permutes ----

// cos and sin of position s at frequency index d, as the reference: in double, then cast.
__device__ __forceinline__ void rope_cos_sin(std::int64_t s, std::int64_t d, std::int64_t head_dim,
                                             double theta, float* c, float* sn) {
  const double inv_freq = pow(theta, -2.0 * static_cast<double>(d) / static_cast<double>(head_dim));
  double sd = 0.0, cd = 0.0;
  sincos(static_cast<double>(s) * inv_freq, &sd, &cd);
  *c = static_cast<float>(cd);
  *sn = static_cast<float>(sd);
}

// One thread per (b, s, h, d) of the source, d < width (head_dim/2 when rotating, else
// head_dim): reads x[b, s, h, :], writes out[b, h*repeat + k, s, :] for k < repeat.
template <bool kRotate>
__global__ void to_heads_kernel(const bf16* __restrict__ x, bf16* __restrict__ out,
                                std::int64_t batch, std::int64_t seq, std::int64_t heads,
                                std::int64_t head_dim, std::int64_t repeat, double theta) {
  const std::int64_t width = kRotate ? head_dim / 2 : head_dim;
  const std::int64_t total = batch * seq * heads * width;
  ZOB_GRID_STRIDE(i, total) {
    const std::int64_t d = i % width;
    std::int64_t t = i / width;
    const std::int64_t h = t % heads;
    t /= heads;
    const std::int64_t s = t % seq, b = t / seq;
    const bf16* src = x + ((b * seq + s) * heads + h) * head_dim;
    bf16* dst = out + ((b * heads + h) * repeat * seq + s) * head_dim;  // head h*repeat
    const std::int64_t head_stride = seq * head_dim;
    if constexpr (kRotate) {
      float c, sn;
      rope_cos_sin(s, d, head_dim, theta, &c, &sn);
      const float x0 = bf2f(src + d), x1 = bf2f(src + d + width);
      const float y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn));
      const float y1 = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, sn));
      for (std::int64_t k = 0; k < repeat; ++k) {
        st_bf16(dst + k * head_stride + d, y0);
        st_bf16(dst + k * head_stride + d + width, y1);
      }
    } else {
      const bf16 v = src[d];
      for (std::int64_t k = 0; k < repeat; ++k) dst[k * head_stride + d] = v;
    }
  }
}

// The adjoint: one thread per (b, s, h, d) of the token-major output; sums the `repeat`
// destination heads in order, then rotates back (sin -> -sin).
template <bool kRotate>
__global__ void from_heads_kernel(const bf16* __restrict__ g, bf16* __restrict__ out,
                                  std::int64_t batch, std::int64_t seq, std::int64_t heads,
                                  std::int64_t head_dim, std::int64_t repeat, double theta) {
  const std::int64_t width = kRotate ? head_dim / 2 : head_dim;
  const std::int64_t total = batch * seq * heads * width;
  ZOB_GRID_STRIDE(i, total) {
    const std::int64_t d = i % width;
    std::int64_t t = i / width;
    const std::int64_t h = t % heads;
    t /= heads;
    const std::int64_t s = t % seq, b = t / seq;
    const bf16* src = g + ((b * heads + h) * repeat * seq + s) * head_dim;
    bf16* dst = out + ((b * seq + s) * heads + h) * head_dim;
    const std::int64_t head_stride = seq * head_dim;
    float a0 = 0.0f, a1 = 0.0f;
    for (std::int64_t k = 0; k < repeat; ++k) {
      a0 += bf2f(src + k * head_stride + d);
      if constexpr (kRotate) a1 += bf2f(src + k * head_stride + d + width);
    }
    if constexpr (kRotate) {
      float c, sn;
      rope_cos_sin(s, d, head_dim, theta, &c, &sn);
      st_bf16(dst + d, __fadd_rn(__fmul_rn(a0, c), __fmul_rn(a1, sn)));
      st_bf16(dst + d + width, __fsub_rn(__fmul_rn(a1, c), __fmul_rn(a0, sn)));
    } else {
      st_bf16(dst + d, a0);
    }
  }
}

// ---- causal softmax: one block per row of [n * seq, seq]; row i of its matrix sees j <= i ----

// Not __restrict__: probs may be scores. Each thread reads then writes only its own columns,
// and every read of the row happens before the block's last reduction returns.
__global__ void causal_softmax_forward_kernel(const bf16* scores, bf16* probs, std::int64_t seq,
                                              float scale) {
  __shared__ float shared[kRowThreads / 32];
  const std::int64_t row = blockIdx.x;
  const std::int64_t i = row % seq;
  const bf16* s = scores + row * seq;
  bf16* p = probs + row * seq;
  float m = -INFINITY;
  for (std::int64_t j = threadIdx.x; j <= i; j += kRowThreads)
    m = fmaxf(m, __fmul_rn(scale, bf2f(s + j)));
  m = block_reduce<true>(m, shared);
  float sum = 0.0f;
  for (std::int64_t j = threadIdx.x; j <= i; j += kRowThreads) {
    sum += expf(__fsub_rn(__fmul_rn(scale, bf2f(s + j)), m));
  }
  sum = block_reduce<false>(sum, shared);
  for (std::int64_t j = threadIdx.x; j < seq; j += kRowThreads) {
    const float e = j <= i ? expf(__fsub_rn(__fmul_rn(scale, bf2f(s + j)), m)) / sum : 0.0f;
    st_bf16(p + j, e);
  }
}

// dot = sum_{j <= i} p * dp; ds = scale * (p * (dp - dot)); ds = 0 for j > i. dscores may be
// dprobs (same argument as above).
__global__ void causal_softmax_backward_kernel(const bf16* probs, const bf16* dprobs, bf16* dscores,
                                               std::int64_t seq, float scale) {
  __shared__ float shared[kRowThreads / 32];
  const std::int64_t row = blockIdx.x;
  const std::int64_t i = row % seq;
  const bf16* p = probs + row * seq;
  const bf16* dp = dprobs + row * seq;
  bf16* ds = dscores + row * seq;
  float dot = 0.0f;
  for (std::int64_t j = threadIdx.x; j <= i; j += kRowThreads) {
    dot = __fadd_rn(dot, __fmul_rn(bf2f(p + j), bf2f(dp + j)));
  }
  dot = block_reduce<false>(dot, shared);
  for (std::int64_t j = threadIdx.x; j < seq; j += kRowThreads) {
    const float v = j <= i ? scale * (bf2f(p + j) * (bf2f(dp + j) - dot)) : 0.0f;
    st_bf16(ds + j, v);
  }
}

// ---- the gated MLP's SiLU ----

__global__ void silu_mul_forward_kernel(const bf16* __restrict__ gate, const bf16* __restrict__ up,
                                        bf16* __restrict__ out, std::int64_t n) {
  ZOB_GRID_STRIDE(i, n) {
    const float x = bf2f(gate + i);
    st_bf16(out + i, (x / (1.0f + expf(-x))) * bf2f(up + i));
  }
}

__global__ void silu_mul_backward_kernel(const bf16* __restrict__ dout,
                                         const bf16* __restrict__ gate, const bf16* __restrict__ up,
                                         bf16* __restrict__ dgate, bf16* __restrict__ dup,
                                         std::int64_t n) {
  ZOB_GRID_STRIDE(i, n) {
    const float x = bf2f(gate + i), d = bf2f(dout + i);
    const float e = 1.0f + expf(-x);
    const float s = 1.0f / e;
    const float dsilu = s * __fadd_rn(1.0f, __fmul_rn(x, 1.0f - s));
    st_bf16(dgate + i, __fmul_rn(d, bf2f(up + i)) * dsilu);
    st_bf16(dup + i, d * (x / e));
  }
}

}  // namespace

cudaError_t launch_rmsnorm_forward(const bf16* x, const bf16* weight, bf16* y, float* rstd,
                                   std::int64_t rows, std::int64_t cols, float eps,
                                   cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  rmsnorm_forward_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(x, weight, y,
                                                                                  rstd, cols, eps);
  return cudaGetLastError();
}

cudaError_t launch_rmsnorm_backward(const bf16* dy, const bf16* x, const bf16* weight,
                                    const float* rstd, bf16* dx, bf16* dweight, std::int64_t rows,
                                    std::int64_t cols, cudaStream_t stream) {
  if (cols <= 0) return cudaSuccess;
  if (rows > 0) {
    rmsnorm_backward_dx_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
        dy, x, weight, rstd, dx, cols);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  const auto blocks = static_cast<unsigned>((cols + kColX - 1) / kColX);
  rmsnorm_backward_dw_kernel<<<blocks, dim3(kColX, kColY), 0, stream>>>(dy, x, rstd, dweight,
                                                                        rows < 0 ? 0 : rows, cols);
  return cudaGetLastError();
}

cudaError_t launch_to_heads(const bf16* x, bf16* out, std::int64_t batch, std::int64_t seq,
                            std::int64_t heads, std::int64_t head_dim, std::int64_t repeat,
                            double theta, cudaStream_t stream) {
  const std::int64_t total = batch * seq * heads * head_dim;
  if (batch <= 0 || seq <= 0 || heads <= 0 || head_dim <= 0 || repeat <= 0) return cudaSuccess;
  if (theta > 0) {
    to_heads_kernel<true><<<grid_for(total / 2), kThreads, 0, stream>>>(x, out, batch, seq, heads,
                                                                        head_dim, repeat, theta);
  } else {
    to_heads_kernel<false><<<grid_for(total), kThreads, 0, stream>>>(x, out, batch, seq, heads,
                                                                     head_dim, repeat, theta);
  }
  return cudaGetLastError();
}

cudaError_t launch_from_heads(const bf16* g, bf16* out, std::int64_t batch, std::int64_t seq,
                              std::int64_t heads, std::int64_t head_dim, std::int64_t repeat,
                              double theta, cudaStream_t stream) {
  const std::int64_t total = batch * seq * heads * head_dim;
  if (batch <= 0 || seq <= 0 || heads <= 0 || head_dim <= 0 || repeat <= 0) return cudaSuccess;
  if (theta > 0) {
    from_heads_kernel<true><<<grid_for(total / 2), kThreads, 0, stream>>>(g, out, batch, seq, heads,
                                                                          head_dim, repeat, theta);
  } else {
    from_heads_kernel<false><<<grid_for(total), kThreads, 0, stream>>>(g, out, batch, seq, heads,
                                                                       head_dim, repeat, theta);
  }
  return cudaGetLastError();
}

cudaError_t launch_causal_softmax_forward(const bf16* scores, bf16* probs, std::int64_t n,
                                          std::int64_t seq, float scale, cudaStream_t stream) {
  if (n <= 0 || seq <= 0) return cudaSuccess;
  causal_softmax_forward_kernel<<<static_cast<unsigned>(n * seq), kRowThreads, 0, stream>>>(
      scores, probs, seq, scale);
  return cudaGetLastError();
}

cudaError_t launch_causal_softmax_backward(const bf16* probs, const bf16* dprobs, bf16* dscores,
                                           std::int64_t n, std::int64_t seq, float scale,
                                           cudaStream_t stream) {
  if (n <= 0 || seq <= 0) return cudaSuccess;
  causal_softmax_backward_kernel<<<static_cast<unsigned>(n * seq), kRowThreads, 0, stream>>>(
      probs, dprobs, dscores, seq, scale);
  return cudaGetLastError();
}

cudaError_t launch_silu_mul_forward(const bf16* gate, const bf16* up, bf16* out, std::int64_t n,
                                    cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  silu_mul_forward_kernel<<<grid_for(n), kThreads, 0, stream>>>(gate, up, out, n);
  return cudaGetLastError();
}

cudaError_t launch_silu_mul_backward(const bf16* dout, const bf16* gate, const bf16* up,
                                     bf16* dgate, bf16* dup, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  silu_mul_backward_kernel<<<grid_for(n), kThreads, 0, stream>>>(dout, gate, up, dgate, dup, n);
  return cudaGetLastError();
}

}  // namespace zob::cuda
