// Internal to src/step: the optimizer step of the sub-groups DeepSpeed keeps on the GPU. With
// offload_optimizer.ratio < 1, DeepSpeed 0.19.8's ZeRO-3 updates those sub-groups with
// torch.optim.AdamW (default foreach implementation: torch 2.x's _multi_tensor_adam with
// decoupled weight decay; fp32 params, grads and states on the device), not with the CPU Adam
// of zob/adam.hpp. These functions launch that update as torch does, kernel by kernel, on
// Queue::compute, through Device::elementwise (the ops' fp32 expressions: zob/device.hpp):
//   if weight_decay != 0: p *= 1 - lr*wd                       (_foreach_mul_)
//   m = lerp(m, g, 1 - b1)                                     (_foreach_lerp_)
//   v *= b2;  v += (1 - b2) * (g*g)                            (_foreach_mul_, _foreach_addcmul_)
//   temp = sqrt(v) / sqrt(1 - b2^t) + eps                      (_foreach_sqrt, _div_, _add_)
//   p += -(lr / (1 - b1^t)) * (m / temp)                       (_foreach_addcdiv_)
// The scalars are Python's doubles, cast once to float for the kernel (torch's opmath for fp32),
// each computed from the double the hyperparameter has in Python (python_double). maximize,
// amsgrad, capturable and differentiable are off, as DeepSpeed builds the optimizer.
#pragma once
#include <cstdint>

#include "zob/adam.hpp"
#include "zob/device.hpp"

namespace zob::step_detail {

// torch.optim.AdamW(foreach) step t (1-based) on one fp32 tensor of n elements on the device:
// param, exp_avg, exp_avg_sq updated in place from grad; temp (n floats of device memory, owned
// by the caller: the tensor torch's _foreach_sqrt allocates) is scratch. h.bias_correction is
// not read: torch.optim.AdamW always corrects. Throws std::invalid_argument for t < 1 or n < 0,
// DeviceError as Device::elementwise does.
void device_adamw_step(Device& dev, float* param, const float* grad, float* exp_avg,
                       float* exp_avg_sq, float* temp, std::int64_t n, int t, const AdamHyper& h);

// x *= scale over n fp32 elements on the device, one kernel: DeepSpeed's gradient unscale
// grad.mul_(1. / combined_scale) (the caller passes the float of that double).
void device_scale(Device& dev, float* x, std::int64_t n, float scale);

// The kernels one device_adamw_step launches: 7, and 1 more with weight decay.
int device_adamw_kernels(const AdamHyper& h);

// The device bytes one device_adamw_step reads and writes over n elements: every array each
// kernel touches, once per kernel (addcmul reads g as both its operands; the second read is a
// cache hit, not memory traffic): 72 B an element, 80 with weight decay.
std::uint64_t device_adamw_bytes(std::int64_t n, const AdamHyper& h);

// The double that a hyperparameter kept as float had in Python: the shortest decimal that
// reads back as x (0.9, 0.999, 1e-8: what the user's config wrote) read as a double. torch
// computes 1 - beta2 and the rest from those doubles; from x widened instead, 1 - 0.999f is
// 1.3e-5 (relative) away from 1 - 0.999 and rounds to another float.
double python_double(float x);

}  // namespace zob::step_detail
