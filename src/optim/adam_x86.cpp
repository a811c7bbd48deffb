// AVX2+FMA and AVX-512F kernels, compiled with function-level target attributes so the rest of
// the binary stays baseline x86-64 and runs on CPUs without them (selection: adam.cpp).
// Math as DeepSpeed's Step_AVX: m = fma(g, 1-b1, b1*m); v = fma(g*g, 1-b2, b2*v);
// denom = fma(sqrt(v), 1/sqrt(1-b2^t), eps); p = fma(p, -lr*wd, p); p = fma(m/denom, -step, p).
// Remainders use masked loads/stores, so every element runs the same instructions.
// Plain stores on purpose: the update is in place, so each line written was just read and a
// plain store costs no extra write-allocate read, while streaming stores evicted the lines and
// ran at ~0.65x the probe's bandwidth (measured). Software prefetch (8 lines ahead on all four
// streams) made no difference beyond noise: the hardware prefetcher follows four linear streams.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

// GCC 12's AVX-512 headers trip -Wmaybe-uninitialized on their own _mm512_undefined_*()
// placeholders (GCC bug 105593); nothing of ours is uninitialised.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "optim/adam_kernels.hpp"

#define ZOB_AVX2 __attribute__((target("avx2,fma")))
#define ZOB_AVX512 __attribute__((target("avx512f")))

namespace zob::detail {
namespace {

// ---- AVX-512F ---------------------------------------------------------------------------

struct Consts512 {
  __m512 b1, omb1, b2, omb2, neg_step, inv_bc2, eps, neg_lr_wd;
};

ZOB_AVX512 inline Consts512 consts512(const AdamConsts& c) {
  return {_mm512_set1_ps(c.beta1),         _mm512_set1_ps(c.one_minus_beta1),
          _mm512_set1_ps(c.beta2),         _mm512_set1_ps(c.one_minus_beta2),
          _mm512_set1_ps(c.neg_step_size), _mm512_set1_ps(c.inv_sqrt_bc2),
          _mm512_set1_ps(c.eps),           _mm512_set1_ps(c.neg_lr_wd)};
}

template <bool Decay>
ZOB_AVX512 inline void adam16(__m512& p, __m512 g, __m512& m, __m512& v, const Consts512& k) {
  m = _mm512_fmadd_ps(g, k.omb1, _mm512_mul_ps(m, k.b1));
  v = _mm512_fmadd_ps(_mm512_mul_ps(g, g), k.omb2, _mm512_mul_ps(v, k.b2));
  const __m512 denom = _mm512_fmadd_ps(_mm512_sqrt_ps(v), k.inv_bc2, k.eps);
  if constexpr (Decay) p = _mm512_fmadd_ps(p, k.neg_lr_wd, p);
  p = _mm512_fmadd_ps(_mm512_div_ps(m, denom), k.neg_step, p);
}

template <bool Decay>
ZOB_AVX512 void adam_avx512(float* p, const float* g, float* m, float* v, std::int64_t n,
                            const AdamConsts& c) {
  const Consts512 k = consts512(c);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 pv = _mm512_loadu_ps(p + i), mv = _mm512_loadu_ps(m + i), vv = _mm512_loadu_ps(v + i);
    adam16<Decay>(pv, _mm512_loadu_ps(g + i), mv, vv, k);
    _mm512_storeu_ps(p + i, pv);
    _mm512_storeu_ps(m + i, mv);
    _mm512_storeu_ps(v + i, vv);
  }
  if (i < n) {
    const auto mask = static_cast<__mmask16>((1u << (n - i)) - 1u);
    __m512 pv = _mm512_maskz_loadu_ps(mask, p + i), mv = _mm512_maskz_loadu_ps(mask, m + i);
    __m512 vv = _mm512_maskz_loadu_ps(mask, v + i);
    adam16<Decay>(pv, _mm512_maskz_loadu_ps(mask, g + i), mv, vv, k);
    _mm512_mask_storeu_ps(p + i, mask, pv);
    _mm512_mask_storeu_ps(m + i, mask, mv);
    _mm512_mask_storeu_ps(v + i, mask, vv);
  }
}

// bf16 bits of 16 floats, one per 32-bit lane: round to nearest even, NaN -> quiet NaN
// (bf16.hpp), in integers.
ZOB_AVX512 inline __m512i bf16x16_dwords(__m512i u) {
  const __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7f800000));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  __m512i r =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_mask_mov_epi32(r, nan, quiet);
}

