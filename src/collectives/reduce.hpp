// Internal to src/collectives: the one summation every implementation uses, so the reduction
// order (rank 0 first, then 1, 2, ...; fp32) is the same everywhere.
#pragma once
#include <cstddef>

#include "zob/bf16.hpp"
#include "zob/collectives.hpp"

namespace zob::collectives_detail {

// out[i] = fp32(parts[0][i]) + fp32(parts[1][i]) + ... in that order; n_parts >= 1.
inline void sum_in_rank_order(const void* const* parts, int n_parts, ElemType type, float* out,
                              std::size_t n) {
  if (type == ElemType::bf16) {
    const auto* p0 = static_cast<const bf16*>(parts[0]);
    for (std::size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(p0[i]);
    for (int r = 1; r < n_parts; ++r) {
      const auto* p = static_cast<const bf16*>(parts[r]);
      for (std::size_t i = 0; i < n; ++i) out[i] += bf16_to_f32(p[i]);
    }
  } else {
    const auto* p0 = static_cast<const float*>(parts[0]);
    for (std::size_t i = 0; i < n; ++i) out[i] = p0[i];
    for (int r = 1; r < n_parts; ++r) {
      const auto* p = static_cast<const float*>(parts[r]);
      for (std::size_t i = 0; i < n; ++i) out[i] += p[i];
    }
  }
}

}  // namespace zob::collectives_detail
