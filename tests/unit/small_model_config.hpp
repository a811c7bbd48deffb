// The small synthetic workload several step tests share: P = 2*61*8 + 3*(8*64 + 40) = 2632
// parameters; modules: embedding 488, 3 layers of 552, head 488.
#pragma once
#include <cstdint>

#include "step/deepspeed/deepspeed_plan.hpp"
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
  c.schedule = Schedule::stock;  // the algorithm's step; the deepspeed tests choose theirs
  return c;
}

// DeepSpeed's ZeRO-3 settings shrunk to this model (tensors of 8..512 elements), so that a
// deepspeed step reaches every rule: fetches, releases, prefetches, several bucket flushes.
inline step_detail::DeepSpeedKnobs tiny_deepspeed_knobs() {
  step_detail::DeepSpeedKnobs k;
  k.persistence_threshold = 8;  // only the 8-element biases stay on the device
  k.prefetch_bucket = 600;      // a prefetch reaches about one module ahead
  k.max_live = 2000;            // less than the model: the live limit bites
  k.max_reuse_distance = 1200;  // early layers are released in forward, fetched again
  k.reduce_bucket = 700;        // several flushes per backward
  k.max_reduce_events = 1;      // and the back-pressure wait
  return k;
}

}  // namespace zob::test
