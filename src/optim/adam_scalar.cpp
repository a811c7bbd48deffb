// The portable kernels: plain loops the compiler vectorises for the baseline ISA. They are the
// fallback on CPUs without AVX2/AVX-512 and the path forced by ZOB_ADAM_ISA=scalar.
// Built with -fno-math-errno (so sqrt vectorises) and -ffp-contract=off (so the vectorised
// body and the scalar remainder round identically: results do not depend on where a
// thread's range starts or ends).
#include <bit>
#include <cmath>
#include <cstdint>

#include "optim/adam_kernels.hpp"
#include "zob/bf16.hpp"

namespace zob::detail {
namespace {

template <bool Decay>
void adam_loop(float* __restrict p, const float* __restrict g, float* __restrict m,
               float* __restrict v, std::int64_t n, const AdamConsts& c) {
  const float b1 = c.beta1, omb1 = c.one_minus_beta1, b2 = c.beta2, omb2 = c.one_minus_beta2;
  const float neg_step = c.neg_step_size, inv_bc2 = c.inv_sqrt_bc2, eps = c.eps;
  const float neg_lr_wd = c.neg_lr_wd;
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = b1 * m[i] + omb1 * gi;
    const float vi = b2 * v[i] + omb2 * (gi * gi);
    float pi = p[i];
    if constexpr (Decay) pi = pi + neg_lr_wd * pi;
    const float denom = std::sqrt(vi) * inv_bc2 + eps;
    pi = pi + neg_step * (mi / denom);
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
  }
}

}  // namespace

void adam_range_scalar(float* p, const float* g, float* m, float* v, std::int64_t n,
                       const AdamConsts& c) {
  if (c.decay) {
    adam_loop<true>(p, g, m, v, n, c);
  } else {
    adam_loop<false>(p, g, m, v, n, c);
  }
}

// One pass over memory in blocks that stay in L1: Adam over a block, then the cast of the block
// just written. A single loop doing both does not vectorise (the cast's NaN branch), and ran at
// 0.76x the two separate passes (results/cpu/2026-12-02-fused-adam-cast/); the blocks keep the
// compiler's vector Adam loop and the same bits.
void adam_cast_range_scalar(float* p, const float* g, float* m, float* v, std::uint16_t* out,
                            std::int64_t n, const AdamConsts& c) {
  constexpr std::int64_t kBlock = 1024;  // 4 fp32 arrays of 4 kB and 2 kB of bf16
  for (std::int64_t b = 0; b < n; b += kBlock) {
    const std::int64_t len = n - b < kBlock ? n - b : kBlock;
    if (c.decay) {
      adam_loop<true>(p + b, g + b, m + b, v + b, len, c);
    } else {
      adam_loop<false>(p + b, g + b, m + b, v + b, len, c);
    }
    cast_range_scalar(p + b, out + b, len);
  }
}

void cast_range_scalar(const float* __restrict src, std::uint16_t* __restrict dst, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]).bits;
}

void probe_range_scalar(float* __restrict p, const float* __restrict g, float* __restrict m,
                        float* __restrict v, std::int64_t n, std::uint32_t mask) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint32_t gi = std::bit_cast<std::uint32_t>(g[i]) & mask;
    p[i] = std::bit_cast<float>(std::bit_cast<std::uint32_t>(p[i]) ^ gi);
    m[i] = std::bit_cast<float>(std::bit_cast<std::uint32_t>(m[i]) ^ gi);
    v[i] = std::bit_cast<float>(std::bit_cast<std::uint32_t>(v[i]) ^ gi);
  }
}

}  // namespace zob::detail
