// The CUDA backend's generic strided tensor kernels (cuda_tensor_ops.hpp), shaped as PyTorch's
// elementwise_kernel and reductions are: the views arrive coalesced (CudaDevice merges what it
// can), every operand is walked with one chain of index divisions by the output's sizes (a
// division by a precomputed magic number, PyTorch's IntDivider, not the hardware's ~20-instruction
// sequence), and each thread handles kUnroll elements of a block's tile so their loads are in
// flight together. reduce_last over a contiguous last dimension: one warp per output (each lane
// a fixed strided subsequence, then a fixed butterfly); over a strided one with few terms (GQA's
// repeats) a thread per output in the CPU reference's order; with many (a column sum over every
// token) a 32 x kRowGroups tile per 32 outputs, each row group a fixed strided subsequence, the
// groups added in a fixed order: deterministic, and every SM busy where a thread per output would
// leave a column sum of 3,072 outputs on 12 blocks running 2,048 dependent loads each. The fp32
// expressions are those of the CPU reference (src/backends/cpu/cpu_tensor_ops.hpp,
// tensor_op_value), with __fmul_rn / __fadd_rn where nvcc would otherwise contract a product and
// an add into one fma, and __fsqrt_rn / __fdiv_rn for the AdamW ops' IEEE sqrt and divisions
// whatever -prec-sqrt / -prec-div say.
#include <cstdint>

#include <cuda_runtime.h>

#include "backends/cuda/cuda_tensor_ops.hpp"

namespace zob::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;  // elements per thread per tile
constexpr std::int64_t kMaxBlocks = std::int64_t{1} << 20;
constexpr int kRowGroups = 16;           // the column sum's row groups per tile
constexpr std::int64_t kManyTerms = 64;  // from here a strided sum uses the tiles

unsigned grid_for(std::int64_t units, std::int64_t per_block = kThreads) {
  std::int64_t blocks = (units + per_block - 1) / per_block;
  if (blocks < 1) blocks = 1;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return static_cast<unsigned>(blocks);
}

// n / d and n % d for 32-bit n < 2^31 by a multiply-high and a shift (Granlund and Montgomery;
// PyTorch's IntDivider<unsigned>): m = 2^32 (2^s - d) / d + 1 with 2^s >= d.
struct Divider {
  std::uint64_t d;  // the size
  std::uint32_t m, s;
};

// Sizes of 2^31 and more keep d (64-bit indices divide plainly); their magic is unused.
Divider make_divider(std::int64_t size) {
  const auto d = static_cast<std::uint32_t>(size < (std::int64_t{1} << 31) ? size : 1);
  std::uint32_t s = 0;
  while (s < 32 && (std::uint64_t{1} << s) < d) ++s;
  const std::uint64_t m = ((std::uint64_t{1} << 32) * ((std::uint64_t{1} << s) - d)) / d + 1;
  return {static_cast<std::uint64_t>(size), static_cast<std::uint32_t>(m), s};
}

// The coalesced iteration space of up to three operands: sizes (as dividers, innermost last)
// from dimension lo, and each operand's strides there.
constexpr int kOperands = 3;
struct Walk {
  int lo;
  Divider div[kViewDims];
  std::int64_t stride[kOperands][kViewDims];
};

// i / d.d: by the magic number in 32 bits; a plain division for the 64-bit indices of a tensor
// of 2^31 elements or more.
__device__ __forceinline__ std::uint32_t quotient(std::uint32_t i, const Divider& d) {
  return (__umulhi(i, d.m) + i) >> d.s;
}
__device__ __forceinline__ std::uint64_t quotient(std::uint64_t i, const Divider& d) {
  return i / d.d;
}

// Element offsets in every operand of linear index i over the walk's dimensions [lo, hi).
template <int N, typename I>
__device__ __forceinline__ void offsets_of(const Walk& w, I i, int hi, std::int64_t (&at)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) at[k] = 0;
#pragma unroll
  for (int d = kViewDims - 1; d >= 0; --d) {
    if (d < w.lo || d >= hi) continue;
    I q = 0, r = i;  // the outermost dimension needs no division: i is below its size
    if (d > w.lo) {
      q = quotient(i, w.div[d]);
      r = i - q * static_cast<I>(w.div[d].d);
    }
#pragma unroll
    for (int k = 0; k < N; ++k) at[k] += static_cast<std::int64_t>(r) * w.stride[k][d];
    i = q;
  }
}

