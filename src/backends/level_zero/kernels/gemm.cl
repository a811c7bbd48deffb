// C[M,N] = op(A) op(B), bf16 in/out, fp32 accumulation in k order (zob::GemmArgs semantics).
// A 16x16 tile per work-group, staged through local memory as fp32. Every transpose case
// goes through the same loop: only the index of the element loaded into the tile differs.
#include "bf16.h"

#define TILE 16

__attribute__((reqd_work_group_size(TILE, TILE, 1)))
kernel void gemm(int trans_a, int trans_b, long m, long n, long k,
                 global const ushort* a, long lda, global const ushort* b, long ldb,
                 global ushort* c, long ldc) {
  local float ta[TILE][TILE];
  local float tb[TILE][TILE];
  const int lx = (int)get_local_id(0);
  const int ly = (int)get_local_id(1);
  const long col = (long)get_group_id(0) * TILE + lx;
  const long row = (long)get_group_id(1) * TILE + ly;
  float acc = 0.0f;
  for (long k0 = 0; k0 < k; k0 += TILE) {
    const long ka = k0 + lx;  // this thread loads op(A)[row, ka]
    float va = 0.0f;
    if (row < m && ka < k) va = bf16_to_f32(trans_a ? a[ka * lda + row] : a[row * lda + ka]);
    ta[ly][lx] = va;
    const long kb = k0 + ly;  // and op(B)[kb, col]
    float vb = 0.0f;
    if (kb < k && col < n) vb = bf16_to_f32(trans_b ? b[col * ldb + kb] : b[kb * ldb + col]);
    tb[ly][lx] = vb;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int t = 0; t < TILE; ++t) acc += ta[ly][t] * tb[t][lx];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (row < m && col < n) c[row * ldc + col] = f32_to_bf16(acc);
}
