// CPU Adam and the host bf16 cast: constants, ISA selection, and the split over the pool.
// The kernels are element-wise and every element goes through the same instructions wherever
// it falls in a range (the vector kernels do their remainders with masked vector ops), so for a
// given ISA the result is bitwise independent of the thread count.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "optim/adam_kernels.hpp"
#include "zob/errors.hpp"
#include "zob/stats.hpp"
#include "zob/thread_pool.hpp"

namespace zob::detail {

const char* to_string(AdamIsa isa) {
  switch (isa) {
    case AdamIsa::avx512: return "avx512";
    case AdamIsa::avx2: return "avx2";
    case AdamIsa::scalar: break;
  }
  return "scalar";
}

bool isa_supported(AdamIsa isa) {
  switch (isa) {
    case AdamIsa::scalar: return true;
#if ZOB_OPTIM_X86
    case AdamIsa::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case AdamIsa::avx512: return __builtin_cpu_supports("avx512f");
#else
    case AdamIsa::avx2:
    case AdamIsa::avx512: return false;
#endif
  }
  return false;
}

AdamIsa selected_isa() {
  const char* forced = std::getenv("ZOB_ADAM_ISA");
  if (forced != nullptr && *forced != '\0') {
    const std::string_view name(forced);
    AdamIsa isa;
    if (name == "scalar") {
      isa = AdamIsa::scalar;
    } else if (name == "avx2") {
      isa = AdamIsa::avx2;
    } else if (name == "avx512") {
      isa = AdamIsa::avx512;
    } else {
      throw UsageError("ZOB_ADAM_ISA=" + std::string(name) +
                       " is not an ISA of CPU Adam; use scalar, avx2 or avx512, or unset it");
    }
    if (!isa_supported(isa)) {
      throw UsageError("ZOB_ADAM_ISA=" + std::string(name) +
                       " but this CPU (or build) cannot run it; use a lower one or unset it");
    }
    return isa;
  }
  if (isa_supported(AdamIsa::avx512)) return AdamIsa::avx512;
  if (isa_supported(AdamIsa::avx2)) return AdamIsa::avx2;
  return AdamIsa::scalar;
}

AdamConsts adam_consts(int step, const AdamHyper& h) {
  // Bias corrections in double, rounded once, so large step counts lose nothing in pow.
  double bc1 = 1.0, bc2 = 1.0;
  if (h.bias_correction) {
    bc1 = 1.0 - std::pow(static_cast<double>(h.beta1), step);
    bc2 = 1.0 - std::pow(static_cast<double>(h.beta2), step);
  }
  AdamConsts c{};
  c.beta1 = h.beta1;
  c.one_minus_beta1 = 1.0f - h.beta1;
  c.beta2 = h.beta2;
  c.one_minus_beta2 = 1.0f - h.beta2;
  c.neg_step_size = static_cast<float>(-static_cast<double>(h.lr) / bc1);
  c.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  c.eps = h.eps;
  c.neg_lr_wd = -h.lr * h.weight_decay;
  c.decay = h.weight_decay != 0.0f;
  return c;
}

AdamRangeFn adam_kernel(AdamIsa isa) {
#if ZOB_OPTIM_X86
  if (isa == AdamIsa::avx512) return adam_range_avx512;
  if (isa == AdamIsa::avx2) return adam_range_avx2;
#endif
  (void)isa;
  return adam_range_scalar;
}

AdamCastRangeFn adam_cast_kernel(AdamIsa isa) {
#if ZOB_OPTIM_X86
  if (isa == AdamIsa::avx512) return adam_cast_range_avx512;
  if (isa == AdamIsa::avx2) return adam_cast_range_avx2;
#endif
  (void)isa;
  return adam_cast_range_scalar;
}

CastRangeFn cast_kernel(AdamIsa isa) {
#if ZOB_OPTIM_X86
  if (isa == AdamIsa::avx512) return cast_range_avx512;
  if (isa == AdamIsa::avx2) return cast_range_avx2;
#endif
  (void)isa;
  return cast_range_scalar;
}

std::uint32_t probe_mask() {
  // volatile: the compiler must read it at run time, so it cannot fold the probe's stores away.
  static volatile std::uint32_t zero = 0;
  return zero;
}

ProbeRangeFn probe_kernel(AdamIsa isa) {
#if ZOB_OPTIM_X86
  if (isa == AdamIsa::avx512) return probe_range_avx512;
  if (isa == AdamIsa::avx2) return probe_range_avx2;
#endif
  (void)isa;
  return probe_range_scalar;
}

namespace {

void require(AdamIsa isa) {
  if (!isa_supported(isa)) {
    throw UsageError(std::string("CPU Adam: ISA ") + to_string(isa) +
                     " is not supported by this CPU or build");
  }
}

// 64 elements = 256 B of fp32: ranges start on cache-line (and vector) boundaries.
constexpr std::int64_t kAlign = 64;

void check_adam_args(AdamIsa isa, const char* who, std::int64_t n, int step) {
  require(isa);
  if (n < 0) throw UsageError(std::string(who) + ": n = " + std::to_string(n) + " must be >= 0");
  if (step < 1) {
    throw UsageError(std::string(who) + ": step = " + std::to_string(step) + " must be >= 1");
  }
}

}  // namespace

void adam_step_isa(AdamIsa isa, float* params, const float* grads, float* exp_avg,
                   float* exp_avg_sq, std::int64_t n, int step, const AdamHyper& hyper,
                   ThreadPool& pool) {
  check_adam_args(isa, "adam_step", n, step);
  if (n == 0) return;
  const AdamConsts c = adam_consts(step, hyper);
  const AdamRangeFn kernel = adam_kernel(isa);
  pool.parallel_for(
      n,
      [&](std::int64_t b, std::int64_t e) {
        kernel(params + b, grads + b, exp_avg + b, exp_avg_sq + b, e - b, c);
      },
      kAlign);
}

void adam_step_cast_isa(AdamIsa isa, float* params, const float* grads, float* exp_avg,
                        float* exp_avg_sq, void* params_bf16, std::int64_t n, int step,
                        const AdamHyper& hyper, ThreadPool& pool) {
  check_adam_args(isa, "adam_step_cast", n, step);
  if (n == 0) return;
  const AdamConsts c = adam_consts(step, hyper);
  const AdamCastRangeFn kernel = adam_cast_kernel(isa);
  auto* out = static_cast<std::uint16_t*>(params_bf16);
  pool.parallel_for(
      n,
      [&](std::int64_t b, std::int64_t e) {
        kernel(params + b, grads + b, exp_avg + b, exp_avg_sq + b, out + b, e - b, c);
      },
      kAlign);
}

void cast_f32_to_bf16_isa(AdamIsa isa, const float* src, void* dst_bf16, std::int64_t n,
                          ThreadPool& pool) {
  require(isa);
  if (n < 0) throw UsageError("cast_f32_to_bf16_host: n = " + std::to_string(n) + " must be >= 0");
  if (n == 0) return;
  auto* dst = static_cast<std::uint16_t*>(dst_bf16);
  const CastRangeFn kernel = cast_kernel(isa);
  pool.parallel_for(
      n, [&](std::int64_t b, std::int64_t e) { kernel(src + b, dst + b, e - b); }, kAlign);
}

}  // namespace zob::detail

