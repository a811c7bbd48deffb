// Deterministic reductions: a fixed summation order whatever the hardware, no atomics.
#include "bf16.h"

// out[c] = sum over r of x[r, c]: one work-item per column, rows summed in order.
// Launch: 1-D, roundup(cols, ZOB_WG) items.
__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void column_sum(global const ushort* x, global ushort* out, long rows, long cols) {
  const long c = get_global_id(0);
  if (c >= cols) return;
  float acc = 0.0f;
  for (long r = 0; r < rows; ++r) acc += bf16_to_f32(x[r * cols + c]);
  out[c] = f32_to_bf16(acc);
}

// *result = sum of x. Exactly one work-group of ZOB_WG items: lane l sums elements
// l, l+ZOB_WG, ... in order, then a fixed binary tree in local memory. Run once per step
// (the loss), so one work-group is enough.
__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void sum_bf16(global const ushort* x, long n, global float* result) {
  local float partial[ZOB_WG];
  const int lane = (int)get_local_id(0);
  float acc = 0.0f;
  for (long i = lane; i < n; i += ZOB_WG) acc += bf16_to_f32(x[i]);
  partial[lane] = acc;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int stride = ZOB_WG / 2; stride > 0; stride /= 2) {
    if (lane < stride) partial[lane] += partial[lane + stride];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  if (lane == 0) *result = partial[0];
}
