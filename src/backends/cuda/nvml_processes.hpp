// Internal to src/backends/cuda: who else runs on the GPU, from NVML's process list, for
// Device::occupancy (two runs on one GPU, or a run beside a training job, make the arms' times
// meaningless). NVML is loaded at run time (dlopen of libnvidia-ml.so.1, which the driver
// installs), so the plugin needs neither its header nor its library to build or load.
#pragma once
#include <string>

namespace zob::cuda {

// The processes other than this one with a compute context on the GPU of PCI bus id `bus_id`
// (as cudaDeviceGetPCIBusId writes it); -1 when NVML is missing or does not answer (then the
// driver falls back on the device's free memory between arms).
int nvml_other_processes(const std::string& bus_id);

// Other processes from NVML's list of the GPU's processes, which holds this one too (it has a
// context there): one fewer, never below 0. In a container NVML lists host pids, which
// getpid() does not match, so this process is not searched for; it is counted out.
inline int others_listed(unsigned listed) { return listed > 0 ? static_cast<int>(listed) - 1 : 0; }

}  // namespace zob::cuda
