// Internal to src/step: a Device that forwards every call to another (zob/forwarding_device.hpp)
// and counts the device operations issued through it: kernels (every kernel call, fill and
// fill_zero: eager's memsets and fills are device ops too) and copies. The deepspeed schedule runs
// its module math through one to record each module's counts beside its plan
// (ArmResult::device_ops).
#pragma once
#include <cstdint>
#include <cstring>

#include "zob/forwarding_device.hpp"

namespace zob::step_detail {

class CountingDevice final : public ForwardingDevice {
 public:
  struct Counts {
    std::int64_t kernels = 0, copies = 0;
  };
  explicit CountingDevice(Device& inner) : ForwardingDevice(inner) {}
  Counts counts() const { return counts_; }

 private:
  // Every Device member that issues work on a queue: a copy, or else a kernel unless it only
  // orders, waits or allocates.
  void before(const char* op) override {
    static constexpr const char* kNotWork[] = {"allocate", "record", "queue_wait",
                                               "event_synchronize", "synchronize"};
    for (const char* name : kNotWork)
      if (std::strcmp(op, name) == 0) return;
    if (std::strncmp(op, "copy_", 5) == 0) {
      ++counts_.copies;
    } else {
      ++counts_.kernels;
    }
  }

  Counts counts_;
};

}  // namespace zob::step_detail
