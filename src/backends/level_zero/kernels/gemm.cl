// C[M,N] = op(A) op(B), bf16 in/out, fp32 accumulation in k order (zob::GemmArgs semantics).
// Register-tiled for a GPU: a 16x16 work-group computes a 64x64 block of C, each work-item a
// 4x4 block held in registers (16 outputs per work-item: every value read from local memory
// feeds 4 multiply-adds). Work-item (tx, ty) owns rows ty + 16i and columns tx + 16j, so the
// 16 work-items of a row of the group (one SIMD16 sub-group on Intel GPUs) read 16 adjacent
// floats of the B tile and one broadcast float of the A tile per step, without bank conflicts.
// Tiles of op(A) (64 x 16) and op(B) (16 x 64) are staged in local memory as fp32; each
// work-item loads 4 elements of each, in the order that makes adjacent work-items read
// adjacent addresses for the transpose case at hand. Every output still sums k in order.
#include "bf16.h"

#define GEMM_WG 16                  // work-group is GEMM_WG x GEMM_WG
#define GEMM_RT 4                   // outputs per work-item along each dimension (written out below)
#define GEMM_BT (GEMM_WG * GEMM_RT)  // 64: the block of C per work-group
#define GEMM_KT 16                  // k per local-memory tile

// Element (r, c) of op(X) for a row-major X with leading dimension ld, 0 outside [rows, cols).
inline float load_op(global const ushort* x, long ld, int trans, long r, long c, long rows,
                     long cols) {
  if (r >= rows || c >= cols) return 0.0f;
  return bf16_to_f32(trans ? x[c * ld + r] : x[r * ld + c]);
}

// Row `row` of C at columns col, col + 16, col + 32, col + 48 (those inside the matrix).
inline void store_row(global ushort* c, long ldc, long m, long n, long row, long col, float v0,
                      float v1, float v2, float v3) {
  if (row >= m) return;
  global ushort* p = c + row * ldc + col;
  if (col < n) p[0] = f32_to_bf16(v0);
  if (col + 16 < n) p[16] = f32_to_bf16(v1);
  if (col + 32 < n) p[32] = f32_to_bf16(v2);
  if (col + 48 < n) p[48] = f32_to_bf16(v3);
}

// The work-group's 64x64 block of C. The tiles live in the calling kernel (OpenCL 1.2 allows
// local variables only at kernel scope): ta[kk][r] = op(A)[row0 + r, k0 + kk], tb[kk][c] =
// op(B)[k0 + kk, col0 + c]. always_inline: a C99 `inline` function that clang leaves as a
// call has no definition in the module (PoCL: "Cannot find symbol gemm_block").
__attribute__((always_inline)) inline void gemm_block(int trans_a, int trans_b, long m, long n, long k,
                       global const ushort* a, long lda, global const ushort* b, long ldb,
                       global ushort* c, long ldc, local float (*ta)[GEMM_BT + 1],
                       local float (*tb)[GEMM_BT + 1]) {
  const int tx = (int)get_local_id(0), ty = (int)get_local_id(1);
  const int tid = ty * GEMM_WG + tx;
  const long row0 = (long)get_group_id(1) * GEMM_BT, col0 = (long)get_group_id(0) * GEMM_BT;
  // The 4x4 accumulators as named scalars (written out, not a loop: clang runs with
  // -fno-unroll-loops for llvm-spirv-15's sake, and an array indexed in a loop would live in
  // private memory instead of registers).
  float c00 = 0, c01 = 0, c02 = 0, c03 = 0, c10 = 0, c11 = 0, c12 = 0, c13 = 0;
  float c20 = 0, c21 = 0, c22 = 0, c23 = 0, c30 = 0, c31 = 0, c32 = 0, c33 = 0;
  for (long k0 = 0; k0 < k; k0 += GEMM_KT) {
    for (int l = 0; l < GEMM_RT; ++l) {
      const int idx = tid + l * GEMM_WG * GEMM_WG;  // 0 .. 1023 over the 64 x 16 tile
      // Two splittings of idx (powers of two: shifts and masks; llvm-spirv-15 cannot
      // translate the `freeze` that a select between two divisions turns into).
      const int lo16 = idx & (GEMM_KT - 1), hi16 = idx >> 4;   // 16 x 64
      const int lo64 = idx & (GEMM_BT - 1), hi64 = idx >> 6;   // 64 x 16
      // op(A) = A: adjacent work-items take adjacent k of one row; op(A) = A^T: adjacent rows.
      if (trans_a) ta[hi64][lo64] = load_op(a, lda, 1, row0 + lo64, k0 + hi64, m, k);
      else ta[lo16][hi16] = load_op(a, lda, 0, row0 + hi16, k0 + lo16, m, k);
      // op(B) = B: adjacent work-items take adjacent columns; op(B) = B^T: adjacent k.
      if (trans_b) tb[lo16][hi16] = load_op(b, ldb, 1, k0 + lo16, col0 + hi16, k, n);
      else tb[hi64][lo64] = load_op(b, ldb, 0, k0 + hi64, col0 + lo64, k, n);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int kk = 0; kk < GEMM_KT; ++kk) {
      const float a0 = ta[kk][ty], a1 = ta[kk][ty + 16], a2 = ta[kk][ty + 32], a3 = ta[kk][ty + 48];
      const float b0 = tb[kk][tx], b1 = tb[kk][tx + 16], b2 = tb[kk][tx + 32], b3 = tb[kk][tx + 48];
      c00 += a0 * b0; c01 += a0 * b1; c02 += a0 * b2; c03 += a0 * b3;
      c10 += a1 * b0; c11 += a1 * b1; c12 += a1 * b2; c13 += a1 * b3;
      c20 += a2 * b0; c21 += a2 * b1; c22 += a2 * b2; c23 += a2 * b3;
      c30 += a3 * b0; c31 += a3 * b1; c32 += a3 * b2; c33 += a3 * b3;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const long r = row0 + ty, q = col0 + tx;
  store_row(c, ldc, m, n, r, q, c00, c01, c02, c03);
  store_row(c, ldc, m, n, r + 16, q, c10, c11, c12, c13);
  store_row(c, ldc, m, n, r + 32, q, c20, c21, c22, c23);
  store_row(c, ldc, m, n, r + 48, q, c30, c31, c32, c33);
}

__attribute__((reqd_work_group_size(GEMM_WG, GEMM_WG, 1)))
kernel void gemm(int trans_a, int trans_b, long m, long n, long k,
                 global const ushort* a, long lda, global const ushort* b, long ldb,
                 global ushort* c, long ldc) {
  local float ta[GEMM_KT][GEMM_BT + 1];
  local float tb[GEMM_KT][GEMM_BT + 1];
  gemm_block(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, ta, tb);
}

// count independent products (attention's per-(batch, head) GEMMs): group z is entry e, at
// a + e * stride_a, b + e * stride_b, c + e * stride_c (a stride of 0 shares an operand).
__attribute__((reqd_work_group_size(GEMM_WG, GEMM_WG, 1)))
kernel void gemm_batched(int trans_a, int trans_b, long m, long n, long k,
                         global const ushort* a, long lda, global const ushort* b, long ldb,
                         global ushort* c, long ldc, long stride_a, long stride_b,
                         long stride_c) {
  local float ta[GEMM_KT][GEMM_BT + 1];
  local float tb[GEMM_KT][GEMM_BT + 1];
  const long e = get_group_id(2);
  gemm_block(trans_a, trans_b, m, n, k, a + e * stride_a, lda, b + e * stride_b, ldb,
             c + e * stride_c, ldc, ta, tb);
}