// The same, packed to 16 bf16.
ZOB_AVX512 inline __m256i bf16x16(__m512i u) { return _mm512_cvtepi32_epi16(bf16x16_dwords(u)); }

// ---- AVX2 + FMA -------------------------------------------------------------------------

struct Consts256 {
  __m256 b1, omb1, b2, omb2, neg_step, inv_bc2, eps, neg_lr_wd;
};

ZOB_AVX2 inline Consts256 consts256(const AdamConsts& c) {
  return {_mm256_set1_ps(c.beta1),         _mm256_set1_ps(c.one_minus_beta1),
          _mm256_set1_ps(c.beta2),         _mm256_set1_ps(c.one_minus_beta2),
          _mm256_set1_ps(c.neg_step_size), _mm256_set1_ps(c.inv_sqrt_bc2),
          _mm256_set1_ps(c.eps),           _mm256_set1_ps(c.neg_lr_wd)};
}

template <bool Decay>
ZOB_AVX2 inline void adam8(__m256& p, __m256 g, __m256& m, __m256& v, const Consts256& k) {
  m = _mm256_fmadd_ps(g, k.omb1, _mm256_mul_ps(m, k.b1));
  v = _mm256_fmadd_ps(_mm256_mul_ps(g, g), k.omb2, _mm256_mul_ps(v, k.b2));
  const __m256 denom = _mm256_fmadd_ps(_mm256_sqrt_ps(v), k.inv_bc2, k.eps);
  if constexpr (Decay) p = _mm256_fmadd_ps(p, k.neg_lr_wd, p);
  p = _mm256_fmadd_ps(_mm256_div_ps(m, denom), k.neg_step, p);
}

ZOB_AVX2 inline __m256i tail_mask8(std::int64_t left) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left)), lane);
}

template <bool Decay>
ZOB_AVX2 void adam_avx2(float* p, const float* g, float* m, float* v, std::int64_t n,
                        const AdamConsts& c) {
  const Consts256 k = consts256(c);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 pv = _mm256_loadu_ps(p + i), mv = _mm256_loadu_ps(m + i), vv = _mm256_loadu_ps(v + i);
    adam8<Decay>(pv, _mm256_loadu_ps(g + i), mv, vv, k);
    _mm256_storeu_ps(p + i, pv);
    _mm256_storeu_ps(m + i, mv);
    _mm256_storeu_ps(v + i, vv);
  }
  if (i < n) {
    const __m256i mask = tail_mask8(n - i);
    __m256 pv = _mm256_maskload_ps(p + i, mask), mv = _mm256_maskload_ps(m + i, mask);
    __m256 vv = _mm256_maskload_ps(v + i, mask);
    adam8<Decay>(pv, _mm256_maskload_ps(g + i, mask), mv, vv, k);
    _mm256_maskstore_ps(p + i, mask, pv);
    _mm256_maskstore_ps(m + i, mask, mv);
    _mm256_maskstore_ps(v + i, mask, vv);
  }
}

// bf16 bits of 16 floats (two halves), as bf16x16 above.
ZOB_AVX2 inline __m256i bf16x8_dwords(__m256i u) {
  const __m256i abs = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(r, quiet, nan);
}

ZOB_AVX2 inline __m256i bf16x16_avx2(__m256i lo, __m256i hi) {
  // packus interleaves 128-bit lanes: [lo0-3 hi0-3 | lo4-7 hi4-7]; the permute restores order.
  const __m256i packed = _mm256_packus_epi32(bf16x8_dwords(lo), bf16x8_dwords(hi));
  return _mm256_permute4x64_epi64(packed, 0xD8);
}

}  // namespace

