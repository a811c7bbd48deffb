// CPU Adam with DeepSpeedCPUAdam's AdamW semantics (docs/anatomy.md §4), fp32, in place.
#pragma once
#include <cstdint>

namespace zob {

class ThreadPool;

struct AdamHyper {
  float lr = 1e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool bias_correction = true;
};

// One step (step >= 1) over n elements:
//   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g*g;  p -= lr*wd*p;
//   p -= (lr/(1-b1^t)) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
// Split over the pool's threads; vectorised (AVX-512 / AVX2 / scalar chosen at run time).
// The environment variable ZOB_ADAM_ISA=scalar|avx2|avx512 forces a path (UsageError if the
// CPU lacks it or the name is unknown); it applies to cast_f32_to_bf16_host too. For one ISA
// the results are bitwise independent of the pool's thread count; different ISAs agree within
// a few ulp (fma vs separate multiply-add), not bit for bit.
void adam_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::int64_t n,
               int step, const AdamHyper& hyper, ThreadPool& pool);

// adam_step fused with cast_f32_to_bf16_host: one pass that updates params, exp_avg and
// exp_avg_sq exactly as adam_step does and writes the bf16 of each updated parameter into
// params_bf16, bit for bit what cast_f32_to_bf16_host would write after it. It moves 30 B/param
// (reads p, g, m, v; writes p, m, v and the bf16) instead of 28 + 6 in two passes. Same ISA
// selection, same independence of the thread count.
void adam_step_cast(float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                    void* params_bf16, std::int64_t n, int step, const AdamHyper& hyper,
                    ThreadPool& pool);

// The vector instruction set adam_step uses on this CPU: "avx512", "avx2" or "scalar".
const char* adam_isa();

// fp32 -> bf16 (bf16.hpp rounding) over n elements, split over the pool: the CPU cast of
// the master into the pinned bf16 parameter buffer under --offload-param.
void cast_f32_to_bf16_host(const float* src, void* dst_bf16, std::int64_t n, ThreadPool& pool);

// One pass of the adam benchmark's same-shape memory probe over n elements (reads p, g, m, v;
// writes p, m, v back bitwise unchanged, on the pool's threads and ranges): its seconds. It
// leaves every array as it was, so it can run between the steps of a live arm.
double memory_probe_pass_s(float* p, const float* g, float* m, float* v, std::int64_t n,
                           ThreadPool& pool);

// The memory bandwidth the optimiser can hope for, measured now: memory_probe_pass_s over n
// elements, the median of `repeats` timed passes after one warm-up, counted at
// 28 B/param. Why the median: on the H200's shared host, single passes of 2^28 elements read
// 121-166 GB/s within one process while the full arrays streamed at 130-136 (zob_gpu_host_bench,
// results/h200/2026-12-02-host-memory): the fastest pass is a neighbour's lull, not a rate any
// step can hold.
double memory_probe_gb_per_s(float* p, const float* g, float* m, float* v, std::int64_t n,
                             ThreadPool& pool, int repeats = 5);

// x *= factor over n elements, split over the pool: DeepSpeed's unscale_and_clip_grads pass
// over the fp32 gradient partition before Adam (a `mul_` by 1/loss_scale, 1.0 in bf16 mode).
// IEEE multiplication: by 1.0 it changes no bit, a NaN stays a NaN.
void scale_host(float* x, std::int64_t n, float factor, ThreadPool& pool);

}  // namespace zob
