// check_driver_registration (step/arm_result_fill.hpp): what the driver reports of each host
// buffer after the set-up must be what the arm made of it, whatever the registration call said.
// A device that registers for real is a GPU (tests/gpu/gpu_e2e_test.cpp runs the binary there);
// here a CPU device answers is_registered from a set the test controls.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.hpp"
#include "step/arm_result_fill.hpp"
#include "zob/errors.hpp"
#include "zob/host_memory.hpp"

namespace {

using zob::Arm;
using zob::HostBuffer;
using zob::HostMemoryMode;

// Registration applies; register_host records the range, is_registered answers from `at_driver`
// (which the test may change behind the buffers' back, as a lying or meddling driver would).
class DriverDevice : public zob::CpuDevice {
 public:
  DriverDevice() : zob::CpuDevice(1) {}
  bool registration_applicable() const override { return applicable; }
  zob::Registration register_host(void* host, std::size_t) override {
    at_driver.insert(host);
    return {"fake-register", true};
  }
  void unregister_host(void* host) noexcept override { at_driver.erase(host); }
  bool is_registered(const void* host) const override { return at_driver.count(host) > 0; }

  bool applicable = true;
  std::set<const void*> at_driver;
};

constexpr std::size_t kBytes = 1 << 16;

std::string check(Arm arm, const zob::Device& dev, const std::vector<const HostBuffer*>& bufs) {
  return zob::step_detail::check_driver_registration(arm, dev, bufs);
}

TEST(DriverRegistration, RegisteredArmIsAllWhenTheDriverHoldsEveryRegisteredBuffer) {
  DriverDevice dev;
  HostBuffer a(kBytes, HostMemoryMode::registered, &dev, "fp32 master");
  HostBuffer b(kBytes, HostMemoryMode::registered, &dev, "fp32 gradients");
  HostBuffer adam(kBytes, HostMemoryMode::pageable, &dev, "Adam exp_avg");
  HostBuffer unallocated;  // e.g. no bf16 parameters in this loop: skipped
  EXPECT_EQ(check(Arm::registered, dev, {&a, &b, &adam, &unallocated}), "all");
}

TEST(DriverRegistration, ARegisteredBufferTheDriverDoesNotHoldFailsTheArmNamingIt) {
  DriverDevice dev;
  HostBuffer a(kBytes, HostMemoryMode::registered, &dev, "fp32 master");
  HostBuffer b(kBytes, HostMemoryMode::registered, &dev, "fp32 gradients");
  dev.at_driver.erase(b.data());  // registration said yes, the driver holds nothing
  try {
    check(Arm::registered, dev, {&a, &b});
    FAIL() << "an unregistered buffer of the registered arm passed";
  } catch (const zob::DeviceError& e) {
    EXPECT_EQ(e.kind(), zob::DeviceErrorKind::registration_refused);
    const std::string what = e.what();
    EXPECT_NE(what.find("does not report fp32 gradients"), std::string::npos) << what;
  }
  dev.at_driver.insert(b.data());  // so that its release finds it
}

TEST(DriverRegistration, UnregisteredArmIsNoneAndFailsWhenTheDriverHoldsItsMemory) {
  DriverDevice dev;
  HostBuffer locked(kBytes, HostMemoryMode::locked, &dev, "fp32 master");
  HostBuffer plain(kBytes, HostMemoryMode::pageable, &dev, "Adam exp_avg");
  EXPECT_EQ(check(Arm::unregistered, dev, {&locked, &plain}), "none");
  EXPECT_EQ(check(Arm::pageable, dev, {&plain}), "none");
  for (const HostBuffer* meddled : {&locked, &plain}) {
    dev.at_driver = {meddled->data()};
    try {
      check(Arm::unregistered, dev, {&locked, &plain});
      FAIL() << meddled->name() << " registered behind the unregistered arm passed";
    } catch (const zob::DeviceError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("reports " + meddled->name()), std::string::npos) << what;
      EXPECT_NE(what.find("arm unregistered"), std::string::npos) << what;
    }
  }
  dev.at_driver.clear();
}

TEST(DriverRegistration, NotApplicableWithoutRegistrationAndForTheRuntimesOwnMemory) {
  DriverDevice dev;
  HostBuffer runtime(kBytes, HostMemoryMode::device_host, &dev, "fp32 master");
  dev.at_driver.insert(runtime.data());  // cudaMallocHost memory looks registered: not judged
  EXPECT_EQ(check(Arm::hostalloc, dev, {&runtime}), "not-applicable");
  dev.applicable = false;
  HostBuffer locked(kBytes, HostMemoryMode::registered, &dev, "fp32 master");  // lock only
  EXPECT_EQ(check(Arm::registered, dev, {&locked}), "not-applicable");
}

}  // namespace
