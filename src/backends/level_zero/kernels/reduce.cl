// Deterministic reductions: a fixed summation order whatever the hardware, no atomics.
#include "bf16.h"

// out[c] = sum over r of x[r, c]: one work-item per column, rows summed in order. Adjacent
// work-items read adjacent columns of a row: each row of a work-group's 256 columns is one
// contiguous 512-byte read. Launch: 1-D, roundup(cols, ZOB_WG) items.
__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void column_sum(global const ushort* x, global ushort* out, long rows, long cols) {
  const long c = get_global_id(0);
  if (c >= cols) return;
  float acc = 0.0f;
  for (long r = 0; r < rows; ++r) acc += bf16_to_f32(x[r * cols + c]);
  out[c] = f32_to_bf16(acc);
}

// In local memory: partial[0] = sum of partial[0 .. ZOB_WG), by a fixed binary tree.
inline void tree_sum(local float* partial, int lane) {
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int stride = ZOB_WG / 2; stride > 0; stride /= 2) {
    if (lane < stride) partial[lane] += partial[lane + stride];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
}

// The sum of x in two launches, so a large n (T x V logits) spreads over the whole GPU:
// 1. sum_bf16_partial with G work-groups (G from n alone, at most ZOB_SUM_GROUPS): group g
//    sums the chunk [g * chunk, min(n, (g + 1) * chunk)); lane l takes 4 adjacent elements
//    (8 bytes: a sub-group of 16 reads 128 contiguous bytes) every 4 * ZOB_WG, then a tree.
// 2. sum_partials, one work-group: lane l sums partials l, l + ZOB_WG, ... in order, a tree.
// The order depends only on n and the group count, never on scheduling.
__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void sum_bf16_partial(global const ushort* x, long n, long chunk, global float* partials) {
  local float partial[ZOB_WG];
  const int lane = (int)get_local_id(0);
  const long begin = (long)get_group_id(0) * chunk;
  const long end = min(n, begin + chunk);
  float acc = 0.0f;
  for (long i = begin + 4 * (long)lane; i < end; i += 4 * ZOB_WG) {
    if (i + 4 <= end) {
      const float4 v = vload_bf16x4(x + i);
      acc += v.x;
      acc += v.y;
      acc += v.z;
      acc += v.w;
    } else {
      for (long j = i; j < end; ++j) acc += bf16_to_f32(x[j]);
    }
  }
  partial[lane] = acc;
  tree_sum(partial, lane);
  if (lane == 0) partials[get_group_id(0)] = partial[0];
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void sum_partials(global const float* partials, long count, global float* result) {
  local float partial[ZOB_WG];
  const int lane = (int)get_local_id(0);
  float acc = 0.0f;
  for (long i = lane; i < count; i += ZOB_WG) acc += partials[i];
  partial[lane] = acc;
  tree_sum(partial, lane);
  if (lane == 0) *result = partial[0];
}