__device__ __forceinline__ float load(const void* p, int f32, std::int64_t at) {
  if (f32 != 0) return static_cast<const float*>(p)[at];
  const std::uint16_t bits = static_cast<const std::uint16_t*>(p)[at];
  return __uint_as_float(unsigned{bits} << 16);
}

// Bit-exact with zob::f32_to_bf16: NaN keeps its sign and payload.
__device__ __forceinline__ void store(void* p, int f32, std::int64_t at, float f) {
  if (f32 != 0) {
    static_cast<float*>(p)[at] = f;
    return;
  }
  std::uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    u = (u >> 16) | 0x0040u;
  } else {
    u += 0x7fffu + ((u >> 16) & 1u);
    u >>= 16;
  }
  static_cast<std::uint16_t*>(p)[at] = static_cast<std::uint16_t>(u);
}

// zob::ElementwiseOp, in its order; o: out's element before the store (addcmul, addcdiv).
__device__ __forceinline__ float op_value(std::int32_t op, float a, float b, float scalar,
                                          float o) {
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
    case 12: {  // lerp
      const float d = __fsub_rn(b, a);
      return fabsf(scalar) < 0.5f ? __fadd_rn(a, __fmul_rn(scalar, d))
                                  : __fsub_rn(b, __fmul_rn(d, __fsub_rn(1.0f, scalar)));
    }
    case 13: return __fsqrt_rn(a);
    case 14: return __fdiv_rn(a, scalar);
    case 15: return __fadd_rn(o, __fmul_rn(scalar, __fmul_rn(a, b)));
    case 16: return __fadd_rn(o, __fmul_rn(scalar, __fdiv_rn(a, b)));
    default: return 0.0f;
  }
}

// The operands' data and dtypes.
struct Operands {
  void* out;
  const void* a;
  const void* b;
  int out_f32, a_f32, b_f32;
};

// What an op reads: a; a and b; a, b and out (addcmul, addcdiv: zob::reads_out).
enum Reads { kReadsA = 1, kReadsAB = 2, kReadsABOut = 3 };

// A block's tile is kUnroll * kThreads elements; thread t takes t, t + kThreads, ... of it, so
// each of its kUnroll loads is a coalesced warp access and all are issued before any store.
template <int R, typename I>
__global__ void elementwise_kernel(std::int32_t op, Operands o, Walk w, float scalar, I n) {
  const I tile = kUnroll * kThreads;
  for (I base = static_cast<I>(blockIdx.x) * tile; base < n;
       base += static_cast<I>(gridDim.x) * tile) {
    float x[kUnroll], y[kUnroll], z[kUnroll];
    std::int64_t out_at[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const I i = base + threadIdx.x + u * kThreads;
      if (i >= n) continue;
      std::int64_t at[kOperands];
      offsets_of(w, i, kViewDims, at);
      out_at[u] = at[0];
      x[u] = load(o.a, o.a_f32, at[1]);
      y[u] = R >= kReadsAB ? load(o.b, o.b_f32, at[2]) : 0.0f;
      z[u] = R == kReadsABOut ? load(o.out, o.out_f32, at[0]) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const I i = base + threadIdx.x + u * kThreads;
      if (i < n) store(o.out, o.out_f32, out_at[u], op_value(op, x[u], y[u], scalar, z[u]));
    }
  }
}

