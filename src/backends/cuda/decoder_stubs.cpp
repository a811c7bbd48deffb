// Placeholders for the decoder-transformer kernels (--model) until this backend implements
// them (helper B's worktree replaces this file): each throws DeviceError(unavailable), so a
// --model run on this backend fails with one line instead of computing nothing.
#include <string>

#include "cuda_device.hpp"

namespace zob {
namespace {
[[noreturn]] void not_yet(const char* op) {
  throw DeviceError(DeviceErrorKind::unavailable,
                    std::string(op) +
                        ": the decoder kernels (--model) are not implemented on "
                        "this backend yet; use --device cpu");
}
}  // namespace

void CudaDevice::gemm_strided_batched(const GemmArgs&, std::int64_t, std::int64_t, std::int64_t,
                                      std::int64_t) {
  not_yet("gemm_strided_batched");
}
void CudaDevice::rmsnorm_forward(const bf16*, const bf16*, bf16*, float*, std::int64_t,
                                 std::int64_t, float) {
  not_yet("rmsnorm_forward");
}
void CudaDevice::rmsnorm_backward(const bf16*, const bf16*, const bf16*, const float*, bf16*, bf16*,
                                  std::int64_t, std::int64_t) {
  not_yet("rmsnorm_backward");
}
void CudaDevice::to_heads(const bf16*, bf16*, std::int64_t, std::int64_t, std::int64_t,
                          std::int64_t, std::int64_t, double) {
  not_yet("to_heads");
}
void CudaDevice::from_heads(const bf16*, bf16*, std::int64_t, std::int64_t, std::int64_t,
                            std::int64_t, std::int64_t, double) {
  not_yet("from_heads");
}
void CudaDevice::causal_softmax_forward(const bf16*, bf16*, std::int64_t, std::int64_t, float) {
  not_yet("causal_softmax_forward");
}
void CudaDevice::causal_softmax_backward(const bf16*, const bf16*, bf16*, std::int64_t,
                                         std::int64_t, float) {
  not_yet("causal_softmax_backward");
}
void CudaDevice::silu_mul_forward(const bf16*, const bf16*, bf16*, std::int64_t) {
  not_yet("silu_mul_forward");
}
void CudaDevice::silu_mul_backward(const bf16*, const bf16*, const bf16*, bf16*, bf16*,
                                   std::int64_t) {
  not_yet("silu_mul_backward");
}

}  // namespace zob
