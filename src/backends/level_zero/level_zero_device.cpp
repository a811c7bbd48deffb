// LevelZeroDevice: driver and device selection, engines, memory and host registration.
// Copies, events and kernels are in lanes.cpp.
#include "level_zero_device.hpp"

#include <level_zero/loader/ze_loader.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "shared.hpp"
#include "spirv_modules.hpp"
#include "ze_support.hpp"

namespace zob {
namespace {

using l0::check;

[[noreturn]] void unavailable(const std::string& why) {
  throw DeviceError(DeviceErrorKind::unavailable, "xpu: " + why);
}

std::size_t page_size() {
  static const std::size_t p = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return p;
}

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

}  // namespace

LevelZeroDevice::LevelZeroDevice(int index) {
  try {
    open(index);
    create_lists();
    create_kernels();
    probe_registration();
  } catch (...) {
    release_all();
    throw;
  }
}

LevelZeroDevice::~LevelZeroDevice() { release_all(); }

void LevelZeroDevice::open(int index) {
  if (ze_result_t r = zeInit(ZE_INIT_FLAG_GPU_ONLY); r != ZE_RESULT_SUCCESS)
    unavailable(
        std::string("zeInit(ZE_INIT_FLAG_GPU_ONLY) failed: ") + l0::result_name(r) +
        " (no Level Zero GPU driver: install Intel's compute-runtime, check /dev/dri access)");
  std::uint32_t n_drivers = 0;
  if (ze_result_t r = zeDriverGet(&n_drivers, nullptr); r != ZE_RESULT_SUCCESS || n_drivers == 0)
    unavailable(std::string("zeDriverGet found no Level Zero driver (") + l0::result_name(r) + ")");
  std::vector<ze_driver_handle_t> drivers(n_drivers);
  ZE_CHECK(zeDriverGet(&n_drivers, drivers.data()));
  // Devices are numbered across drivers in loader order: --device-index picks one.
  std::vector<std::pair<ze_driver_handle_t, ze_device_handle_t>> gpus;
  for (auto* d : drivers) {
    std::uint32_t n = 0;
    ZE_CHECK(zeDeviceGet(d, &n, nullptr));
    std::vector<ze_device_handle_t> devs(n);
    if (n > 0) ZE_CHECK(zeDeviceGet(d, &n, devs.data()));
    for (auto* dev : devs) gpus.emplace_back(d, dev);
  }
  if (gpus.empty()) unavailable("no Level Zero GPU device (the driver reports none)");
  if (index < 0 || static_cast<std::size_t>(index) >= gpus.size())
    unavailable("--device-index " + std::to_string(index) +
                " out of range: " + std::to_string(gpus.size()) + " Level Zero GPU device(s)");
  driver_ = gpus[static_cast<std::size_t>(index)].first;
  device_ = gpus[static_cast<std::size_t>(index)].second;

  ze_device_properties_t props{};
  props.stype = ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES_1_2;  // timerResolution in Hz
  ZE_CHECK(zeDeviceGetProperties(device_, &props));
  if (props.timerResolution == 0) unavailable("zeDeviceGetProperties reports timerResolution 0");
  timer_hz_ = props.timerResolution;
  timestamp_mask_ = props.kernelTimestampValidBits >= 64
                        ? ~std::uint64_t{0}
                        : (std::uint64_t{1} << props.kernelTimestampValidBits) - 1;

  ze_driver_properties_t dprops{};
  dprops.stype = ZE_STRUCTURE_TYPE_DRIVER_PROPERTIES;
  ZE_CHECK(zeDriverGetProperties(driver_, &dprops));
  ze_api_version_t api{};
  ZE_CHECK(zeDriverGetApiVersion(driver_, &api));
  std::uint32_t n_mem = 0;
  ZE_CHECK(zeDeviceGetMemoryProperties(device_, &n_mem, nullptr));
  std::vector<ze_device_memory_properties_t> mems(n_mem);
  for (auto& m : mems) m.stype = ZE_STRUCTURE_TYPE_DEVICE_MEMORY_PROPERTIES;
  if (n_mem > 0) ZE_CHECK(zeDeviceGetMemoryProperties(device_, &n_mem, mems.data()));

  info_.backend = "xpu";
  info_.name = props.name;
  info_.runtime_version = "Level Zero API " + std::to_string(ZE_MAJOR_VERSION(api)) + "." +
                          std::to_string(ZE_MINOR_VERSION(api));
  info_.driver_version = std::to_string(dprops.driverVersion);
  for (const auto& m : mems) info_.total_memory_bytes += m.totalSize;

  shared_ = std::make_shared<l0::Shared>();
  shared_->device = device_;
  ze_context_desc_t cdesc{ZE_STRUCTURE_TYPE_CONTEXT_DESC, nullptr, 0};
  ZE_CHECK(zeContextCreate(driver_, &cdesc, &shared_->context));
}

void LevelZeroDevice::create_lists() {
  std::uint32_t n = 0;
  ZE_CHECK(zeDeviceGetCommandQueueGroupProperties(device_, &n, nullptr));
  std::vector<ze_command_queue_group_properties_t> groups(n);
  for (auto& g : groups) g.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_GROUP_PROPERTIES;
  ZE_CHECK(zeDeviceGetCommandQueueGroupProperties(device_, &n, groups.data()));
  int compute = -1, copy = -1;
  for (std::uint32_t i = 0; i < n; ++i) {
    const auto f = groups[i].flags;
    if (compute < 0 && (f & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE))
      compute = static_cast<int>(i);
    // The main copy engine: a copy-only group, preferably the one with a single queue (the
    // link copy engines come as a group of several).
    const bool copy_only = (f & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY) &&
                           !(f & ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE);
    if (copy_only && (copy < 0 || (groups[i].numQueues == 1 &&
                                   groups[static_cast<std::size_t>(copy)].numQueues != 1)))
      copy = static_cast<int>(i);
  }
  if (compute < 0) unavailable("the device has no compute queue group");
  auto make = [&](int ordinal, std::uint32_t index) {
    const std::uint32_t queues = groups[static_cast<std::size_t>(ordinal)].numQueues;
    ze_command_queue_desc_t desc{
        ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC, nullptr, static_cast<std::uint32_t>(ordinal),
        queues == 0 ? 0 : index % queues,     0,       ZE_COMMAND_QUEUE_MODE_ASYNCHRONOUS,
        ZE_COMMAND_QUEUE_PRIORITY_NORMAL};
    ze_command_list_handle_t list = nullptr;
    ZE_CHECK_D(zeCommandListCreateImmediate(shared_->context, device_, &desc, &list),
               "ordinal " + std::to_string(ordinal) + " index " + std::to_string(desc.index));
    lists_.push_back(list);
    return list;
  };
  auto& c = lanes_[static_cast<int>(Queue::compute)];
  c.copy_list = c.kernel_list = make(compute, 0);
  ze_command_list_handle_t h2d_copy = nullptr, d2h_copy = nullptr;
  if (copy >= 0) {
    h2d_copy = make(copy, 0);
    d2h_copy = groups[static_cast<std::size_t>(copy)].numQueues > 1 ? make(copy, 1) : h2d_copy;
  }
  auto& h = lanes_[static_cast<int>(Queue::h2d)];
  auto& d = lanes_[static_cast<int>(Queue::d2h)];
  h.kernel_list = make(compute, 1);
  d.kernel_list = make(compute, 2);
  h.copy_list = h2d_copy != nullptr ? h2d_copy : h.kernel_list;
  d.copy_list = d2h_copy != nullptr ? d2h_copy : d.kernel_list;
}

void LevelZeroDevice::create_kernels() {
  std::map<std::string, ze_module_handle_t> by_name;
  for (int i = 0; i < l0::kSpirvModuleCount; ++i) {
    const auto& m = l0::kSpirvModules[i];
    ze_module_desc_t desc{ZE_STRUCTURE_TYPE_MODULE_DESC,
                          nullptr,
                          ZE_MODULE_FORMAT_IL_SPIRV,
                          m.size,
                          m.data,
                          "",
                          nullptr};
    ze_module_handle_t module = nullptr;
    ze_module_build_log_handle_t log = nullptr;
    const ze_result_t r = zeModuleCreate(shared_->context, device_, &desc, &module, &log);
    std::string text;
    if (log != nullptr) {
      std::size_t size = 0;
      if (zeModuleBuildLogGetString(log, &size, nullptr) == ZE_RESULT_SUCCESS && size > 1) {
        text.resize(size);
        if (zeModuleBuildLogGetString(log, &size, text.data()) != ZE_RESULT_SUCCESS) text.clear();
        while (!text.empty() && (text.back() == '\0' || text.back() == '\n')) text.pop_back();
      }
      zeModuleBuildLogDestroy(log);
    }
    check(r, "zeModuleCreate", std::string("kernels/") + m.name + ".cl: " + text);
    modules_.push_back(module);
    by_name[m.name] = module;
  }
  for (int k = 0; k < static_cast<int>(l0::KernelId::count); ++k) {
    const auto& ki = l0::kernel_info(static_cast<l0::KernelId>(k));
    ze_kernel_desc_t desc{ZE_STRUCTURE_TYPE_KERNEL_DESC, nullptr, 0, ki.name};
    ze_kernel_handle_t kernel = nullptr;
    ZE_CHECK_D(zeKernelCreate(by_name.at(ki.module), &desc, &kernel), ki.name);
    kernels_.push_back(kernel);
    ZE_CHECK_D(zeKernelSetGroupSize(kernel, ki.group[0], ki.group[1], 1), ki.name);
  }
  // sum()'s partial sums: the backend's own scratch, outside the memory the caller accounts.
  ze_device_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
  void* p = nullptr;
  ZE_CHECK(
      zeMemAllocDevice(shared_->context, &desc, l0::kSumGroups * sizeof(float), 256, device_, &p));
  sum_partials_ = static_cast<float*>(p);
}

void LevelZeroDevice::probe_registration() {
  std::uint32_t n = 0;
  ZE_CHECK(zeDriverGetExtensionProperties(driver_, &n, nullptr));
  std::vector<ze_driver_extension_properties_t> ext(n);
  if (n > 0) ZE_CHECK(zeDriverGetExtensionProperties(driver_, &n, ext.data()));
  for (const auto& e : ext)
    if (std::strcmp(e.name, l0::kMemmapExtensionName) == 0) has_memmap_ = true;
  // compute-runtime serves the zex functions whether or not it lists the name: ask for them.
  if (zeDriverGetExtensionFunctionAddress(driver_, l0::kZexImportName, &zex_import_) !=
          ZE_RESULT_SUCCESS ||
      zeDriverGetExtensionFunctionAddress(driver_, l0::kZexReleaseName, &zex_release_) !=
          ZE_RESULT_SUCCESS ||
      zeDriverGetExtensionFunctionAddress(driver_, l0::kZexBaseAddressName, &zex_base_) !=
          ZE_RESULT_SUCCESS ||
      zex_import_ == nullptr || zex_release_ == nullptr || zex_base_ == nullptr) {
    zex_import_ = zex_release_ = zex_base_ = nullptr;
  }
  // The zex functions are the driver's own: they need the driver's handle, not the loader's
  // (the loader wraps handles when it intercepts: several drivers, ZE_ENABLE_LOADER_INTERCEPT).
  void* translated = nullptr;
  ZE_CHECK(zelLoaderTranslateHandle(ZEL_HANDLE_DRIVER, driver_, &translated));
  zex_driver_ = static_cast<ze_driver_handle_t>(translated);
}

std::string LevelZeroDevice::registration_method() const {
  if (has_memmap_) return "zeMemAllocHost(memmap-sysmem)";
  if (zex_import_ != nullptr) return l0::kZexImportName;
  return "";
}

void LevelZeroDevice::release_all() noexcept {
  auto warn = [](ze_result_t r, const char* call) {
    if (r != ZE_RESULT_SUCCESS)
      std::fprintf(stderr, "xpu: %s failed during clean-up: %s\n", call, l0::result_name(r));
  };
  if (shared_ && !lists_.empty()) {
    try {
      synchronize();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
    }
  }
  for (auto& [p, range] : registered_) {
    if (range.memmap) warn(zeMemFree(shared_->context, reinterpret_cast<void*>(p)), "zeMemFree");
    else
      warn(reinterpret_cast<l0::zex_release_fn>(zex_release_)(zex_driver_,
                                                              reinterpret_cast<void*>(p)),
           "zexDriverReleaseImportedPointer");
  }
  registered_.clear();
  for (auto& [p, bytes] : host_allocs_)
    warn(zeMemFree(shared_->context, reinterpret_cast<void*>(p)), "zeMemFree");
  host_allocs_.clear();
  for (auto& [p, bytes] : device_allocs_)
    warn(zeMemFree(shared_->context, reinterpret_cast<void*>(p)), "zeMemFree");
  device_allocs_.clear();
  for (auto& [key, table] : rope_tables_)
    warn(zeMemFree(shared_->context, table.device), "zeMemFree");
  rope_tables_.clear();
  if (sum_partials_ != nullptr) warn(zeMemFree(shared_->context, sum_partials_), "zeMemFree");
  sum_partials_ = nullptr;
  for (auto* e : internal_in_flight_) shared_->release_event(e);
  internal_in_flight_.clear();
  for (auto* k : kernels_) warn(zeKernelDestroy(k), "zeKernelDestroy");
  kernels_.clear();
  for (auto* m : modules_) warn(zeModuleDestroy(m), "zeModuleDestroy");
  modules_.clear();
  for (auto* l : lists_) warn(zeCommandListDestroy(l), "zeCommandListDestroy");
  lists_.clear();
  lanes_ = {};
  shared_.reset();
}

// ---------------------------------------------------------------- device memory
void* LevelZeroDevice::allocate(std::size_t bytes) {
  ze_device_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
  void* p = nullptr;
  std::lock_guard lock(mutex_);
  const ze_result_t r =
      zeMemAllocDevice(shared_->context, &desc, bytes == 0 ? 1 : bytes, 256, device_, &p);
  if (r != ZE_RESULT_SUCCESS)
    l0::fail("zeMemAllocDevice", r,
             std::to_string(bytes) + " bytes; " + std::to_string(in_use_) + " in use, peak " +
                 std::to_string(peak_) + ": use a smaller model or batch",
             l0::kind_of(r) == DeviceErrorKind::out_of_memory ? DeviceErrorKind::out_of_memory
                                                              : DeviceErrorKind::runtime);
  device_allocs_[reinterpret_cast<std::uintptr_t>(p)] = bytes;
  in_use_ += bytes;
  if (in_use_ > peak_) peak_ = in_use_;
  return p;
}

void LevelZeroDevice::deallocate(void* device) noexcept {
  if (device == nullptr) return;
  std::lock_guard lock(mutex_);
  auto it = device_allocs_.find(reinterpret_cast<std::uintptr_t>(device));
  if (it == device_allocs_.end()) {
    std::fprintf(stderr, "xpu: deallocate of unknown pointer %p ignored\n", device);
    return;
  }
  in_use_ -= it->second;
  device_allocs_.erase(it);
  if (ze_result_t r = zeMemFree(shared_->context, device); r != ZE_RESULT_SUCCESS)
    std::fprintf(stderr, "xpu: zeMemFree(%p) failed: %s\n", device, l0::result_name(r));
}

std::size_t LevelZeroDevice::memory_in_use() const {
  std::lock_guard lock(mutex_);
  return in_use_;
}
std::size_t LevelZeroDevice::memory_peak() const {
  std::lock_guard lock(mutex_);
  return peak_;
}

// ---------------------------------------------------------------- host memory
Registration LevelZeroDevice::register_host(void* host, std::size_t bytes) {
  const auto p = reinterpret_cast<std::uintptr_t>(host);
  if (host == nullptr || bytes == 0 || p % page_size() != 0 || bytes % page_size() != 0)
    throw DeviceError(DeviceErrorKind::registration_refused,
                      "xpu: register_host(" + hex(host) + ", " + std::to_string(bytes) +
                          " bytes): pointer and size must be non-zero multiples of the page size");
  std::lock_guard lock(mutex_);
  const std::string where = hex(host) + ", " + std::to_string(bytes) + " bytes";
  if (has_memmap_) {
    l0::ExternalMemmapSysmemExtDesc mm{};
    mm.stype = l0::kStypeExternalMemmapSysmemExtDesc;
    mm.pNext = nullptr;
    mm.pSystemMemory = host;
    mm.size = bytes;
    ze_host_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, &mm, 0};
    void* out = nullptr;
    const ze_result_t r = zeMemAllocHost(shared_->context, &desc, bytes, page_size(), &out);
    if (r != ZE_RESULT_SUCCESS)
      l0::fail("zeMemAllocHost(memmap-sysmem)", r, where, DeviceErrorKind::registration_refused);
    if (out != host) {
      zeMemFree(shared_->context, out);
      throw DeviceError(DeviceErrorKind::registration_refused,
                        "xpu: zeMemAllocHost(memmap-sysmem) returned " + hex(out) +
                            " instead of mapping " + where);
    }
    registered_[p] = HostRange{bytes, true};
    return Registration{"zeMemAllocHost(memmap-sysmem)", true};
  }
  if (zex_import_ != nullptr) {
    auto import = reinterpret_cast<l0::zex_import_fn>(zex_import_);
    auto release = reinterpret_cast<l0::zex_release_fn>(zex_release_);
    auto base = reinterpret_cast<l0::zex_base_address_fn>(zex_base_);
    if (ze_result_t r = import(zex_driver_, host, bytes); r != ZE_RESULT_SUCCESS)
      l0::fail("zexDriverImportExternalPointer", r, where, DeviceErrorKind::registration_refused);
    void* b = nullptr;
    const ze_result_t r = base(zex_driver_, host, &b);
    if (r != ZE_RESULT_SUCCESS || b != host) {
      release(zex_driver_, host);
      throw DeviceError(DeviceErrorKind::registration_refused,
                        "xpu: zexDriverGetHostPointerBaseAddress after importing " + where +
                            " gave " + hex(b) + " (" + l0::result_name(r) +
                            "): import not verified");
    }
    registered_[p] = HostRange{bytes, false};
    return Registration{l0::kZexImportName, true};
  }
  throw DeviceError(DeviceErrorKind::registration_refused,
                    "xpu: cannot register " + where + ": the driver offers neither " +
                        l0::kMemmapExtensionName + " nor " + l0::kImportExtensionName +
                        " (zexDriverImportExternalPointer); update Intel's compute-runtime");
}