ZOB_AVX512 void adam_range_avx512(float* p, const float* g, float* m, float* v, std::int64_t n,
                                  const AdamConsts& c) {
  if (c.decay) {
    adam_avx512<true>(p, g, m, v, n, c);
  } else {
    adam_avx512<false>(p, g, m, v, n, c);
  }
}

ZOB_AVX2 void adam_range_avx2(float* p, const float* g, float* m, float* v, std::int64_t n,
                              const AdamConsts& c) {
  if (c.decay) {
    adam_avx2<true>(p, g, m, v, n, c);
  } else {
    adam_avx2<false>(p, g, m, v, n, c);
  }
}

// The cast writes a buffer it does not read, so plain stores pay a write-allocate read of each
// destination line; streaming stores skip it (measured on a 2-core Sapphire Rapids VM: about
// +20% for 100M elements). Small ranges keep plain stores: their output may still be in cache
// when it is used. Streaming needs 32-byte aligned destinations, so a few leading elements go
// through the scalar definition first (integer-exact: the same bits either way).
constexpr std::int64_t kStreamMin = std::int64_t{1} << 14;

inline std::int64_t scalar_lead(const std::uint16_t* dst, std::int64_t n) {
  const auto misalign = reinterpret_cast<std::uintptr_t>(dst) & 31u;
  const std::int64_t lead = misalign == 0 ? 0 : static_cast<std::int64_t>((32u - misalign) / 2u);
  return misalign % 2 != 0 ? n : std::min(lead, n);  // an odd address can never align
}

ZOB_AVX512 void cast_range_avx512(const float* src, std::uint16_t* dst, std::int64_t n) {
  std::int64_t i = 0;
  if (n >= kStreamMin) {
    i = scalar_lead(dst, n);
    cast_range_scalar(src, dst, i);
    for (; i + 16 <= n; i += 16) {
      const __m512i u = _mm512_loadu_si512(src + i);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), bf16x16(u));
    }
    _mm_sfence();  // streaming stores are weakly ordered: publish them before the pool's join
  }
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_loadu_si512(src + i);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), bf16x16(u));
  }
  // Fewer than 16 left: integer-exact, so the scalar definition gives the same bits.
  cast_range_scalar(src + i, dst + i, n - i);
}

ZOB_AVX2 void cast_range_avx2(const float* src, std::uint16_t* dst, std::int64_t n) {
  std::int64_t i = 0;
  if (n >= kStreamMin) {
    i = scalar_lead(dst, n);
    cast_range_scalar(src, dst, i);
    for (; i + 16 <= n; i += 16) {
      const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
      const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8));
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), bf16x16_avx2(lo, hi));
    }
    _mm_sfence();
  }
  for (; i + 16 <= n; i += 16) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), bf16x16_avx2(lo, hi));
  }
  cast_range_scalar(src + i, dst + i, n - i);
}

// The probe: the same loads and stores as the Adam kernels and one AND + XOR per array, so
// only the arithmetic differs (see adam_bench.cpp); with mask 0 nothing changes (ProbeRangeFn).
ZOB_AVX512 inline void flip16(float* x, __m512i gm) {
  _mm512_storeu_si512(x, _mm512_xor_si512(_mm512_loadu_si512(x), gm));
}

ZOB_AVX512 void probe_range_avx512(float* p, const float* g, float* m, float* v, std::int64_t n,
                                   std::uint32_t mask) {
  const __m512i mk = _mm512_set1_epi32(static_cast<int>(mask));
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i gm = _mm512_and_si512(_mm512_loadu_si512(g + i), mk);
    flip16(p + i, gm);
    flip16(m + i, gm);
    flip16(v + i, gm);
  }
  probe_range_scalar(p + i, g + i, m + i, v + i, n - i, mask);
}

