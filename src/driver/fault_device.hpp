// Internal to src/driver: the test-only device faults of test_hooks.hpp
// (ZOB_TEST_DEVICE_FAULT, ZOB_TEST_DEVICE_SHARED, ZOB_TEST_REGISTRATION=<arm>:skip): a Device that
// forwards every call to the arm's real device (zob/forwarding_device.hpp) and makes the n-th call
// of one operation fail as a lost device would, on any backend (the CPU device included, so CI sees
// a fault in the middle of the steps without an accelerator). From that call on every operation
// fails, as the runtimes do once a device is lost; releasing memory and registrations still goes
// through, so the test can prove that nothing leaks.
#pragma once
#include <memory>
#include <string>

#include "zob/forwarding_device.hpp"

namespace zob::test_hooks {

// The wrapped device, owned: a base of FaultDevice ahead of ForwardingDevice, so it exists
// before ForwardingDevice is given it.
struct OwnedDevice {
  std::unique_ptr<Device> owned;
};

class FaultDevice final : private OwnedDevice, public ForwardingDevice {
 public:
  // Where the device cannot tell its free memory (the CPU device, the fake Level Zero
  // driver), every arm's device reports the same 64 GiB, so only `shared_` makes a difference.
  static constexpr std::uint64_t kKnownFree = std::uint64_t{64} << 30;
  // Another user of the device as occupancy() reports it (ZOB_TEST_DEVICE_SHARED): this many
  // other processes (-1: the real device's answer), this much of its free memory taken.
  struct Shared {
    int other_processes = -1;
    std::uint64_t free_taken = 0;
  };
  // Fails the at-th call (from 1) of operation `op` (a Device member's name, e.g.
  // "embedding_backward", "copy_to_host", "synchronize"; "" fails nothing), and reports
  // `shared` through occupancy().
  FaultDevice(std::unique_ptr<Device> inner, std::string op, long at, Shared shared)
      : OwnedDevice{std::move(inner)},
        ForwardingDevice(*owned),
        op_(std::move(op)),
        at_(at),
        shared_(shared) {}

  // ZOB_TEST_REGISTRATION=<arm>:skip: every registration answered as done and nothing registered,
  // the backend's own verification bypassed too, as a runtime that says yes and does nothing.
  void skip_registration() { skip_register_ = true; }
  Registration register_host(void* host, std::size_t bytes) override {
    if (skip_register_) return Registration{"skipped by ZOB_TEST_REGISTRATION", true};
    return inner().register_host(host, bytes);
  }
  void unregister_host(void* host) noexcept override {
    if (!skip_register_) inner().unregister_host(host);
  }
  Occupancy occupancy() const override;

 private:
  // Throws DeviceError(runtime) at the chosen call and at every call after it.
  void before(const char* op) override;

  std::string op_;
  long at_;
  Shared shared_;
  long calls_ = 0;
  bool lost_ = false;
  bool skip_register_ = false;
};

}  // namespace zob::test_hooks
