// Internal to src/optim and its tests: the per-ISA kernels behind adam_step and
// cast_f32_to_bf16_host, and a way to pick the ISA explicitly (tests run every path the CPU
// supports). Each kernel works on one contiguous range; the public functions split over the pool.
#pragma once
#include <cstdint>

#include "zob/adam.hpp"

namespace zob {
class ThreadPool;
}

namespace zob::detail {

enum class AdamIsa { scalar, avx2, avx512 };

const char* to_string(AdamIsa isa);

// Whether this CPU (and this build) can run `isa`.
bool isa_supported(AdamIsa isa);

// The best ISA the CPU supports, unless ZOB_ADAM_ISA overrides it. Throws UsageError when
// ZOB_ADAM_ISA names an unknown ISA or one this CPU lacks.
AdamIsa selected_isa();

// The per-step constants every kernel uses, folded once per call (DeepSpeed's folding:
// the bias-corrected step size and 1/sqrt(1-b2^t) are scalars, so the per-element work is
// one sqrt, one fma and one division).
struct AdamConsts {
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float neg_step_size;  // -lr / (1 - b1^t)
  float inv_sqrt_bc2;   // 1 / sqrt(1 - b2^t)
  float eps;
  float neg_lr_wd;  // -lr * wd; the decay term is skipped when wd == 0
  bool decay;
};
AdamConsts adam_consts(int step, const AdamHyper& hyper);

using AdamRangeFn = void (*)(float* p, const float* g, float* m, float* v, std::int64_t n,
                             const AdamConsts& c);
// Adam fused with the cast: the same update, and out[i] = the bf16 bits of the updated p[i]
// (bf16.hpp rounding), in one pass: 30 B/param instead of Adam's 28 plus the cast's 6.
using AdamCastRangeFn = void (*)(float* p, const float* g, float* m, float* v, std::uint16_t* out,
                                 std::int64_t n, const AdamConsts& c);
using CastRangeFn = void (*)(const float* src, std::uint16_t* dst, std::int64_t n);
// The same-shape bandwidth probe of the adam benchmark: reads p, g, m, v; writes p, m, v, each
// as its own bits XOR (g's bits AND mask). Callers pass probe_mask() (0, read at run time): the
// arrays stay bitwise as they were, so the probe can run between the steps of a live arm, and
// the compiler cannot drop a load or a store, since it cannot know the mask.
using ProbeRangeFn = void (*)(float* p, const float* g, float* m, float* v, std::int64_t n,
                              std::uint32_t mask);
std::uint32_t probe_mask();

AdamRangeFn adam_kernel(AdamIsa isa);
AdamCastRangeFn adam_cast_kernel(AdamIsa isa);
CastRangeFn cast_kernel(AdamIsa isa);
ProbeRangeFn probe_kernel(AdamIsa isa);

// adam_step / cast_f32_to_bf16_host with an explicit ISA (throws UsageError if unsupported).
void adam_step_isa(AdamIsa isa, float* params, const float* grads, float* exp_avg,
                   float* exp_avg_sq, std::int64_t n, int step, const AdamHyper& hyper,
                   ThreadPool& pool);
void adam_step_cast_isa(AdamIsa isa, float* params, const float* grads, float* exp_avg,
                        float* exp_avg_sq, void* params_bf16, std::int64_t n, int step,
                        const AdamHyper& hyper, ThreadPool& pool);
void cast_f32_to_bf16_isa(AdamIsa isa, const float* src, void* dst_bf16, std::int64_t n,
                          ThreadPool& pool);

// Scalar kernels (adam_scalar.cpp); the x86 ones live in adam_x86.cpp.
void adam_range_scalar(float* p, const float* g, float* m, float* v, std::int64_t n,
                       const AdamConsts& c);
void adam_cast_range_scalar(float* p, const float* g, float* m, float* v, std::uint16_t* out,
                            std::int64_t n, const AdamConsts& c);
void cast_range_scalar(const float* src, std::uint16_t* dst, std::int64_t n);
void probe_range_scalar(float* p, const float* g, float* m, float* v, std::int64_t n,
                        std::uint32_t mask);
#if ZOB_OPTIM_X86
void adam_range_avx2(float* p, const float* g, float* m, float* v, std::int64_t n,
                     const AdamConsts& c);
void adam_range_avx512(float* p, const float* g, float* m, float* v, std::int64_t n,
                       const AdamConsts& c);
void adam_cast_range_avx2(float* p, const float* g, float* m, float* v, std::uint16_t* out,
                          std::int64_t n, const AdamConsts& c);
void adam_cast_range_avx512(float* p, const float* g, float* m, float* v, std::uint16_t* out,
                            std::int64_t n, const AdamConsts& c);
void cast_range_avx2(const float* src, std::uint16_t* dst, std::int64_t n);
void cast_range_avx512(const float* src, std::uint16_t* dst, std::int64_t n);
void probe_range_avx2(float* p, const float* g, float* m, float* v, std::int64_t n,
                      std::uint32_t mask);
void probe_range_avx512(float* p, const float* g, float* m, float* v, std::int64_t n,
                        std::uint32_t mask);
#endif

}  // namespace zob::detail
