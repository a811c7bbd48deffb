// Elementwise kernels: one element per work-item, 1-D launch of roundup(n, ZOB_WG) items.
// Arithmetic in fp32, one rounding to bf16 at each store (zob::Device conventions).
#include "bf16.h"

#define ZOB_SQRT1_2 0.70710678118654752440f
#define ZOB_INV_SQRT_2PI 0.39894228040143267794f

inline float gelu_f(float x) { return 0.5f * x * (1.0f + erf(x * ZOB_SQRT1_2)); }
inline float gelu_grad_f(float x) {
  return 0.5f * (1.0f + erf(x * ZOB_SQRT1_2)) + x * ZOB_INV_SQRT_2PI * exp(-0.5f * x * x);
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void bias_add(global ushort* y, global const ushort* bias, long rows, long cols) {
  const long i = get_global_id(0);
  if (i >= rows * cols) return;
  y[i] = f32_to_bf16(bf16_to_f32(y[i]) + bf16_to_f32(bias[i % cols]));
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void bias_gelu_forward(global ushort* pre, global const ushort* bias, global ushort* act,
                              long rows, long cols) {
  const long i = get_global_id(0);
  if (i >= rows * cols) return;
  const ushort p = f32_to_bf16(bf16_to_f32(pre[i]) + bf16_to_f32(bias[i % cols]));
  pre[i] = p;
  act[i] = f32_to_bf16(gelu_f(bf16_to_f32(p)));
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void gelu_backward(global const ushort* dact, global const ushort* pre,
                          global ushort* dpre, long n) {
  const long i = get_global_id(0);
  if (i >= n) return;
  dpre[i] = f32_to_bf16(bf16_to_f32(dact[i]) * gelu_grad_f(bf16_to_f32(pre[i])));
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void residual_add(global ushort* x, global const ushort* y, long n) {
  const long i = get_global_id(0);
  if (i >= n) return;
  x[i] = f32_to_bf16(bf16_to_f32(x[i]) + bf16_to_f32(y[i]));
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void fill_bf16(global ushort* x, float value, long n) {
  const long i = get_global_id(0);
  if (i >= n) return;
  x[i] = f32_to_bf16(value);
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void cast_f32_to_bf16(global const float* src, global ushort* dst, long n) {
  const long i = get_global_id(0);
  if (i >= n) return;
  dst[i] = f32_to_bf16(src[i]);
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void cast_bf16_to_f32(global const ushort* src, global float* dst, long n) {
  const long i = get_global_id(0);
  if (i >= n) return;
  dst[i] = bf16_to_f32(src[i]);
}
