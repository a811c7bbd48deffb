#include "driver/fault_device.hpp"

#include <fmt/format.h>
#include <algorithm>

#include "zob/errors.hpp"

namespace zob::test_hooks {

Device::Occupancy FaultDevice::occupancy() const {
  Occupancy o = inner().occupancy();
  if (o.free_bytes == 0) o.free_bytes = kKnownFree;
  if (shared_.other_processes >= 0) o.other_processes = shared_.other_processes;
  o.free_bytes -= std::min(o.free_bytes, shared_.free_taken);
  return o;
}

void FaultDevice::before(const char* op) {
  if (!lost_) {
    if (op_ != op || ++calls_ != at_) return;
    lost_ = true;
    throw DeviceError(DeviceErrorKind::runtime,
                      fmt::format("{}: {} failed: device lost (test fault ZOB_TEST_DEVICE_FAULT "
                                  "at its call {})",
                                  inner().info().backend, op, at_));
  }
  throw DeviceError(DeviceErrorKind::runtime,
                    fmt::format("{}: {} failed: device lost (test fault ZOB_TEST_DEVICE_FAULT, "
                                "an earlier {} call)",
                                inner().info().backend, op, op_));
}

}  // namespace zob::test_hooks
