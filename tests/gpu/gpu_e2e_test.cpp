// The real zero3-offload-bench on a CUDA GPU: the registered arm's registration is confirmed by
// the driver, the unregistered arm's memory is confirmed NOT registered, and each way that can
// go wrong fails the arm instead of reporting a measurement under the wrong name. The CPU
// device has no registration, so only a GPU can prove this (CI builds it; it skips, saying why,
// where --list-devices finds no usable CUDA device).
//
// The test process never touches CUDA itself: a context of ours would be "another process on
// the device" to the runs it checks. The binary is looked up next to this test first (the
// bundle of scripts/gpu-bundle puts both in one folder), else at its build path.
#include <limits.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

namespace zob_gpu_e2e {
// The benchmark this test runs: beside the test binary if there is one, else the build's.
inline const std::string& bench_path() {
  static const std::string path = [] {
    char self[PATH_MAX] = {};
    const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
      const auto beside =
          std::filesystem::path(std::string(self, static_cast<std::size_t>(n))).parent_path() /
          "zero3-offload-bench";
      if (std::filesystem::exists(beside)) return beside.string();
    }
    return std::string(ZOB_BUILT_BINARY);
  }();
  return path;
}
}  // namespace zob_gpu_e2e

// e2e_support.hpp runs ZOB_BINARY: here, the one found above.
#define ZOB_BINARY ::zob_gpu_e2e::bench_path().c_str()
#include "fault_support.hpp"

namespace {

using namespace zob_e2e;

// Small enough for seconds per run on an H200; one round, so one child per arm.
const std::vector<std::string> kArgs{
    "--device", "cuda", "--hidden",  "256", "--layers", "2",
    "--batch",  "2",    "--seq",     "64",  "--steps",  "2",
    "--warmup", "1",    "--repeats", "1",   "--arms",   "registered,unregistered"};

// "" where --list-devices reports a usable CUDA device, else its line (the skip's reason).
const std::string& why_no_cuda() {
  static const std::string why = [] {
    const Result r = run_bench({"--list-devices"}, {}, nullptr, 180);
    for (const auto& line : lines_of(r.out)) {
      if (line.rfind("cuda", 0) != 0) continue;
      return line.find("available:") != std::string::npos &&
                     line.find("unavailable") == std::string::npos
                 ? std::string()
                 : line;
    }
    return "zero3-offload-bench --list-devices printed no cuda line (exit code " +
           std::to_string(r.rc) + "): " + r.err;
  }();
  return why;
}

#define ZOB_REQUIRE_CUDA_DEVICE() \
  if (!why_no_cuda().empty())     \
  GTEST_SKIP() << "no CUDA device for the real binary: " << why_no_cuda()

Result run_cuda(const Env& env) {
  const Result r = run_bench(kArgs, env, nullptr, 300);
  expect_no_leftovers();
  return r;
}

TEST(GpuE2E, TheDriverHoldsTheRegisteredArmsMemoryAndNotTheUnregisteredArms) {
  ZOB_REQUIRE_CUDA_DEVICE();
  const Result r = run_cuda({});
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = driver_result(r.out);
  const auto& reg = j.at("registered");
  EXPECT_EQ(reg.at("ok"), true);
  EXPECT_EQ(reg.at("registration"), "cudaHostRegister");
  EXPECT_EQ(reg.at("registration_verified"), true);
  EXPECT_EQ(reg.at("registered_at_driver"), "all");
  EXPECT_GT(reg.at("registered_bytes").get<long long>(), 0);
  const auto& unreg = j.at("unregistered");
  EXPECT_EQ(unreg.at("ok"), true);
  EXPECT_EQ(unreg.at("registration_verified"), false);
  EXPECT_EQ(unreg.at("registered_at_driver"), "none");
  EXPECT_EQ(unreg.at("registered_bytes"), 0);
  EXPECT_GT(unreg.at("locked_bytes").get<long long>(), 0);
  EXPECT_NE(r.out.find("(cudaHostRegister, verified)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 B registered (none, none registered at the driver)"), std::string::npos)
      << r.out;
}

// Checks a run whose registered arm had to fail: exit 1, one error line with every part, the
// arm not verified, the unregistered arm measured and confirmed unregistered.
void expect_registered_arm_failed(const Result& r, const std::vector<std::string>& parts) {
  EXPECT_EQ(r.rc, 1) << r.err;
  const std::string line = arm_error_line(r, "registered");
  for (const auto& part : parts) {
    EXPECT_NE(line.find(part), std::string::npos) << part << " missing from: " << line;
  }
  const auto j = driver_result(r.out);
  EXPECT_EQ(j.at("registered").at("ok"), false);
  EXPECT_EQ(j.at("registered").at("registration_verified"), false);
  EXPECT_EQ(j.at("unregistered").at("ok"), true) << r.err;
  EXPECT_EQ(j.at("unregistered").at("registered_at_driver"), "none");
}

// The backend's own check: cudaHostRegister not called, taken as a success.
TEST(GpuE2E, CudaHostRegisterNotMadeIsCaughtByTheBackendsPointerCheck) {
  ZOB_REQUIRE_CUDA_DEVICE();
  expect_registered_arm_failed(run_cuda({{"ZOB_TEST_CUDA_SKIP_REGISTER", "1"}}),
                               {"host memory registration refused", "cudaHostRegister(",
                                "cudaPointerGetAttributes does not report"});
}

// The arm's independent check: a registration that says yes, the backend's check bypassed.
TEST(GpuE2E, ARegistrationTheDriverDoesNotHoldFailsTheRegisteredArm) {
  ZOB_REQUIRE_CUDA_DEVICE();
  expect_registered_arm_failed(run_cuda({{"ZOB_TEST_REGISTRATION", "registered:skip"}}),
                               {"host memory registration refused",
                                "cuda: the driver does not "
                                "report fp32",
                                "although its registration returned success"});
}

// cudaHostRegister refused: the arm fails naming it, never reported as verified.
TEST(GpuE2E, CudaHostRegisterRefusedFailsTheArmNamingIt) {
  ZOB_REQUIRE_CUDA_DEVICE();
  expect_registered_arm_failed(
      run_cuda(
          {{"ZOB_TEST_CUDA_FAULT", "cudaHostRegister:1:cudaErrorHostMemoryAlreadyRegistered"}}),
      {"host memory registration refused", "cudaHostRegister(", "refused",
       "cudaErrorHostMemoryAlreadyRegistered"});
}

// The unregistered arm's memory registered at the driver (a bug): that arm fails.
TEST(GpuE2E, TheUnregisteredArmsMemoryRegisteredAtTheDriverFailsThatArm) {
  ZOB_REQUIRE_CUDA_DEVICE();
  const Result r = run_cuda({{"ZOB_TEST_REGISTRATION", "unregistered:register"}});
  EXPECT_EQ(r.rc, 1) << r.err;
  const std::string line = arm_error_line(r, "unregistered");
  for (const char* part : {"cuda: the driver reports fp32",
                           "of arm unregistered as registered host memory", "never registers"}) {
    EXPECT_NE(line.find(part), std::string::npos) << part << " missing from: " << line;
  }
  const auto j = driver_result(r.out);
  EXPECT_EQ(j.at("unregistered").at("ok"), false);
  EXPECT_EQ(j.at("registered").at("ok"), true) << r.err;
  EXPECT_EQ(j.at("registered").at("registered_at_driver"), "all");
  EXPECT_EQ(j.at("registered").at("registration_verified"), true);
}

}  // namespace

int main(int argc, char** argv) {
  // A child subreaper: an arm child the benchmark orphaned becomes ours, and is caught.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
