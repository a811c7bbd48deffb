// The generic strided tensor kernels (Device::elementwise, Device::reduce_last): the deepspeed
// schedule's eager decomposition. One work-item per output element; a view is its data, its
// dtype (0 bf16, 1 fp32) and six sizes and strides (long8, the last two lanes unused), outermost
// first; elementwise's operands share out's sizes, except cat_last's a, whose last size rides
// in its stride's lane 6. reduce_last sums its row in order in one work-item: the CPU reference's
// own order. The fp32 expressions are the CPU reference's (src/backends/cpu/cpu_tensor_ops.hpp,
// tensor_op_value) with contraction off. addcmul and addcdiv (15, 16) read out's element too.
// sqrt and the divisions are exact on PoCL; OpenCL C allows a device 3 and 2.5 ulp for them
// unless the module is built with -cl-fp32-correctly-rounded-divide-sqrt.
#include "bf16.h"

#pragma OPENCL FP_CONTRACT OFF

#define ZOB_INLINE __attribute__((always_inline)) inline

ZOB_INLINE float load_at(global const uchar* p, int f32, long at) {
  return f32 != 0 ? ((global const float*)p)[at] : bf16_to_f32(((global const ushort*)p)[at]);
}

ZOB_INLINE void store_at(global uchar* p, int f32, long at, float v) {
  if (f32 != 0) {
    ((global float*)p)[at] = v;
  } else {
    ((global ushort*)p)[at] = f32_to_bf16(v);
  }
}

// One dimension of offset_of: the index's remainder by n, times the stride, onto *at; the
// quotient back into *i. The remainder as i - q * n: with `%` beside `/`, clang emits a
// `freeze` that llvm-spirv-15 cannot translate.
ZOB_INLINE void peel(long* i, long* at, long n, long stride) {
  const long q = *i / n;
  *at += (*i - q * n) * stride;
  *i = q;
}

// The offset of linear index i over the first five dimensions (`size`, `stride`), then the
// sixth when `six` is set; written out, without a loop (llvm-spirv-15, see CMakeLists.txt).
ZOB_INLINE long offset_of(long i, long8 size, long8 stride, int six) {
  long at = 0;
  if (six != 0) peel(&i, &at, size.s5, stride.s5);
  peel(&i, &at, size.s4, stride.s4);
  peel(&i, &at, size.s3, stride.s3);
  peel(&i, &at, size.s2, stride.s2);
  peel(&i, &at, size.s1, stride.s1);
  peel(&i, &at, size.s0, stride.s0);
  return at;
}

// zob::ElementwiseOp, in its order.
// o: out's element before the store (addcmul, addcdiv).
ZOB_INLINE float op_value(int op, float a, float b, float scalar, float o) {
  float s = 0.0f;
  switch (op) {
    case 0: return a;
    case 1: return -a;
    case 2: return a + b;
    case 3: return a * b;
    case 4: return a + scalar;
    case 5: return a * scalar;
    case 6: return a * a;
    case 7: return (a * a) * a;
    case 8: return 1.0f / sqrt(a);
    case 9: return a / (1.0f + exp(-a));
    case 10: s = 1.0f / (1.0f + exp(-b)); return a * (s * (1.0f + b * (1.0f - s)));
    case 12: return fabs(scalar) < 0.5f ? a + scalar * (b - a) : b - (b - a) * (1.0f - scalar);
    case 13: return sqrt(a);
    case 14: return a / scalar;
    case 15: return o + scalar * (a * b);
    case 16: return o + scalar * (a / b);
    default: return 0.0f;
  }
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1))) kernel void tensor_elementwise(
    int op, float scalar, long n, long8 size, global uchar* out, int out_f32, long8 out_stride,
    global const uchar* a, int a_f32, long8 a_stride, global const uchar* b, int b_f32,
    long8 b_stride) {
  const long i = (long)get_global_id(0);
  if (i < n && op == 11) {  // cat_last: a then b along the last dimension
    const long q = i / size.s5, k = i - q * size.s5, na = a_stride.s6;
    const long at = offset_of(q, size, k < na ? a_stride : b_stride, 0) +
                    (k < na ? k * a_stride.s5 : (k - na) * b_stride.s5);
    store_at(out, out_f32, offset_of(i, size, out_stride, 1),
             k < na ? load_at(a, a_f32, at) : load_at(b, b_f32, at));
  } else if (i < n) {
    const float x = load_at(a, a_f32, offset_of(i, size, a_stride, 1));
    const int reads_out = op == 15 || op == 16;
    const int binary = op == 2 || op == 3 || op == 10 || op == 12 || reads_out != 0;
    const float y = binary != 0 ? load_at(b, b_f32, offset_of(i, size, b_stride, 1)) : 0.0f;
    const long at = offset_of(i, size, out_stride, 1);
    const float o = reads_out != 0 ? load_at(out, out_f32, at) : 0.0f;
    store_at(out, out_f32, at, op_value(op, x, y, scalar, o));
  }
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1))) kernel void tensor_reduce_last(
    float scale, long outputs, long8 size, global uchar* out, int out_f32, long8 out_stride,
    global const uchar* in, int in_f32, long8 in_stride) {
  const long i = (long)get_global_id(0);
  if (i < outputs) {
    const long base = offset_of(i, size, in_stride, 0);
    float acc = 0.0f;
#pragma clang loop vectorize(disable)
    for (long j = 0; j < size.s5; ++j) acc += load_at(in, in_f32, base + j * in_stride.s5);
    store_at(out, out_f32, offset_of(i, size, out_stride, 0), scale * acc);
  }
}
