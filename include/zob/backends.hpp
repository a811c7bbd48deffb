// The device backends, declared once: the --device name, the plugin file the registry loads
// (nullptr: linked into the executable), why a build without it cannot run it, whether
// --device auto tries it, and the runtime call behind the hostalloc arm. Everything above the
// device interface that names the backends (the config's names, the registry, --list-devices,
// the CLI's texts, the MPI launcher, the report) reads this table.
#pragma once
#include <string>
#include <string_view>

#include "zob/config.hpp"

// Plugin file names, next to the executable (CMake's OUTPUT_NAME of each plugin target).
#define ZOB_CUDA_PLUGIN "zob-backend-cuda.so"
#define ZOB_LEVEL_ZERO_PLUGIN "zob-backend-level-zero.so"

namespace zob {

struct BackendInfo {
  DeviceKind kind;
  const char* name;        // --device NAME, DeviceInfo::backend, DRIVERRESULT's "device"
  const char* plugin;      // file next to the executable; nullptr: linked in
  const char* not_built;   // the reason a build without the plugin gives
  bool accelerator;        // tried by --device auto, in table order, before the CPU device
  const char* host_alloc;  // the runtime's allocation of the hostalloc arm's pinned memory
};

// In the order the texts list them (and --list-devices probes them).
inline constexpr BackendInfo kBackends[] = {
    {DeviceKind::cpu, "cpu", nullptr, nullptr, false, "allocate_host"},
    {DeviceKind::cuda, "cuda", ZOB_CUDA_PLUGIN,
     "this build has no CUDA backend (configure on a machine with the CUDA toolkit)", true,
     "cudaMallocHost"},
    {DeviceKind::xpu, "xpu", ZOB_LEVEL_ZERO_PLUGIN,
     "this build has no Level Zero backend (configure with libze-dev installed)", true,
     "zeMemAllocHost"},
};

// The entry named `name` ("cpu", "cuda", "xpu"); nullptr for any other.
const BackendInfo* find_backend(std::string_view name);
// The entry of `kind`; nullptr for DeviceKind::automatic.
const BackendInfo* find_backend(DeviceKind kind);

// The names joined for a sentence: "cpu, cuda or xpu" (conjunction "or"), "cpu, cuda and xpu";
// conjunction "|": "cpu|cuda|xpu".
// `with_auto` puts "auto" first: "auto, cpu, cuda or xpu".
std::string backend_names(std::string_view conjunction, bool with_auto = false);

}  // namespace zob
