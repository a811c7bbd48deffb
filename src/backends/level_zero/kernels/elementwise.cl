// Element-wise kernels: ZOB_VEC (4) adjacent elements per work-item, loaded and stored as one
// vector (8 bytes of bf16, 16 of fp32), so a sub-group of 16 work-items moves whole 64-byte
// cache lines; the last work-item finishes a tail of n % 4 one element at a time.
// 1-D launch of roundup(ceil(n / ZOB_VEC), ZOB_WG) items. Arithmetic in fp32, one rounding
// to bf16 at each store (zob::Device conventions): the vector and scalar paths compute the
// same values.
#include "bf16.h"

// The tail (fewer than ZOB_VEC elements) written out for j = i, i + 1, i + 2: a loop here
// makes llvm-spirv-15 emit a loop whose merge block is its continue target (spirv-val rejects).
#define ZOB_TAIL(stmt)             \
  do {                             \
    long j = i;                    \
    if (j < n) { stmt; }           \
    j = i + 1;                     \
    if (j < n) { stmt; }           \
    j = i + 2;                     \
    if (j < n) { stmt; }           \
  } while (0)

#define ZOB_SQRT1_2 0.70710678118654752440f
#define ZOB_INV_SQRT_2PI 0.39894228040143267794f

inline float gelu_f(float x) { return 0.5f * x * (1.0f + erf(x * ZOB_SQRT1_2)); }
inline float gelu_grad_f(float x) {
  return 0.5f * (1.0f + erf(x * ZOB_SQRT1_2)) + x * ZOB_INV_SQRT_2PI * exp(-0.5f * x * x);
}
inline float4 gelu4(float4 x) {
  return (float4)(gelu_f(x.x), gelu_f(x.y), gelu_f(x.z), gelu_f(x.w));
}
inline float4 gelu_grad4(float4 x) {
  return (float4)(gelu_grad_f(x.x), gelu_grad_f(x.y), gelu_grad_f(x.z), gelu_grad_f(x.w));
}
// bias[(i + e) % cols] for e = 0..3: rows wrap inside a vector when cols % 4 != 0.
inline float4 bias4(global const ushort* bias, long i, long cols) {
  return (float4)(bf16_to_f32(bias[i % cols]), bf16_to_f32(bias[(i + 1) % cols]),
                  bf16_to_f32(bias[(i + 2) % cols]), bf16_to_f32(bias[(i + 3) % cols]));
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void bias_add(global ushort* y, global const ushort* bias, long rows, long cols) {
  const long n = rows * cols, i = ZOB_VEC * (long)get_global_id(0);
  if (i + ZOB_VEC <= n) {
    vstore_bf16x4(vload_bf16x4(y + i) + bias4(bias, i, cols), y + i);
  } else {
    ZOB_TAIL(y[j] = f32_to_bf16(bf16_to_f32(y[j]) + bf16_to_f32(bias[j % cols])));
  }
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void bias_gelu_forward(global ushort* pre, global const ushort* bias, global ushort* act,
                              long rows, long cols) {
  const long n = rows * cols, i = ZOB_VEC * (long)get_global_id(0);
  if (i + ZOB_VEC <= n) {
    vstore_bf16x4(vload_bf16x4(pre + i) + bias4(bias, i, cols), pre + i);
    vstore_bf16x4(gelu4(vload_bf16x4(pre + i)), act + i);  // gelu of the rounded pre
  } else {
    ZOB_TAIL(pre[j] = f32_to_bf16(bf16_to_f32(pre[j]) + bf16_to_f32(bias[j % cols]));
             act[j] = f32_to_bf16(gelu_f(bf16_to_f32(pre[j]))));
  }
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void gelu_backward(global const ushort* dact, global const ushort* pre,
                          global ushort* dpre, long n) {
  const long i = ZOB_VEC * (long)get_global_id(0);
  if (i + ZOB_VEC <= n) {
    vstore_bf16x4(vload_bf16x4(dact + i) * gelu_grad4(vload_bf16x4(pre + i)), dpre + i);
  } else {
    ZOB_TAIL(dpre[j] = f32_to_bf16(bf16_to_f32(dact[j]) * gelu_grad_f(bf16_to_f32(pre[j]))));
  }
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void residual_add(global ushort* x, global const ushort* y, long n) {
  const long i = ZOB_VEC * (long)get_global_id(0);
  if (i + ZOB_VEC <= n) {
    vstore_bf16x4(vload_bf16x4(x + i) + vload_bf16x4(y + i), x + i);
  } else {
    ZOB_TAIL(x[j] = f32_to_bf16(bf16_to_f32(x[j]) + bf16_to_f32(y[j])));
  }
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void fill_bf16(global ushort* x, float value, long n) {
  const long i = ZOB_VEC * (long)get_global_id(0);
  const ushort v = f32_to_bf16(value);
  if (i + ZOB_VEC <= n) {
    vstore4((ushort4)(v), 0, x + i);
  } else {
    ZOB_TAIL(x[j] = v);
  }
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void cast_f32_to_bf16(global const float* src, global ushort* dst, long n) {
  const long i = ZOB_VEC * (long)get_global_id(0);
  if (i + ZOB_VEC <= n) {
    vstore_bf16x4(vload4(0, src + i), dst + i);
  } else {
    ZOB_TAIL(dst[j] = f32_to_bf16(src[j]));
  }
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void cast_bf16_to_f32(global const ushort* src, global float* dst, long n) {
  const long i = ZOB_VEC * (long)get_global_id(0);
  if (i + ZOB_VEC <= n) {
    vstore4(vload_bf16x4(src + i), 0, dst + i);
  } else {
    ZOB_TAIL(dst[j] = bf16_to_f32(src[j]));
  }
}
