// What the Adam tests (adam_test.cpp, adam_cast_test.cpp) share: the ISAs this CPU runs and
// the optimizer state they fill. Each test makes its own random data (other ranges, on purpose).
#pragma once
#include <vector>

#include "optim/adam_kernels.hpp"

namespace zob::adam_test {

inline std::vector<detail::AdamIsa> supported_isas() {
  std::vector<detail::AdamIsa> out;
  for (detail::AdamIsa isa :
       {detail::AdamIsa::scalar, detail::AdamIsa::avx2, detail::AdamIsa::avx512}) {
    if (detail::isa_supported(isa)) out.push_back(isa);
  }
  return out;
}

struct State {
  std::vector<float> p, g, m, v;
};

}  // namespace zob::adam_test
