// CpuDevice's decoder-transformer operations (--model): the reference kernels of
// cpu_decoder_kernels.hpp on the device's pool, synchronously like every CpuDevice kernel.
#include "backends/cpu/cpu_decoder_kernels.hpp"
#include "backends/cpu/cpu_device.hpp"
#include "backends/cpu/cpu_tensor_ops.hpp"

namespace zob {

void CpuDevice::gemm_strided_batched(const GemmArgs& args, std::int64_t count,
                                     std::int64_t stride_a, std::int64_t stride_b,
                                     std::int64_t stride_c) {
  cpu::gemm_strided_batched(args, count, stride_a, stride_b, stride_c, pool_.get());
}

void CpuDevice::rmsnorm_forward(const bf16* x, const bf16* weight, bf16* y, float* rstd,
                                std::int64_t rows, std::int64_t cols, float eps) {
  cpu::rmsnorm_forward(x, weight, y, rstd, rows, cols, eps, pool_.get());
}

void CpuDevice::rmsnorm_backward(const bf16* dy, const bf16* x, const bf16* weight,
                                 const float* rstd, bf16* dx, bf16* dweight, std::int64_t rows,
                                 std::int64_t cols) {
  cpu::rmsnorm_backward(dy, x, weight, rstd, dx, dweight, rows, cols, pool_.get());
}

void CpuDevice::to_heads(const bf16* x, bf16* out, std::int64_t batch, std::int64_t seq,
                         std::int64_t heads, std::int64_t head_dim, std::int64_t repeat,
                         double theta) {
  cpu::to_heads(x, out, batch, seq, heads, head_dim, repeat, theta, pool_.get());
}

void CpuDevice::from_heads(const bf16* g, bf16* out, std::int64_t batch, std::int64_t seq,
                           std::int64_t heads, std::int64_t head_dim, std::int64_t repeat,
                           double theta) {
  cpu::from_heads(g, out, batch, seq, heads, head_dim, repeat, theta, pool_.get());
}

void CpuDevice::causal_softmax_forward(const bf16* scores, bf16* probs, std::int64_t n,
                                       std::int64_t seq, float scale) {
  cpu::causal_softmax_forward(scores, probs, n, seq, scale, pool_.get());
}

void CpuDevice::causal_softmax_backward(const bf16* probs, const bf16* dprobs, bf16* dscores,
                                        std::int64_t n, std::int64_t seq, float scale) {
  cpu::causal_softmax_backward(probs, dprobs, dscores, n, seq, scale, pool_.get());
}

void CpuDevice::silu_mul_forward(const bf16* gate, const bf16* up, bf16* out, std::int64_t n) {
  cpu::silu_mul_forward(gate, up, out, n, pool_.get());
}

void CpuDevice::silu_mul_backward(const bf16* dout, const bf16* gate, const bf16* up, bf16* dgate,
                                  bf16* dup, std::int64_t n) {
  cpu::silu_mul_backward(dout, gate, up, dgate, dup, n, pool_.get());
}

void CpuDevice::elementwise(ElementwiseOp op, const TensorView& out, const TensorView& a,
                            const TensorView& b, float scalar) {
  cpu::elementwise(op, out, a, b, scalar, pool_.get());
}

void CpuDevice::reduce_last(const TensorView& out, const TensorView& in, float scale) {
  cpu::reduce_last(out, in, scale, pool_.get());
}

}  // namespace zob
