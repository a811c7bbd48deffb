// The entry point every accelerator backend plugin exports. The executable never links a
// vendor runtime: src/device/registry.cpp dlopen()s "zob-backend-<name>.so" from the
// executable's folder and calls this, so the binary starts on machines without CUDA or libze.
// A plugin whose runtime library is missing fails at dlopen, and the registry reports that
// (exit 3). Tests link the backends' static libraries directly instead.
#pragma once
#include "zob/backends.hpp"  // the plugin file names (kBackends)
#include "zob/device.hpp"

// Creates device `index` of the backend. Returns a heap object the caller owns (wrap it in
// std::unique_ptr<zob::Device>). Throws zob::DeviceError(unavailable) with one line saying
// why: no driver, no device, index out of range, driver/runtime version mismatch.
extern "C" zob::Device* zob_backend_create_device(int index);
using zob_backend_create_device_fn = zob::Device* (*)(int);