void LevelZeroDevice::unregister_host(void* host) noexcept {
  std::lock_guard lock(mutex_);
  auto it = registered_.find(reinterpret_cast<std::uintptr_t>(host));
  if (it == registered_.end()) return;
  const ze_result_t r = it->second.memmap
                            ? zeMemFree(shared_->context, host)
                            : reinterpret_cast<l0::zex_release_fn>(zex_release_)(zex_driver_, host);
  if (r != ZE_RESULT_SUCCESS)
    std::fprintf(stderr, "xpu: releasing registered %p failed: %s\n", host, l0::result_name(r));
  registered_.erase(it);
}

bool LevelZeroDevice::is_registered(const void* host) const {
  std::lock_guard lock(mutex_);
  const auto p = reinterpret_cast<std::uintptr_t>(host);
  auto it = registered_.upper_bound(p);
  if (it == registered_.begin()) return false;
  --it;
  return p < it->first + it->second.bytes;
}

void* LevelZeroDevice::allocate_host(std::size_t bytes) {
  ze_host_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_HOST_MEM_ALLOC_DESC, nullptr, 0};
  void* p = nullptr;
  std::lock_guard lock(mutex_);
  const ze_result_t r =
      zeMemAllocHost(shared_->context, &desc, bytes == 0 ? 1 : bytes, page_size(), &p);
  if (r != ZE_RESULT_SUCCESS)
    l0::fail("zeMemAllocHost", r, std::to_string(bytes) + " bytes", l0::kind_of(r));
  host_allocs_[reinterpret_cast<std::uintptr_t>(p)] = bytes;
  return p;
}

void LevelZeroDevice::deallocate_host(void* host) noexcept {
  if (host == nullptr) return;
  std::lock_guard lock(mutex_);
  if (host_allocs_.erase(reinterpret_cast<std::uintptr_t>(host)) == 0) {
    std::fprintf(stderr, "xpu: deallocate_host of unknown pointer %p ignored\n", host);
    return;
  }
  if (ze_result_t r = zeMemFree(shared_->context, host); r != ZE_RESULT_SUCCESS)
    std::fprintf(stderr, "xpu: zeMemFree(%p) failed: %s\n", host, l0::result_name(r));
}

}  // namespace zob