// cat_last (op 11): the walk covers the leading dimensions [lo, last); element i of out takes
// column k = i % width from a (k < na) or b (k - na).
template <typename I>
__global__ void cat_last_kernel(Operands o, Walk w, Divider width, I na, std::int64_t out_last,
                                std::int64_t a_last, std::int64_t b_last, I n) {
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    const I rest = quotient(i, width);
    const I k = i - rest * static_cast<I>(width.d);
    std::int64_t at[kOperands];
    offsets_of(w, rest, kViewDims - 1, at);
    const bool first = k < na;
    const float x = first ? load(o.a, o.a_f32, at[1] + static_cast<std::int64_t>(k) * a_last)
                          : load(o.b, o.b_f32, at[2] + static_cast<std::int64_t>(k - na) * b_last);
    store(o.out, o.out_f32, at[0] + static_cast<std::int64_t>(k) * out_last, x);
  }
}

// The reductions' terms: n of them, `step` apart, from each output's base offset in `in`.
struct Terms {
  std::int64_t n, step;
};

// One warp per output: lane l sums j = l, l+32, ... ascending, then a butterfly.
template <typename I>
__global__ void reduce_rows_kernel(Operands o, Walk w, Terms t, float scale, I outputs) {
  const int lane = threadIdx.x & 31;
  const I warps = static_cast<I>(gridDim.x) * (blockDim.x / 32);
  for (I i = static_cast<I>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32; i < outputs;
       i += warps) {
    std::int64_t at[2];
    offsets_of(w, i, kViewDims - 1, at);
    float acc = 0.0f;
    for (std::int64_t j = lane; j < t.n; j += 32) acc += load(o.a, o.a_f32, at[1] + j * t.step);
    for (int offset = 16; offset > 0; offset >>= 1)
      acc += __shfl_xor_sync(0xffffffffu, acc, offset);
    if (lane == 0) store(o.out, o.out_f32, at[0], __fmul_rn(scale, acc));
  }
}

// One thread per output, j ascending (the CPU reference's order): a strided last dimension of
// few terms (GQA's repeats), where neighbouring outputs are neighbours in memory and a warp's
// loads stay coalesced.
template <typename I>
__global__ void reduce_few_kernel(Operands o, Walk w, Terms t, float scale, I outputs) {
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < outputs;
       i += static_cast<I>(gridDim.x) * blockDim.x) {
    std::int64_t at[2];
    offsets_of(w, i, kViewDims - 1, at);
    float acc = 0.0f;
    for (std::int64_t j = 0; j < t.n; ++j) acc += load(o.a, o.a_f32, at[1] + j * t.step);
    store(o.out, o.out_f32, at[0], __fmul_rn(scale, acc));
  }
}

// A strided last dimension of many terms (a column sum): block (32, kRowGroups) per 32
// neighbouring outputs; row group g sums j = g, g + kRowGroups, ... ascending, then thread
// (x, 0) adds the groups' partials in order 0, 1, ...: a fixed order on every run.
template <typename I>
__global__ void reduce_columns_kernel(Operands o, Walk w, Terms t, float scale, I outputs) {
  __shared__ float partial[kRowGroups][33];
  for (I first = static_cast<I>(blockIdx.x) * 32; first < outputs;
       first += static_cast<I>(gridDim.x) * 32) {
    const I i = first + threadIdx.x;
    std::int64_t at[2] = {0, 0};
    if (i < outputs) offsets_of(w, i, kViewDims - 1, at);
    float acc = 0.0f;
    if (i < outputs)
      for (std::int64_t j = threadIdx.y; j < t.n; j += kRowGroups)
        acc += load(o.a, o.a_f32, at[1] + j * t.step);
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && i < outputs) {
      float sum = partial[0][threadIdx.x];
      for (int g = 1; g < kRowGroups; ++g) sum += partial[g][threadIdx.x];
      store(o.out, o.out_f32, at[0], __fmul_rn(scale, sum));
    }
    __syncthreads();
  }
}

std::int64_t elements(const View& v) {
  std::int64_t n = 1;
  for (std::int64_t s : v.size) n *= s;
  return n;
}

// The walk over `shape`'s sizes in [lo, hi) with each view's strides.
Walk make_walk(const View& shape, const View* const* views, int count, int lo, int hi) {
  Walk w{};
  w.lo = lo;
  for (int d = 0; d < kViewDims; ++d) {
    w.div[d] = make_divider(d >= lo && d < hi ? shape.size[d] : 1);
    for (int k = 0; k < count; ++k) w.stride[k][d] = views[k]->stride[d];
  }
  return w;
}

