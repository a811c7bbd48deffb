// The CPU reference kernels: one free function per kernel of zob::Device, on plain host
// pointers. They are the numerical oracle for the CUDA and Level Zero backends, the kernels of
// the CPU device, and what the fake Level Zero driver runs by name - hence the plain signatures.
//
// Semantics are those documented in include/zob/device.hpp: bf16 in, fp32 arithmetic and
// accumulation, one rounding with zob::f32_to_bf16 at the store. Every kernel is deterministic
// and gives the same bits for any thread count of `pool`, except gemm, whose bits are fixed for
// a fixed OpenBLAS thread count. `pool` may be null (the calling thread does everything).
// Shape errors throw zob::DeviceError(runtime) naming the kernel and the shape.
#pragma once
#include <cstdint>

#include "zob/bf16.hpp"

namespace zob {
class ThreadPool;
struct GemmArgs;
}  // namespace zob

namespace zob::cpu {

// C[m,n] = op(A) * op(B), row-major. op(A) is [m,k]: A stored [m,k] (lda >= k) or, when
// trans_a, [k,m] (lda >= m). op(B) is [k,n]: B stored [k,n] (ldb >= n) or, when trans_b,
// [n,k] (ldb >= k). ldc >= n. Only the first n columns of each row of C are written.
// Operands are widened to fp32 (exactly) and multiplied with cblas_sgemm: Debian's OpenBLAS
// 0.3.21 declares cblas_sbgemm but does not export it.
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const bf16* a,
          std::int64_t lda, const bf16* b, std::int64_t ldb, bf16* c, std::int64_t ldc,
          ThreadPool* pool);
void gemm(const GemmArgs& args, ThreadPool* pool);  // the same, from device.hpp's struct

// The fp32 scratch gemm keeps per calling thread, at most (128 MiB): a larger product is computed
// in tiles of C and of the sum that fit it.
inline constexpr std::int64_t kGemmScratchFloats = std::int64_t{32} << 20;
// gemm with scratch_floats in place of kGemmScratchFloats (tests tile small products with it).
void gemm_bounded(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                  const bf16* a, std::int64_t lda, const bf16* b, std::int64_t ldb, bf16* c,
                  std::int64_t ldc, std::int64_t scratch_floats, ThreadPool* pool);

// out[t,:] = table[ids[t],:]. ids must be in [0, rows of table): not checked (no row count).
void embedding_forward(const std::int32_t* ids, const bf16* table, bf16* out, std::int64_t tokens,
                       std::int64_t hidden, ThreadPool* pool);

// Row unique_ids[i] of dtable = bf16(fp32 sum, in position order, of dout rows
// positions[offsets[i] .. offsets[i+1])). Other rows are not touched.
void embedding_backward(const std::int32_t* unique_ids, const std::int32_t* offsets,
                        const std::int32_t* positions, std::int64_t n_unique, const bf16* dout,
                        bf16* dtable, std::int64_t hidden, ThreadPool* pool);

// y[r,c] = bf16(y[r,c] + bias[c])
void bias_add(bf16* y, const bf16* bias, std::int64_t rows, std::int64_t cols, ThreadPool* pool);

// pre[r,c] = bf16(pre[r,c] + bias[c]); act[r,c] = bf16(gelu(pre[r,c])) of the rounded pre.
// gelu(x) = 0.5 x (1 + erf(x / sqrt 2)).
void bias_gelu_forward(bf16* pre, const bf16* bias, bf16* act, std::int64_t rows, std::int64_t cols,
                       ThreadPool* pool);

// dpre = bf16(dact * gelu'(pre)), gelu'(x) = 0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2/2)/sqrt(2 pi).
void gelu_backward(const bf16* dact, const bf16* pre, bf16* dpre, std::int64_t n, ThreadPool* pool);

// out[c] = bf16(sum over r of x[r,c]), rows in ascending order, fp32.
void column_sum(const bf16* x, bf16* out, std::int64_t rows, std::int64_t cols, ThreadPool* pool);

// x = bf16(x + y)
void residual_add(bf16* x, const bf16* y, std::int64_t n, ThreadPool* pool);

// x[i] = bf16(value)
void fill(bf16* x, float value, std::int64_t n, ThreadPool* pool);

// *result = fp32 sum of x: blocks of kSumBlock elements, each summed in a fixed lane pattern,
// then the block sums added in block order - the same bits for any thread count.
inline constexpr std::int64_t kSumBlock = 4096;
void sum(const bf16* x, std::int64_t n, float* result, ThreadPool* pool);

// Round to nearest even, NaN stays a quiet NaN: exactly zob::f32_to_bf16 / bf16_to_f32.
void cast_f32_to_bf16(const float* src, bf16* dst, std::int64_t n, ThreadPool* pool);
void cast_bf16_to_f32(const bf16* src, float* dst, std::int64_t n, ThreadPool* pool);

}  // namespace zob::cpu
