// The CPU reference kernels of the decoder transformer (--model): one free function per
// "decoder-transformer kernels" operation of zob::Device, on plain host pointers, so the CPU
// device, the fake Level Zero driver and the kernel tests share them. Semantics are those of
// include/zob/device.hpp; the exact fp32 evaluation order (what another backend must follow to
// match bit for bit where it can) is written beside each function. `pool` may be null.
// Shape errors throw zob::DeviceError(runtime) naming the kernel and the shape.
#pragma once
#include <cstdint>

#include "zob/bf16.hpp"

namespace zob {
class ThreadPool;
struct GemmArgs;
}  // namespace zob

namespace zob::cpu {

// count independent gemm calls (cpu_kernels.hpp) at a + i*stride_a, b + i*stride_b,
// c + i*stride_c. stride_c must be > 0 when count > 1.
void gemm_strided_batched(const GemmArgs& args, std::int64_t count, std::int64_t stride_a,
                          std::int64_t stride_b, std::int64_t stride_c, ThreadPool* pool);

// ss = fp32 sum (c ascending) of x*x; rstd = 1.0f / sqrtf(ss / (float)cols + eps);
// y = bf16(w * (x * rstd)).
void rmsnorm_forward(const bf16* x, const bf16* weight, bf16* y, float* rstd, std::int64_t rows,
                     std::int64_t cols, float eps, ThreadPool* pool);
// xhat = x * rstd; g = dy * w; dot = fp32 sum (c ascending) of g * xhat; mean = dot / cols;
// dx = bf16(rstd * (g - xhat * mean)); dweight[c] = bf16(fp32 sum over r ascending of
// dy * xhat).
void rmsnorm_backward(const bf16* dy, const bf16* x, const bf16* weight, const float* rstd,
                      bf16* dx, bf16* dweight, std::int64_t rows, std::int64_t cols,
                      ThreadPool* pool);

// See Device::to_heads / from_heads. cos and sin: (float)std::cos((double)s * inv_freq[d]),
// inv_freq[d] = std::pow(theta, -2.0 * d / head_dim) in double. Forward:
// out[d] = x[d]*c - x[d+half]*s; out[d+half] = x[d+half]*c + x[d]*s (fp32).
// Adjoint: a = fp32 sum over r ascending; out[d] = a[d]*c + a[d+half]*s;
// out[d+half] = a[d+half]*c - a[d]*s. head_dim must be even when theta > 0.
void to_heads(const bf16* x, bf16* out, std::int64_t batch, std::int64_t seq, std::int64_t heads,
              std::int64_t head_dim, std::int64_t repeat, double theta, ThreadPool* pool);
void from_heads(const bf16* g, bf16* out, std::int64_t batch, std::int64_t seq, std::int64_t heads,
                std::int64_t head_dim, std::int64_t repeat, double theta, ThreadPool* pool);

// v_j = scale * s[i,j]; m = max_{j<=i} v_j; sum = fp32 sum (j ascending) of expf(v_j - m);
// p[i,j] = expf(v_j - m) / sum; p[i,j>i] = 0. In place allowed.
void causal_softmax_forward(const bf16* scores, bf16* probs, std::int64_t n, std::int64_t seq,
                            float scale, ThreadPool* pool);
// dot = fp32 sum (j <= i ascending) of p*dp; ds = bf16(scale * (p * (dp - dot))); 0 for j > i.
void causal_softmax_backward(const bf16* probs, const bf16* dprobs, bf16* dscores, std::int64_t n,
                             std::int64_t seq, float scale, ThreadPool* pool);

// silu = x / (1.0f + expf(-x)); out = bf16(silu * up).
void silu_mul_forward(const bf16* gate, const bf16* up, bf16* out, std::int64_t n,
                      ThreadPool* pool);
// s = 1.0f / (1.0f + expf(-x)); silu = x / (1.0f + expf(-x));
// dgate = bf16((dout * up) * (s * (1.0f + x * (1.0f - s)))); dup = bf16(dout * silu).
void silu_mul_backward(const bf16* dout, const bf16* gate, const bf16* up, bf16* dgate, bf16* dup,
                       std::int64_t n, ThreadPool* pool);

}  // namespace zob::cpu
