#include "driver/fault_device.hpp"

#include <fmt/format.h>

#include "zob/errors.hpp"

namespace zob::test_hooks {

void FaultDevice::tick(const char* op) {
  if (!lost_) {
    if (op_ != op || ++calls_ != at_) return;
    lost_ = true;
    throw DeviceError(DeviceErrorKind::runtime,
                      fmt::format("{}: {} failed: device lost (test fault ZOB_TEST_DEVICE_FAULT "
                                  "at its call {})",
                                  inner_->info().backend, op, at_));
  }
  throw DeviceError(DeviceErrorKind::runtime,
                    fmt::format("{}: {} failed: device lost (test fault ZOB_TEST_DEVICE_FAULT, "
                                "an earlier {} call)",
                                inner_->info().backend, op, op_));
}

}  // namespace zob::test_hooks
