// The plugin's entry point: src/device/registry.cpp dlopen()s zob-backend-level-zero.so and
// calls this. Loading the plugin needs libze_loader.so.1; without it dlopen fails (exit 3).
#include "level_zero_device.hpp"
#include "zob/backend_plugin.hpp"

extern "C" zob::Device* zob_backend_create_device(int index) {
  return new zob::LevelZeroDevice(index);
}