ZOB_AVX2 inline void flip8(float* x, __m256 gm) {
  _mm256_storeu_ps(x, _mm256_xor_ps(_mm256_loadu_ps(x), gm));
}

ZOB_AVX2 void probe_range_avx2(float* p, const float* g, float* m, float* v, std::int64_t n,
                               std::uint32_t mask) {
  const __m256 mk = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(mask)));
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 gm = _mm256_and_ps(_mm256_loadu_ps(g + i), mk);
    flip8(p + i, gm);
    flip8(m + i, gm);
    flip8(v + i, gm);
  }
  probe_range_scalar(p + i, g + i, m + i, v + i, n - i, mask);
}

// ---- Adam fused with the cast -----------------------------------------------------------
// adam16 / adam8 unchanged, then the updated p cast to bf16 while it is still in a register:
// one pass, 30 B/param. p, m and v are the Adam kernels' bit for bit, and the bf16 bits are the
// cast kernels' integer rounding of that p. The bf16 buffer is written, not read, so large
// ranges use streaming stores as the cast kernels do, after a lead of elements that brings the
// destination to the store's alignment. The lead and the tail go through the same vector
// instructions under a mask, never through scalar Adam (whose separate multiply and add round
// differently from the fma): every element of one ISA gets the same instructions.

namespace {

template <bool Decay, bool Stream>
ZOB_AVX512 inline void adam_cast16(float* p, const float* g, float* m, float* v, std::uint16_t* out,
                                   const Consts512& k) {
  __m512 pv = _mm512_loadu_ps(p), mv = _mm512_loadu_ps(m), vv = _mm512_loadu_ps(v);
  adam16<Decay>(pv, _mm512_loadu_ps(g), mv, vv, k);
  _mm512_storeu_ps(p, pv);
  _mm512_storeu_ps(m, mv);
  _mm512_storeu_ps(v, vv);
  const __m256i b = bf16x16(_mm512_castps_si512(pv));
  if constexpr (Stream) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out), b);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), b);
  }
}

// The first `count` (< 16) elements only.
template <bool Decay>
ZOB_AVX512 inline void adam_cast16_masked(float* p, const float* g, float* m, float* v,
                                          std::uint16_t* out, std::int64_t count,
                                          const Consts512& k) {
  const auto mask = static_cast<__mmask16>((1u << count) - 1u);
  __m512 pv = _mm512_maskz_loadu_ps(mask, p), mv = _mm512_maskz_loadu_ps(mask, m);
  __m512 vv = _mm512_maskz_loadu_ps(mask, v);
  adam16<Decay>(pv, _mm512_maskz_loadu_ps(mask, g), mv, vv, k);
  _mm512_mask_storeu_ps(p, mask, pv);
  _mm512_mask_storeu_ps(m, mask, mv);
  _mm512_mask_storeu_ps(v, mask, vv);
  _mm512_mask_cvtepi32_storeu_epi16(out, mask, bf16x16_dwords(_mm512_castps_si512(pv)));
}

template <bool Decay>
ZOB_AVX512 void adam_cast_avx512(float* p, const float* g, float* m, float* v, std::uint16_t* out,
                                 std::int64_t n, const AdamConsts& c) {
  const Consts512 k = consts512(c);
  std::int64_t i = 0;
  if (n >= kStreamMin && (reinterpret_cast<std::uintptr_t>(out) & 1u) == 0) {
    i = scalar_lead(out, n);  // < 16 elements to a 32-byte boundary
    if (i > 0) adam_cast16_masked<Decay>(p, g, m, v, out, i, k);
    for (; i + 16 <= n; i += 16) {
      adam_cast16<Decay, true>(p + i, g + i, m + i, v + i, out + i, k);
    }
    _mm_sfence();  // publish the streaming stores before the pool's join
  }
  for (; i + 16 <= n; i += 16) adam_cast16<Decay, false>(p + i, g + i, m + i, v + i, out + i, k);
  if (i < n) adam_cast16_masked<Decay>(p + i, g + i, m + i, v + i, out + i, n - i, k);
}

