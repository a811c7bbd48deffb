#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "zob/backend_plugin.hpp"
#include "zob/device.hpp"
#include "zob/errors.hpp"

namespace {

// Points the registry at a fresh folder for the test's lifetime.
class PluginDir {
 public:
  PluginDir() {
    dir_ = std::filesystem::temp_directory_path() /
           ("zob-registry-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    if (const char* old = std::getenv("ZOB_PLUGIN_DIR")) old_ = old;
    ::setenv("ZOB_PLUGIN_DIR", dir_.c_str(), 1);
  }
  ~PluginDir() {
    if (old_) ::setenv("ZOB_PLUGIN_DIR", old_->c_str(), 1);
    else ::unsetenv("ZOB_PLUGIN_DIR");
    std::filesystem::remove_all(dir_);
  }
  const std::filesystem::path& path() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::optional<std::string> old_;
};

zob::DeviceError unavailable_error(const std::string& backend) {
  try {
    zob::create_device({backend, 0});
  } catch (const zob::DeviceError& e) {
    return e;
  }
  ADD_FAILURE() << backend << " was created";
  return zob::DeviceError(zob::DeviceErrorKind::runtime, "");
}

TEST(Registry, MissingPluginsSayTheBuildHasNoBackend) {
  PluginDir dir;
  auto cuda = unavailable_error("cuda");
  EXPECT_EQ(cuda.kind(), zob::DeviceErrorKind::unavailable);
  EXPECT_STREQ(cuda.what(),
               "this build has no CUDA backend (configure on a machine with the CUDA toolkit)");
  auto xpu = unavailable_error("xpu");
  EXPECT_EQ(xpu.kind(), zob::DeviceErrorKind::unavailable);
  EXPECT_NE(std::string(xpu.what()).find("Level Zero"), std::string::npos);
}

TEST(Registry, APluginThatCannotLoadReportsDlerror) {
  PluginDir dir;
  std::ofstream(dir.path() / ZOB_CUDA_PLUGIN) << "not an ELF file " << ::getpid();
  auto e = unavailable_error("cuda");
  EXPECT_EQ(e.kind(), zob::DeviceErrorKind::unavailable);
  const std::string what = e.what();
  EXPECT_NE(what.find(ZOB_CUDA_PLUGIN), std::string::npos) << what;
  EXPECT_NE(what.find("cannot load the cuda backend"), std::string::npos) << what;
}

TEST(Registry, UnknownBackendAndBadCpuIndexAreUnavailable) {
  EXPECT_EQ(unavailable_error("tpu").kind(), zob::DeviceErrorKind::unavailable);
  try {
    zob::create_device({"cpu", 1});
    ADD_FAILURE() << "cpu index 1 was accepted";
  } catch (const zob::DeviceError& e) {
    EXPECT_EQ(e.kind(), zob::DeviceErrorKind::unavailable);
    EXPECT_NE(std::string(e.what()).find("index 0"), std::string::npos);
  }
}

TEST(Registry, AutoFallsBackToCpuAndSaysWhy) {
  PluginDir dir;
  std::string notice;
  auto device = zob::create_first_available_device(0, &notice);
  ASSERT_NE(device, nullptr);
  EXPECT_EQ(device->info().backend, "cpu");
  EXPECT_NE(notice.find("cuda: this build has no CUDA backend"), std::string::npos) << notice;
  EXPECT_NE(notice.find("xpu: "), std::string::npos) << notice;
}

}  // namespace