// 32-bit indices (and magic-number divisions) where every index fits below 2^31.
bool fits_32(std::int64_t n) { return n < (std::int64_t{1} << 31); }

template <typename I>
void elementwise_as(std::int32_t op, const Operands& o, const View& out, const View& a,
                    const View& b, float scalar, int lo, std::int64_t n, cudaStream_t stream) {
  const View* views[kOperands] = {&out, &a, &b};
  if (op == 11) {
    const int last = kViewDims - 1;
    const Walk w = make_walk(out, views, kOperands, lo, last);
    cat_last_kernel<I><<<grid_for(n), kThreads, 0, stream>>>(
        o, w, make_divider(out.size[last]), static_cast<I>(a.size[last]), out.stride[last],
        a.stride[last], b.stride[last], static_cast<I>(n));
    return;
  }
  const Walk w = make_walk(out, views, kOperands, lo, kViewDims);
  const unsigned grid = grid_for(n, std::int64_t{kUnroll} * kThreads);
  const auto count = static_cast<I>(n);
  if (op == 15 || op == 16) {  // zob::reads_out
    elementwise_kernel<kReadsABOut, I><<<grid, kThreads, 0, stream>>>(op, o, w, scalar, count);
  } else if (op == 2 || op == 3 || op == 10 || op == 12) {  // zob::is_binary
    elementwise_kernel<kReadsAB, I><<<grid, kThreads, 0, stream>>>(op, o, w, scalar, count);
  } else {
    elementwise_kernel<kReadsA, I><<<grid, kThreads, 0, stream>>>(op, o, w, scalar, count);
  }
}

template <typename I>
void reduce_as(const Operands& o, const View& out, const View& in, float scale, int lo,
               std::int64_t outputs, cudaStream_t stream) {
  const int last = kViewDims - 1;
  const View* views[2] = {&out, &in};
  const Walk w = make_walk(out, views, 2, lo, last);
  const Terms t{in.size[last], in.stride[last]};
  const auto count = static_cast<I>(outputs);
  if (t.step == 1) {
    reduce_rows_kernel<I><<<grid_for(outputs * 32), kThreads, 0, stream>>>(o, w, t, scale, count);
  } else if (t.n < kManyTerms) {
    reduce_few_kernel<I><<<grid_for(outputs), kThreads, 0, stream>>>(o, w, t, scale, count);
  } else {
    reduce_columns_kernel<I>
        <<<grid_for(outputs, 32), dim3(32, kRowGroups), 0, stream>>>(o, w, t, scale, count);
  }
}

}  // namespace

cudaError_t launch_elementwise(std::int32_t op, const View& out, const View& a, const View& b,
                               float scalar, int lo, cudaStream_t stream) {
  const std::int64_t n = elements(out);
  if (n <= 0) return cudaSuccess;
  const Operands o{const_cast<void*>(out.data), a.data, b.data, out.f32, a.f32, b.f32};
  // The tile loop's last index reaches n + a grid's tile: 32 bits below 2^30 elements.
  if (n < (std::int64_t{1} << 30)) {
    elementwise_as<std::uint32_t>(op, o, out, a, b, scalar, lo, n, stream);
  } else {
    elementwise_as<std::uint64_t>(op, o, out, a, b, scalar, lo, n, stream);
  }
  return cudaGetLastError();
}

cudaError_t launch_reduce_last(const View& out, const View& in, float scale, int lo,
                               cudaStream_t stream) {
  const std::int64_t outputs = elements(out);
  if (outputs <= 0) return cudaSuccess;
  const Operands o{const_cast<void*>(out.data), in.data, nullptr, out.f32, in.f32, 0};
  if (fits_32(outputs * 32)) {
    reduce_as<std::uint32_t>(o, out, in, scale, lo, outputs, stream);
  } else {
    reduce_as<std::uint64_t>(o, out, in, scale, lo, outputs, stream);
  }
  return cudaGetLastError();
}

}  // namespace zob::cuda
