// --dry-run: what a run would allocate, and whether the pre-flight lets it start, printed on
// stdout (and written to --json FILE) without locking, registering or allocating anything
// and without starting an arm.
#pragma once
#include <cstdint>

#include "zob/config.hpp"
#include "zob/device.hpp"
#include "zob/environment.hpp"

namespace zob {

// Exit code: 0 when the run would pass the pre-flight, 2 (usage) when the pre-flight refuses
// it, with the same one-line reason a real run would give.
// device_free_bytes: the device's free memory as the probe found it (0 unknown; see DeviceMemory).
int run_dry_run(const RunConfig& config, const HostEnvironment& host, const DeviceInfo& device,
                std::uint64_t device_free_bytes);

}  // namespace zob