template <bool Decay, bool Stream>
ZOB_AVX2 inline void adam_cast8(float* p, const float* g, float* m, float* v, std::uint16_t* out,
                                const Consts256& k) {
  __m256 pv = _mm256_loadu_ps(p), mv = _mm256_loadu_ps(m), vv = _mm256_loadu_ps(v);
  adam8<Decay>(pv, _mm256_loadu_ps(g), mv, vv, k);
  _mm256_storeu_ps(p, pv);
  _mm256_storeu_ps(m, mv);
  _mm256_storeu_ps(v, vv);
  // The 8 bf16 (each < 2^16, so the unsigned saturation of packus keeps them) in order.
  const __m256i d = bf16x8_dwords(_mm256_castps_si256(pv));
  const __m128i b = _mm_packus_epi32(_mm256_castsi256_si128(d), _mm256_extracti128_si256(d, 1));
  if constexpr (Stream) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(out), b);
  } else {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), b);
  }
}

// The first `count` (< 8) elements only. AVX2 has no masked 16-bit store: the updated p goes
// through a stack copy to the scalar cast (integer-exact: the same bits as the vector one).
template <bool Decay>
ZOB_AVX2 inline void adam_cast8_masked(float* p, const float* g, float* m, float* v,
                                       std::uint16_t* out, std::int64_t count, const Consts256& k) {
  const __m256i mask = tail_mask8(count);
  __m256 pv = _mm256_maskload_ps(p, mask), mv = _mm256_maskload_ps(m, mask);
  __m256 vv = _mm256_maskload_ps(v, mask);
  adam8<Decay>(pv, _mm256_maskload_ps(g, mask), mv, vv, k);
  _mm256_maskstore_ps(p, mask, pv);
  _mm256_maskstore_ps(m, mask, mv);
  _mm256_maskstore_ps(v, mask, vv);
  alignas(32) float updated[8];
  _mm256_store_ps(updated, pv);
  cast_range_scalar(updated, out, count);
}

template <bool Decay>
ZOB_AVX2 void adam_cast_avx2(float* p, const float* g, float* m, float* v, std::uint16_t* out,
                             std::int64_t n, const AdamConsts& c) {
  const Consts256 k = consts256(c);
  std::int64_t i = 0;
  const auto misalign = reinterpret_cast<std::uintptr_t>(out) & 15u;
  if (n >= kStreamMin && misalign % 2 == 0) {
    i = misalign == 0 ? 0 : static_cast<std::int64_t>((16u - misalign) / 2u);  // < 8
    if (i > 0) adam_cast8_masked<Decay>(p, g, m, v, out, i, k);
    for (; i + 8 <= n; i += 8) adam_cast8<Decay, true>(p + i, g + i, m + i, v + i, out + i, k);
    _mm_sfence();
  }
  for (; i + 8 <= n; i += 8) adam_cast8<Decay, false>(p + i, g + i, m + i, v + i, out + i, k);
  if (i < n) adam_cast8_masked<Decay>(p + i, g + i, m + i, v + i, out + i, n - i, k);
}

}  // namespace

ZOB_AVX512 void adam_cast_range_avx512(float* p, const float* g, float* m, float* v,
                                       std::uint16_t* out, std::int64_t n, const AdamConsts& c) {
  if (c.decay) {
    adam_cast_avx512<true>(p, g, m, v, out, n, c);
  } else {
    adam_cast_avx512<false>(p, g, m, v, out, n, c);
  }
}

ZOB_AVX2 void adam_cast_range_avx2(float* p, const float* g, float* m, float* v, std::uint16_t* out,
                                   std::int64_t n, const AdamConsts& c) {
  if (c.decay) {
    adam_cast_avx2<true>(p, g, m, v, out, n, c);
  } else {
    adam_cast_avx2<false>(p, g, m, v, out, n, c);
  }
}

}  // namespace zob::detail
