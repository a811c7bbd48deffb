// Who else is on the device: NVML lists this process too (it holds a context on the GPU), so
// the other processes are one fewer than listed (src/backends/cuda/nvml_processes.hpp); the
// report's occupancy check says when the count could not be made (src/report/details.cpp).
#include <gtest/gtest.h>

#include "backends/cuda/nvml_processes.hpp"
#include "report/details.hpp"

namespace {

TEST(Occupancy, NvmlsListHoldsThisProcessToo) {
  EXPECT_EQ(zob::cuda::others_listed(0), 0);  // NVML did not list us (yet): none other
  EXPECT_EQ(zob::cuda::others_listed(1), 0);  // only this process
  EXPECT_EQ(zob::cuda::others_listed(2), 1);
  EXPECT_EQ(zob::cuda::others_listed(9), 8);
}

zob::ArmResult arm(zob::Arm which, const std::string& device, int others, std::uint64_t free) {
  zob::ArmResult a;
  a.arm = which;
  a.ok = true;
  a.device = device;
  a.device_other_processes = others;
  a.device_free_bytes = free;
  return a;
}

TEST(Occupancy, TheCheckSaysWhatItCouldNotCountAndWhy) {
  zob::RunResult run;
  run.arms = {arm(zob::Arm::registered, "xpu", -1, 0), arm(zob::Arm::unregistered, "xpu", -1, 0)};
  auto c = zob::occupancy_check(run);
  EXPECT_FALSE(c.processes_counted);
  EXPECT_FALSE(c.free_memory_watched);
  EXPECT_NE(c.note.find("(Level Zero lists no processes of a device)"), std::string::npos)
      << c.note;
  run.arms = {arm(zob::Arm::registered, "cuda", -1, 1 << 30),
              arm(zob::Arm::unregistered, "cuda", 0, 1 << 30)};
  c = zob::occupancy_check(run);
  EXPECT_FALSE(c.processes_counted);  // one arm could not count: the check did not hold
  EXPECT_TRUE(c.free_memory_watched);
  EXPECT_NE(c.note.find("NVML (libnvidia-ml.so.1) could not be loaded or did not answer"),
            std::string::npos)
      << c.note;
  run.arms[0].device_other_processes = 0;
  c = zob::occupancy_check(run);
  EXPECT_TRUE(c.processes_counted);
  EXPECT_EQ(c.note, "");
  EXPECT_TRUE(zob::occupancy_check_json(run).at("note").is_null());
  // A failed arm was never asked; no arm completed: nothing to say either.
  run.arms = {arm(zob::Arm::registered, "cpu", -1, 0)};
  run.arms[0].ok = false;
  EXPECT_EQ(zob::occupancy_check(run).note, "");
}

}  // namespace
