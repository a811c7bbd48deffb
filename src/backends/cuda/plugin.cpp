// The plugin's one export (zob/backend_plugin.hpp): the executable dlopen()s this library and
// calls the function, so the executable itself never links the CUDA runtime.
#include "backends/cuda/cuda_device.hpp"
#include "zob/backend_plugin.hpp"

extern "C" __attribute__((visibility("default"))) zob::Device* zob_backend_create_device(
    int index) {
  return new zob::CudaDevice(index);
}
