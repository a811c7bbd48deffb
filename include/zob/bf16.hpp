// bfloat16 storage type and the two conversions every backend must agree on bit for bit.
#pragma once
#include <cstdint>
#include <cstring>

namespace zob {

// Storage-only bf16: the upper 16 bits of an IEEE fp32. Arithmetic is always done in fp32.
struct bf16 {
  std::uint16_t bits;
};
static_assert(sizeof(bf16) == 2);

inline float bf16_to_f32(bf16 v) {
  std::uint32_t u = static_cast<std::uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest, ties to even; a NaN stays a quiet NaN (sign kept), as PyTorch and
// DeepSpeed do. Every backend's cast kernel must reproduce this exactly.
inline bf16 f32_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return bf16{static_cast<std::uint16_t>((u >> 16) | 0x0040u)};
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<std::uint16_t>(u >> 16)};
}

}  // namespace zob
