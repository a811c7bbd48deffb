// The small synthetic workload several step tests share: P = 2*61*8 + 3*(8*64 + 40) = 2632
// parameters; modules: embedding 488, 3 layers of 552, head 488.
#pragma once
#include <cstdint>

#include "zob/config.hpp"

namespace zob::test {

inline RunConfig small_model_config(int steps, int warmup, int threads, std::uint64_t seed) {
  RunConfig c;
  c.model = {61, 8, 3};
  c.batch = 3;
  c.seq = 4;
  c.steps = steps;
  c.warmup = warmup;
  c.threads = threads;
  c.seed = seed;
  return c;
}

}  // namespace zob::test
