// The CPU reference of Device::elementwise and Device::reduce_last (include/zob/device.hpp):
// the generic strided tensor operations the deepspeed schedule's eager decomposition launches.
// Shared by the CPU device and the fake Level Zero driver; the CUDA and Level Zero kernels
// evaluate each op with the same fp32 expression (tensor_op_value below), so they agree bit
// for bit wherever their expf / sqrtf do. `pool` may be null.
#pragma once
#include <cmath>
#include <cstdint>

#include "zob/device.hpp"

namespace zob {
class ThreadPool;
}

namespace zob::cpu {

// The fp32 value of one element of op (a, b: the operands widened to fp32; o: out's element
// before the store, read only by the ops reads_out names, 0 for the others).
inline float tensor_op_value(ElementwiseOp op, float a, float b, float scalar, float o) {
  switch (op) {
    case ElementwiseOp::copy: return a;
    case ElementwiseOp::neg: return -a;
    case ElementwiseOp::add: return a + b;
    case ElementwiseOp::mul: return a * b;
    case ElementwiseOp::add_scalar: return a + scalar;
    case ElementwiseOp::mul_scalar: return a * scalar;
    case ElementwiseOp::square: return a * a;
    case ElementwiseOp::cube: return (a * a) * a;
    case ElementwiseOp::rsqrt: return 1.0f / std::sqrt(a);
    case ElementwiseOp::silu: return a / (1.0f + std::exp(-a));
    case ElementwiseOp::cat_last: return a;  // elementwise() picks the operand
    case ElementwiseOp::silu_backward: {
      const float s = 1.0f / (1.0f + std::exp(-b));
      return a * (s * (1.0f + b * (1.0f - s)));
    }
    // torch.lerp's two branches (ATen's Lerp.h): the one that keeps the rounding small.
    case ElementwiseOp::lerp:
      return std::fabs(scalar) < 0.5f ? a + scalar * (b - a) : b - (b - a) * (1.0f - scalar);
    case ElementwiseOp::sqrt: return std::sqrt(a);
    case ElementwiseOp::div_scalar: return a / scalar;
    case ElementwiseOp::addcmul: return o + scalar * (a * b);
    case ElementwiseOp::addcdiv: return o + scalar * (a / b);
  }
  return 0.0f;
}

// Throws DeviceError(runtime) naming the call when a view is malformed (negative sizes, an
// unknown dtype, an operand whose sizes differ from out's).
void check_elementwise(ElementwiseOp op, const TensorView& out, const TensorView& a,
                       const TensorView& b);
void check_reduce_last(const TensorView& out, const TensorView& in);

void elementwise(ElementwiseOp op, const TensorView& out, const TensorView& a, const TensorView& b,
                 float scalar, ThreadPool* pool);
void reduce_last(const TensorView& out, const TensorView& in, float scale, ThreadPool* pool);

}  // namespace zob::cpu
