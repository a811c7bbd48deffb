// Test plugin: loads like a real backend, then reports that there is no device.
#include "zob/backend_plugin.hpp"
#include "zob/errors.hpp"

extern "C" zob::Device* zob_backend_create_device(int index) {
  throw zob::DeviceError(
      zob::DeviceErrorKind::unavailable,
      "fake plugin: no CUDA device (asked for index " + std::to_string(index) + ")");
}