namespace zob {

void adam_step(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::int64_t n,
               int step, const AdamHyper& hyper, ThreadPool& pool) {
  detail::adam_step_isa(detail::selected_isa(), params, grads, exp_avg, exp_avg_sq, n, step, hyper,
                        pool);
}

void adam_step_cast(float* params, const float* grads, float* exp_avg, float* exp_avg_sq,
                    void* params_bf16, std::int64_t n, int step, const AdamHyper& hyper,
                    ThreadPool& pool) {
  detail::adam_step_cast_isa(detail::selected_isa(), params, grads, exp_avg, exp_avg_sq,
                             params_bf16, n, step, hyper, pool);
}

const char* adam_isa() { return detail::to_string(detail::selected_isa()); }

void cast_f32_to_bf16_host(const float* src, void* dst_bf16, std::int64_t n, ThreadPool& pool) {
  detail::cast_f32_to_bf16_isa(detail::selected_isa(), src, dst_bf16, n, pool);
}

double memory_probe_pass_s(float* p, const float* g, float* m, float* v, std::int64_t n,
                           ThreadPool& pool) {
  if (n <= 0) throw UsageError("memory_probe_pass_s: n must be >= 1");
  const detail::ProbeRangeFn kernel = detail::probe_kernel(detail::selected_isa());
  const std::uint32_t mask = detail::probe_mask();
  const auto t0 = std::chrono::steady_clock::now();
  pool.parallel_for(
      n, [&](std::int64_t b, std::int64_t e) { kernel(p + b, g + b, m + b, v + b, e - b, mask); },
      detail::kAlign);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double memory_probe_gb_per_s(float* p, const float* g, float* m, float* v, std::int64_t n,
                             ThreadPool& pool, int repeats) {
  if (n <= 0 || repeats < 1) throw UsageError("memory_probe_gb_per_s: n and repeats must be >= 1");
  memory_probe_pass_s(p, g, m, v, n, pool);  // warm-up: pages, caches, thread wake-up
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) t.push_back(memory_probe_pass_s(p, g, m, v, n, pool));
  return static_cast<double>(n) * 28.0 / median(t) / 1e9;
}

void scale_host(float* x, std::int64_t n, float factor, ThreadPool& pool) {
  if (n < 0) throw UsageError("scale_host: n = " + std::to_string(n) + " must be >= 0");
  pool.parallel_for(n, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) x[i] *= factor;  // vectorised by the compiler
  });
}

}  // namespace zob
