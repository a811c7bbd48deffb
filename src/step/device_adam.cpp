// torch.optim.AdamW's foreach step on the device (device_adam.hpp).
#include "step/device_adam.hpp"

#include <charconv>
#include <cmath>
#include <stdexcept>
#include <string>

namespace zob::step_detail {
namespace {

using Op = ElementwiseOp;

// A flat 1-D fp32 view of n elements (the foreach kernels see each tensor as one contiguous
// run).
TensorView flat(const float* p, std::int64_t n) { return vector_view(p, DType::f32, n); }

// The kernels' scalars of step t, as _multi_tensor_adam computes them in Python doubles.
struct StepScalars {
  double decay;      // 1 - lr * weight_decay
  double lerp_w;     // 1 - beta1
  double beta2;      // beta2
  double addcmul_s;  // 1 - beta2
  double bc2_sqrt;   // (1 - beta2 ** t) ** 0.5
  double eps;        // eps
  double step_size;  // -(lr / (1 - beta1 ** t))
};

StepScalars step_scalars(const AdamHyper& h, int t) {
  const double lr = python_double(h.lr), b1 = python_double(h.beta1), b2 = python_double(h.beta2),
               wd = python_double(h.weight_decay);
  // Python's float ** float is C's pow (CPython's float_pow): the same libm call here.
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(t));
  return {1.0 - lr * wd,        1.0 - b1,         b2, 1.0 - b2, std::pow(bc2, 0.5),
          python_double(h.eps), -1.0 * (lr / bc1)};
}

}  // namespace

double python_double(float x) {
  char text[64];
  const std::to_chars_result r = std::to_chars(text, text + sizeof text, x);  // shortest
  double d = static_cast<double>(x);
  if (r.ec == std::errc{}) std::from_chars(text, r.ptr, d);  // inf and nan read back too
  return d;
}

void device_adamw_step(Device& dev, float* param, const float* grad, float* exp_avg,
                       float* exp_avg_sq, float* temp, std::int64_t n, int t, const AdamHyper& h) {
  if (t < 1) throw std::invalid_argument("device_adamw_step: step " + std::to_string(t) + " < 1");
  if (n < 0) throw std::invalid_argument("device_adamw_step: negative n");
  const StepScalars s = step_scalars(h, t);
  const TensorView p = flat(param, n), g = flat(grad, n), m = flat(exp_avg, n),
                   v = flat(exp_avg_sq, n), tmp = flat(temp, n), none{};
  auto f = [](double x) { return static_cast<float>(x); };  // the kernel's opmath scalar
  if (h.weight_decay != 0.0f) dev.elementwise(Op::mul_scalar, p, p, none, f(s.decay));
  dev.elementwise(Op::lerp, m, m, g, f(s.lerp_w));
  dev.elementwise(Op::mul_scalar, v, v, none, f(s.beta2));
  dev.elementwise(Op::addcmul, v, g, g, f(s.addcmul_s));
  dev.elementwise(Op::sqrt, tmp, v, none, 0.0f);
  dev.elementwise(Op::div_scalar, tmp, tmp, none, f(s.bc2_sqrt));
  dev.elementwise(Op::add_scalar, tmp, tmp, none, f(s.eps));
  dev.elementwise(Op::addcdiv, p, m, tmp, f(s.step_size));
}

void device_scale(Device& dev, float* x, std::int64_t n, float scale) {
  if (n < 0) throw std::invalid_argument("device_scale: negative n");
  const TensorView v = flat(x, n);
  dev.elementwise(Op::mul_scalar, v, v, TensorView{}, scale);
}

int device_adamw_kernels(const AdamHyper& h) { return h.weight_decay != 0.0f ? 8 : 7; }

std::uint64_t device_adamw_bytes(std::int64_t n, const AdamHyper& h) {
  // Arrays per kernel (4 B each): decay p->p 2; lerp m,g->m 3; mul v->v 2; addcmul v,g->v 3;
  // sqrt v->temp 2; div temp->temp 2; add temp->temp 2; addcdiv p,m,temp->p 4.
  const std::uint64_t arrays = 18 + (h.weight_decay != 0.0f ? 2 : 0);
  return n > 0 ? arrays * 4 * static_cast<std::uint64_t>(n) : 0;
}

}  // namespace zob::step_detail
