#include "backends/cuda/nvml_processes.hpp"

#include <dlfcn.h>

#include <vector>

namespace zob::cuda {

namespace {

// NVML's C ABI, the few entries used here (nvml.h is not part of the CUDA toolkit's headers
// everywhere): the handle is opaque, the process record is nvmlProcessInfo_v2_t.
using NvmlReturn = int;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlInsufficientSize = 7;
struct NvmlDeviceSt;
using NvmlDevice = NvmlDeviceSt*;
struct NvmlProcessInfo {
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

struct Nvml {
  void* lib = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  NvmlReturn (*by_bus_id)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*processes)(NvmlDevice, unsigned int*, NvmlProcessInfo*) = nullptr;
};

// Loaded once per process; never unloaded (the process ends with the arm).
const Nvml& nvml() {
  static const Nvml loaded = [] {
    Nvml n;
    n.lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (n.lib == nullptr) return n;
    n.init = reinterpret_cast<NvmlReturn (*)()>(::dlsym(n.lib, "nvmlInit_v2"));
    n.shutdown = reinterpret_cast<NvmlReturn (*)()>(::dlsym(n.lib, "nvmlShutdown"));
    n.by_bus_id = reinterpret_cast<NvmlReturn (*)(const char*, NvmlDevice*)>(
        ::dlsym(n.lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    n.processes = reinterpret_cast<NvmlReturn (*)(NvmlDevice, unsigned int*, NvmlProcessInfo*)>(
        ::dlsym(n.lib, "nvmlDeviceGetComputeRunningProcesses_v3"));
    return n;
  }();
  return loaded;
}

// The device's compute processes, or -1; between nvmlInit and nvmlShutdown.
int count_others(const Nvml& n, const std::string& bus_id) {
  NvmlDevice dev = nullptr;
  if (n.by_bus_id(bus_id.c_str(), &dev) != kNvmlSuccess) return -1;
  std::vector<NvmlProcessInfo> infos(8);
  auto count = static_cast<unsigned int>(infos.size());
  NvmlReturn r = n.processes(dev, &count, infos.data());
  if (r == kNvmlInsufficientSize) {  // more processes than room: count holds the number
    infos.resize(count + 8);
    count = static_cast<unsigned int>(infos.size());
    r = n.processes(dev, &count, infos.data());
  }
  if (r != kNvmlSuccess) return -1;
  return others_listed(count);
}

}  // namespace

int nvml_other_processes(const std::string& bus_id) {
  const Nvml& n = nvml();
  if (n.init == nullptr || n.shutdown == nullptr || n.by_bus_id == nullptr ||
      n.processes == nullptr || bus_id.empty()) {
    return -1;
  }
  if (n.init() != kNvmlSuccess) return -1;
  const int others = count_others(n, bus_id);
  n.shutdown();
  return others;
}

}  // namespace zob::cuda
