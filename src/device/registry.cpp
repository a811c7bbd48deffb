// The backend registry (the backends' table: zob/backends.hpp). The CPU device is linked in;
// accelerator backends are plugins next to the executable, dlopen()ed on demand, so the binary
// starts (and the CPU device works) on machines without the CUDA or Level Zero runtimes.
#include <dlfcn.h>
#include <unistd.h>

#include <fmt/format.h>
#include <sys/stat.h>
#include <cstdlib>
#include <string>

#include "backends/cpu/cpu_device.hpp"
#include "zob/backend_plugin.hpp"
#include "zob/backends.hpp"
#include "zob/device.hpp"
#include "zob/errors.hpp"
#include "zob/thread_pool.hpp"

namespace zob {

namespace {

// ZOB_PLUGIN_DIR overrides the folder (tests point it at an empty one).
std::string plugin_dir() {
  if (const char* dir = std::getenv("ZOB_PLUGIN_DIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  std::string exe(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", exe.data(), exe.size() - 1);
  if (n <= 0) return ".";
  exe.resize(static_cast<std::size_t>(n));
  const auto slash = exe.rfind('/');
  return slash == std::string::npos ? "." : exe.substr(0, slash);
}

std::unique_ptr<Device> load_plugin(const std::string& backend, const char* file,
                                    const std::string& missing_reason, int index) {
  const std::string path = plugin_dir() + "/" + file;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw DeviceError(DeviceErrorKind::unavailable, missing_reason);
  // Never dlclose'd: the Device's code and vtable live in the plugin, and the process is a
  // short-lived child that runs one arm.
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* err = ::dlerror();
    throw DeviceError(DeviceErrorKind::unavailable,
                      fmt::format("cannot load the {} backend {}: {}", backend, path,
                                  err ? err : "unknown dlopen error"));
  }
  ::dlerror();
  auto create =
      reinterpret_cast<zob_backend_create_device_fn>(::dlsym(handle, "zob_backend_create_device"));
  if (create == nullptr) {
    const char* err = ::dlerror();
    throw DeviceError(DeviceErrorKind::unavailable,
                      fmt::format("{} does not export zob_backend_create_device: {}", path,
                                  err ? err : "symbol is null"));
  }
  std::unique_ptr<Device> device(create(index));
  if (!device) {
    throw DeviceError(
        DeviceErrorKind::unavailable,
        fmt::format("{}: zob_backend_create_device({}) returned no device", path, index));
  }
  return device;
}

}  // namespace

std::unique_ptr<Device> create_device(const DeviceRequest& request) {
  const BackendInfo* b = find_backend(request.backend);
  if (b == nullptr) {
    throw DeviceError(DeviceErrorKind::unavailable, "unknown backend '" + request.backend +
                                                        "' (use " + backend_names("or") + ")");
  }
  if (b->plugin != nullptr) return load_plugin(b->name, b->plugin, b->not_built, request.index);
  if (request.index != 0) {
    throw DeviceError(
        DeviceErrorKind::unavailable,
        fmt::format("the cpu backend has one device, index 0 (asked for {})", request.index));
  }
  return std::make_unique<CpuDevice>(available_cpus());
}

std::unique_ptr<Device> create_first_available_device(int index, std::string* notice) {
  std::string skipped;
  for (const BackendInfo& b : kBackends) {
    if (!b.accelerator) continue;
    try {
      return create_device({b.name, index});
    } catch (const DeviceError& e) {
      // Plugins may already name themselves ("cuda: no usable NVIDIA driver ...").
      std::string why = e.what();
      const std::string prefix = std::string(b.name) + ": ";
      if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
      skipped += fmt::format("{}{}: {}", skipped.empty() ? "" : "; ", b.name, why);
    }
  }
  if (notice != nullptr) {
    *notice = "no accelerator available (" + skipped + "); running on the CPU device";
  }
  return create_device({to_string(DeviceKind::cpu), 0});
}

}  // namespace zob
