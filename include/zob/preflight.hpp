// Pre-flight: before any arm starts, check that the machine can hold what the flags ask for,
// and refuse (UsageError, exit 2) with the numbers and the fix rather than failing half-way
// through an arm with memory locked.
#pragma once
#include <cstdint>

#include "zob/config.hpp"
#include "zob/environment.hpp"
#include "zob/step.hpp"

namespace zob {

// device_total_bytes: 0 when unknown. Throws UsageError naming the first shortfall.
void preflight_check(const RunConfig& config, const MemoryPlan& plan, const HostEnvironment& host,
                     std::uint64_t device_total_bytes);

}  // namespace zob
