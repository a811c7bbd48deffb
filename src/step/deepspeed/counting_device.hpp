// Internal to src/step: a Device that forwards every call to another (zob/forwarding_device.hpp)
// and counts the device operations issued through it: kernels (every kernel call, fill and
// fill_zero: eager's memsets and fills are device ops too) and copies, and of those the copies
// over the link by direction. The deepspeed schedule runs its module math through one, and its
// parameter fetches and gradient copies through another, to record each module's counts beside
// its plan (ArmResult::device_ops).
#pragma once
#include <cstdint>
#include <cstring>

#include "zob/forwarding_device.hpp"

namespace zob::step_detail {

class CountingDevice final : public ForwardingDevice {
 public:
  struct Counts {
    std::int64_t kernels = 0, copies = 0;
    std::int64_t h2d = 0, d2h = 0;  // of the copies: copy_to_device, copy_to_host
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
      if (std::strcmp(op, "copy_to_device") == 0) ++counts_.h2d;
      if (std::strcmp(op, "copy_to_host") == 0) ++counts_.d2h;
    } else {
      ++counts_.kernels;
    }
  }

  Counts counts_;
};

}  // namespace zob::step_detail
