// The fake driver's API: one driver, one GPU device, contexts, memory, the zex import
// functions, modules and kernels. Command lists and events (asynchronous: a worker thread per
// list) are in fake_queue.cpp, the happens-before check in fake_race.cpp, kernel launch checks
// in fake_kernels.cpp and their execution on PoCL in fake_pocl.cpp. Strict where a real device
// would misbehave silently: a kernel on a copy-only list, a zex call with the loader's
// (untranslated) driver handle, a copy outside an allocation are all errors.
//
// Switches (read at each call, so one test process can flip them):
//   FAKE_ZE_NO_IMPORT=1        ZEX_driver_import_host_pointer neither advertised nor served
//   FAKE_ZE_IMPORT_FAIL=1      zexDriverImportExternalPointer returns an error
//   FAKE_ZE_BAD_BASE=1         zexDriverGetHostPointerBaseAddress reports a wrong base
//   FAKE_ZE_MEMMAP=1           advertise and serve ZE_extension_external_memmap_sysmem
//   FAKE_ZE_FAIL_ALLOC_AFTER=N in each context, device allocations after the N-th fail (the
//                              backend's own sum scratch, at creation, is the first)
//   FAKE_ZE_NO_DEVICES=1       the driver reports no device
//   FAKE_ZE_NO_COPY_ENGINE=1   only the compute queue group
//   FAKE_ZE_COPY_ENGINES=2     the copy-only group has two queues (default one, as the
//                              main copy engine): the backend gives device-to-host copies
//                              their own list
//   FAKE_ZE_SEED=N             the order in which a list completes its commands
//   FAKE_ZE_TICKS_PER_COMMAND, FAKE_ZE_CLOCK_START, FAKE_ZE_COPY_DELAY_US,
//   FAKE_ZE_HANG_SECONDS, FAKE_ZE_LOSE_DEVICE_AT  see fake_queue.cpp
//   FAKE_ZE_KERNELS=pocl|cpu     see fake_pocl.cpp
//   FAKE_ZE_LEAK_REPORT=PATH     at exit, append one line of outstanding objects
//                                (fake_hooks.cpp, as FAKE_ZE_FAULT_CMDLINE)
//   FAKE_ZE_FAULT_CMDLINE=TEXT   IMPORT_FAIL, FAIL_ALLOC_AFTER and LOSE_DEVICE_AT act only in
//                                processes whose command line (arguments joined by spaces)
//                                contains TEXT
//   FAKE_ZE_DEVICE_NAME=TEXT     the device's name (up to 255 bytes, any bytes)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <type_traits>

#include "backends/level_zero/ze_extensions.hpp"
#include "fake_state.hpp"

namespace fake_ze {
namespace {

struct Driver {
  int tag;
} g_driver;
struct Device {
  int tag;
} g_device;
struct Module {
  std::set<std::string> kernels;  // the SPIR-V's OpEntryPoint names
  void* program = nullptr;        // on PoCL
};

enum class AllocKind { device, host, memmap };
struct Alloc {
  std::size_t size;
  AllocKind kind;
};

std::map<std::uintptr_t, Alloc> g_allocs;
std::map<std::uintptr_t, std::size_t> g_imports;

// The range of `map` containing p, or end().
template <typename M>
typename M::iterator containing(M& map, std::uintptr_t p) {
  auto it = map.upper_bound(p);
  if (it == map.begin()) return map.end();
  --it;
  const std::size_t size = [&] {
    if constexpr (std::is_same_v<typename M::mapped_type, Alloc>) return it->second.size;
    else return it->second;
  }();
  return (p < it->first + size) ? it : map.end();
}

// ---------------------------------------------------------------- global, driver, device
ze_result_t ZE_APICALL Init(ze_init_flags_t flags) {
  if (flags != 0 && (flags & ZE_INIT_FLAG_GPU_ONLY) == 0) return ZE_RESULT_ERROR_UNINITIALIZED;
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL DriverGet(std::uint32_t* count, ze_driver_handle_t* drivers) {
  if (count == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (drivers != nullptr && *count >= 1)
    drivers[0] = reinterpret_cast<ze_driver_handle_t>(&g_driver);
  *count = 1;
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL DriverGetApiVersion(ze_driver_handle_t, ze_api_version_t* v) {
  *v = ZE_API_VERSION_1_4;
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL DriverGetProperties(ze_driver_handle_t, ze_driver_properties_t* p) {
  std::memset(p->uuid.id, 0x5a, sizeof p->uuid.id);
  p->driverVersion = 0x01020003;
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL DriverGetExtensionProperties(ze_driver_handle_t, std::uint32_t* count,
                                                    ze_driver_extension_properties_t* props) {
  std::vector<std::pair<const char*, std::uint32_t>> ext;
  if (!env_flag("FAKE_ZE_NO_IMPORT")) ext.emplace_back(zob::l0::kImportExtensionName, 1);
  if (env_flag("FAKE_ZE_MEMMAP"))
    ext.emplace_back(zob::l0::kMemmapExtensionName, zob::l0::kMemmapExtensionVersion);
  if (props != nullptr) {
    for (std::uint32_t i = 0; i < *count && i < ext.size(); ++i) {
      std::snprintf(props[i].name, sizeof props[i].name, "%s", ext[i].first);
      props[i].version = ext[i].second;
    }
    if (*count > ext.size()) *count = static_cast<std::uint32_t>(ext.size());
  } else {
    *count = static_cast<std::uint32_t>(ext.size());
  }
  return ZE_RESULT_SUCCESS;
}

// ---- ZEX_driver_import_host_pointer: compute-runtime's semantics, on a range map ----
ze_result_t zex_driver_ok(ze_driver_handle_t d) {
  if (d == reinterpret_cast<ze_driver_handle_t>(&g_driver)) return ZE_RESULT_SUCCESS;
  return complain(
      ZE_RESULT_ERROR_INVALID_NULL_HANDLE,
      "zex call with a foreign driver handle (the loader's? use zelLoaderTranslateHandle)");
}
ze_result_t ZE_APICALL zexImport(ze_driver_handle_t d, void* ptr, std::size_t size) {
  std::lock_guard lock(g_mutex);
  if (ze_result_t r = zex_driver_ok(d); r != ZE_RESULT_SUCCESS) return r;
  if (ptr == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  if (size == 0) return ZE_RESULT_ERROR_INVALID_SIZE;
  if (env_flag("FAKE_ZE_IMPORT_FAIL") && faults_apply()) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  const auto p = reinterpret_cast<std::uintptr_t>(ptr);
  auto next = g_imports.lower_bound(p);
  if (next != g_imports.end() && next->first < p + size)
    return complain(ZE_RESULT_ERROR_INVALID_ARGUMENT, "import overlaps an imported range");
  if (containing(g_imports, p) != g_imports.end())
    return complain(ZE_RESULT_ERROR_INVALID_ARGUMENT, "import overlaps an imported range");
  g_imports.emplace(p, size);
  g_live.add_import(size);
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL zexRelease(ze_driver_handle_t d, void* ptr) {
  std::lock_guard lock(g_mutex);
  if (ze_result_t r = zex_driver_ok(d); r != ZE_RESULT_SUCCESS) return r;
  auto it = containing(g_imports, reinterpret_cast<std::uintptr_t>(ptr));
  if (it == g_imports.end()) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  g_live.remove_import(it->second);
  g_imports.erase(it);
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL zexBase(ze_driver_handle_t d, void* ptr, void** base) {
  std::lock_guard lock(g_mutex);
  if (ze_result_t r = zex_driver_ok(d); r != ZE_RESULT_SUCCESS) return r;
  if (base == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  auto it = containing(g_imports, reinterpret_cast<std::uintptr_t>(ptr));
  if (it == g_imports.end()) {
    *base = nullptr;
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  }
  *base = reinterpret_cast<void*>(it->first + (env_flag("FAKE_ZE_BAD_BASE") ? 4096 : 0));
  return ZE_RESULT_SUCCESS;
}

long copy_only_lists() { return g_live.copy_only_lists; }

ze_result_t ZE_APICALL DriverGetExtensionFunctionAddress(ze_driver_handle_t, const char* name,
                                                         void** fn) {
  if (name == nullptr || fn == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  *fn = nullptr;
  // Test hooks: which executor runs kernels ("pocl" or "cpu"); how many live command lists
  // are on the copy-only group (the backend makes a second for device-to-host copies when
  // the group has two queues); holding every list's commands back (fake_queue.cpp).
  if (std::strcmp(name, "fakeZeKernelExecutor") == 0)
    *fn = reinterpret_cast<void*>(&kernel_executor);
  if (std::strcmp(name, "fakeZeCopyOnlyLists") == 0)
    *fn = reinterpret_cast<void*>(&copy_only_lists);
  if (std::strcmp(name, "fakeZeHoldLists") == 0) *fn = reinterpret_cast<void*>(&hold_lists);
  if (!env_flag("FAKE_ZE_NO_IMPORT")) {
    if (std::strcmp(name, zob::l0::kZexImportName) == 0) *fn = reinterpret_cast<void*>(&zexImport);
    if (std::strcmp(name, zob::l0::kZexReleaseName) == 0)
      *fn = reinterpret_cast<void*>(&zexRelease);
    if (std::strcmp(name, zob::l0::kZexBaseAddressName) == 0)
      *fn = reinterpret_cast<void*>(&zexBase);
  }
  return *fn != nullptr ? ZE_RESULT_SUCCESS : ZE_RESULT_ERROR_INVALID_ARGUMENT;
}

ze_result_t ZE_APICALL DeviceGet(ze_driver_handle_t, std::uint32_t* count,
                                 ze_device_handle_t* devs) {
  if (count == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  const std::uint32_t have = env_flag("FAKE_ZE_NO_DEVICES") ? 0 : 1;
  if (devs != nullptr && *count >= 1 && have == 1)
    devs[0] = reinterpret_cast<ze_device_handle_t>(&g_device);
  *count = have;
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL DeviceGetSubDevices(ze_device_handle_t, std::uint32_t* count,
                                           ze_device_handle_t*) {
  *count = 0;
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL DeviceGetProperties(ze_device_handle_t, ze_device_properties_t* p) {
  const bool v12 = p->stype == ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES_1_2;
  p->type = ZE_DEVICE_TYPE_GPU;
  p->vendorId = 0x8086;
  p->deviceId = 0x0bd5;
  p->flags = 0;
  p->coreClockRate = 1600;
  p->maxMemAllocSize = std::uint64_t{48} << 30;
  p->maxHardwareContexts = 64;
  p->maxCommandQueuePriority = 0;
  p->numThreadsPerEU = 8;
  p->physicalEUSimdWidth = 16;
  p->numEUsPerSubslice = 8;
  p->numSubslicesPerSlice = 64;
  p->numSlices = 1;
  // Hz with the 1.2 stype, ns per tick (truncated, as old drivers do) without it.
  p->timerResolution = v12 ? kTimerHz : 1'000'000'000 / kTimerHz;
  p->timestampValidBits = 64;
  p->kernelTimestampValidBits = kTimestampBits;
  std::memset(p->uuid.id, 0xa5, sizeof p->uuid.id);
  const char* name = std::getenv("FAKE_ZE_DEVICE_NAME");
  std::snprintf(p->name, sizeof p->name, "%s", name != nullptr ? name : "zob fake Level Zero GPU");
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL DeviceGetComputeProperties(ze_device_handle_t,
                                                  ze_device_compute_properties_t* p) {
  p->maxTotalGroupSize = 1024;
  p->maxGroupSizeX = p->maxGroupSizeY = p->maxGroupSizeZ = 1024;
  p->maxGroupCountX = p->maxGroupCountY = p->maxGroupCountZ = 0xffffffffu;
  p->maxSharedLocalMemory = 128 * 1024;
  p->numSubGroupSizes = 1;
  p->subGroupSizes[0] = 16;
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL DeviceGetMemoryProperties(ze_device_handle_t, std::uint32_t* count,
                                                 ze_device_memory_properties_t* p) {
  if (p != nullptr && *count >= 1) {
    p[0].totalSize = std::uint64_t{64} << 30;
    p[0].maxClockRate = 3200;
    p[0].maxBusWidth = 4096;
    std::snprintf(p[0].name, sizeof p[0].name, "%s", "HBM");
  }
  *count = 1;
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL DeviceGetCommandQueueGroupProperties(
    ze_device_handle_t, std::uint32_t* count, ze_command_queue_group_properties_t* p) {
  const std::uint32_t groups = env_flag("FAKE_ZE_NO_COPY_ENGINE") ? 1 : 2;
  if (p != nullptr) {
    if (*count >= 1) {
      p[0].flags =
          ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COMPUTE | ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY;
      p[0].maxMemoryFillPatternSize = 128;
      p[0].numQueues = 4;
    }
    if (*count >= 2 && groups == 2) {
      p[1].flags = ZE_COMMAND_QUEUE_GROUP_PROPERTY_FLAG_COPY;
      p[1].maxMemoryFillPatternSize = 4;
      p[1].numQueues = copy_engine_count();
    }
    if (*count > groups) *count = groups;
  } else {
    *count = groups;
  }
  return ZE_RESULT_SUCCESS;
}

// ---------------------------------------------------------------- context and memory
ze_result_t ZE_APICALL ContextCreate(ze_driver_handle_t, const ze_context_desc_t*,
                                     ze_context_handle_t* c) {
  *c = reinterpret_cast<ze_context_handle_t>(new Context);
  ++g_live.contexts;
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL ContextDestroy(ze_context_handle_t c) {
  std::lock_guard lock(g_mutex);
  auto* ctx = reinterpret_cast<Context*>(c);
  drain_quarantine(ctx);
  delete ctx;
  --g_live.contexts;
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL ContextGetStatus(ze_context_handle_t) { return ZE_RESULT_SUCCESS; }

std::size_t round_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

ze_result_t ZE_APICALL MemAllocDevice(ze_context_handle_t c, const ze_device_mem_alloc_desc_t*,
                                      std::size_t size, std::size_t alignment, ze_device_handle_t,
                                      void** out) {
  std::lock_guard lock(g_mutex);
  auto* ctx = reinterpret_cast<Context*>(c);
  const long long limit = faults_apply() ? env_num("FAKE_ZE_FAIL_ALLOC_AFTER", -1) : -1;
  if (limit >= 0 && ctx->device_allocs >= limit) return ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
  const std::size_t align = alignment < 256 ? 256 : alignment;
  void* p = std::aligned_alloc(align, round_up(size == 0 ? 1 : size, align));
  if (p == nullptr) return ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY;
  ++ctx->device_allocs;
  g_allocs[reinterpret_cast<std::uintptr_t>(p)] = Alloc{size, AllocKind::device};
  g_live.add_alloc(size);
  *out = p;
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL MemAllocHost(ze_context_handle_t, const ze_host_mem_alloc_desc_t* desc,
                                    std::size_t size, std::size_t alignment, void** out) {
  std::lock_guard lock(g_mutex);
  // ze_external_memmap_sysmem_ext_desc_t chained: map the caller's memory.
  for (auto* ext = static_cast<const ze_base_desc_t*>(desc->pNext); ext != nullptr;
       ext = static_cast<const ze_base_desc_t*>(ext->pNext)) {
    if (static_cast<std::uint32_t>(ext->stype) !=
        static_cast<std::uint32_t>(zob::l0::kStypeExternalMemmapSysmemExtDesc))
      continue;
    if (!env_flag("FAKE_ZE_MEMMAP")) return ZE_RESULT_ERROR_UNSUPPORTED_FEATURE;
    const auto* mm = reinterpret_cast<const zob::l0::ExternalMemmapSysmemExtDesc*>(ext);
    const auto p = reinterpret_cast<std::uintptr_t>(mm->pSystemMemory);
    if (p % 4096 != 0 || mm->size % 4096 != 0 || mm->size != size)
      return complain(ZE_RESULT_ERROR_INVALID_ARGUMENT, "memmap of an unaligned range");
    if (containing(g_allocs, p) != g_allocs.end()) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
    g_allocs[p] = Alloc{size, AllocKind::memmap};
    g_live.add_alloc(size);
    *out = const_cast<void*>(static_cast<const void*>(mm->pSystemMemory));
    return ZE_RESULT_SUCCESS;
  }
  const std::size_t align = alignment < 64 ? 64 : alignment;
  void* p = std::aligned_alloc(align, round_up(size == 0 ? 1 : size, align));
  if (p == nullptr) return ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY;
  g_allocs[reinterpret_cast<std::uintptr_t>(p)] = Alloc{size, AllocKind::host};
  g_live.add_alloc(size);
  *out = p;
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL MemFree(ze_context_handle_t c, void* p) {
  std::lock_guard lock(g_mutex);
  auto it = g_allocs.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == g_allocs.end())
    return complain(ZE_RESULT_ERROR_INVALID_ARGUMENT, "zeMemFree of an unknown pointer");
  // Freeing what a queued command may still touch: kept allocated (the worker would write
  // freed memory), and the context is lost so the caller's next call fails.
  // A lost context runs no command again (its workers drop them), so after a device loss
  // everything may be freed, as a real driver allows: that is how a failed arm cleans up.
  auto* ctx = reinterpret_cast<Context*>(c);
  if (auto race = ctx->lost.empty() ? race_check_free(it->first, it->second.size, ctx->host)
                                    : std::string();
      !race.empty()) {
    lose_context(ctx, race);
    return ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE;
  }
  if (ctx->pending > 0) {
    race_mark_freed(it->first, it->second.size);
    if (it->second.kind != AllocKind::memmap) ctx->quarantine.push_back(p);
  } else if (it->second.kind != AllocKind::memmap) {
    std::free(p);
  }
  g_live.remove_alloc(it->second.size);
  g_allocs.erase(it);
  return ZE_RESULT_SUCCESS;
}

// ---------------------------------------------------------------- modules and kernels
// The OpEntryPoint names of a SPIR-V module: which kernels zeKernelCreate may create.
bool spirv_entry_points(const std::uint8_t* bytes, std::size_t size, std::set<std::string>* names) {
  if (size < 20 || size % 4 != 0) return false;
  std::vector<std::uint32_t> w(size / 4);
  std::memcpy(w.data(), bytes, size);
  if (w[0] != 0x07230203u) return false;
  for (std::size_t i = 5; i < w.size();) {
    const std::uint32_t count = w[i] >> 16, op = w[i] & 0xffffu;
    if (count == 0 || i + count > w.size()) return false;
    if (op == 15 && count > 3)  // OpEntryPoint model id "name" interface...
      names->insert(reinterpret_cast<const char*>(&w[i + 3]));
    i += count;
  }
  return true;
}
struct BuildLog {
  std::string text;
};
// The SPIR-V is checked for its entry points, then (unless FAKE_ZE_KERNELS=cpu) handed to
// PoCL: a module PoCL cannot build fails here, with PoCL's log as the build log.
ze_result_t ZE_APICALL ModuleCreate(ze_context_handle_t, ze_device_handle_t,
                                    const ze_module_desc_t* desc, ze_module_handle_t* out,
                                    ze_module_build_log_handle_t* log) {
  if (log != nullptr) *log = nullptr;
  auto module = std::make_unique<Module>();
  if (desc->format != ZE_MODULE_FORMAT_IL_SPIRV ||
      !spirv_entry_points(desc->pInputModule, desc->inputSize, &module->kernels))
    return complain(ZE_RESULT_ERROR_INVALID_NATIVE_BINARY, "module is not SPIR-V");
  if (std::strcmp(kernel_executor(), "pocl") == 0) {
    std::string why;
    module->program = pocl_program(desc->pInputModule, desc->inputSize, &why);
    if (module->program == nullptr) {
      if (log != nullptr)
        *log =
            reinterpret_cast<ze_module_build_log_handle_t>(new BuildLog{"fake-ze (PoCL): " + why});
      return complain(ZE_RESULT_ERROR_MODULE_BUILD_FAILURE, "PoCL cannot build the module: " + why);
    }
  }
  *out = reinterpret_cast<ze_module_handle_t>(module.release());
  ++g_live.modules;
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL ModuleDestroy(ze_module_handle_t m) {
  delete reinterpret_cast<Module*>(m);
  --g_live.modules;
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL BuildLogDestroy(ze_module_build_log_handle_t l) {
  delete reinterpret_cast<BuildLog*>(l);
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL BuildLogGetString(ze_module_build_log_handle_t l, std::size_t* size,
                                         char* s) {
  const std::string& text = reinterpret_cast<BuildLog*>(l)->text;
  if (s != nullptr && *size > 0) std::snprintf(s, *size, "%s", text.c_str());
  *size = text.size() + 1;
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL KernelCreate(ze_module_handle_t m, const ze_kernel_desc_t* desc,
                                    ze_kernel_handle_t* out) {
  const auto* module = reinterpret_cast<Module*>(m);
  if (module->kernels.count(desc->pKernelName) == 0) return ZE_RESULT_ERROR_INVALID_KERNEL_NAME;
  if (!kernel_known(desc->pKernelName))
    return complain(ZE_RESULT_ERROR_INVALID_KERNEL_NAME,
                    std::string("no launch check for kernel '") + desc->pKernelName + "'");
  auto* k = new KernelLaunch;
  k->name = desc->pKernelName;
  k->program = module->program;
  *out = reinterpret_cast<ze_kernel_handle_t>(k);
  ++g_live.kernels;
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL KernelDestroy(ze_kernel_handle_t k) {
  delete reinterpret_cast<KernelLaunch*>(k);
  --g_live.kernels;
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL KernelSetGroupSize(ze_kernel_handle_t k, std::uint32_t x, std::uint32_t y,
                                          std::uint32_t z) {
  auto& l = *reinterpret_cast<KernelLaunch*>(k);
  l.group_size[0] = x;
  l.group_size[1] = y;
  l.group_size[2] = z;
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL KernelSetArgumentValue(ze_kernel_handle_t k, std::uint32_t index,
                                              std::size_t size, const void* value) {
  auto& args = reinterpret_cast<KernelLaunch*>(k)->args;
  if (index >= 32) return ZE_RESULT_ERROR_INVALID_KERNEL_ARGUMENT_INDEX;
  if (args.size() <= index) args.resize(index + 1);
  const auto* b = static_cast<const std::uint8_t*>(value);
  args[index].assign(b, b + (value != nullptr ? size : 0));
  return ZE_RESULT_SUCCESS;
}

}  // namespace

void drain_quarantine(Context* ctx) {
  if (ctx->pending > 0) return;
  for (void* p : ctx->quarantine) {
    race_unmark_freed(reinterpret_cast<std::uintptr_t>(p));
    std::free(p);
  }
  ctx->quarantine.clear();
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
}
long long env_num(const char* name, long long fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && v[0] != '\0') ? std::atoll(v) : fallback;
}
std::uint32_t copy_engine_count() { return env_num("FAKE_ZE_COPY_ENGINES", 1) >= 2 ? 2 : 1; }
ze_result_t complain(ze_result_t r, const std::string& what) {
  std::fprintf(stderr, "fake-ze: %s\n", what.c_str());
  return r;
}

bool is_staged_host(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  return containing(g_allocs, a) == g_allocs.end() && containing(g_imports, a) == g_imports.end();
}

bool is_device_range(const void* p, std::size_t bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = containing(g_allocs, a);
  return it != g_allocs.end() && it->second.kind == AllocKind::device &&
         a + bytes <= it->first + it->second.size;
}

void fake_fill(ze_global_dditable_t* t) { t->pfnInit = Init; }
void fake_fill(ze_driver_dditable_t* t) {
  t->pfnGet = DriverGet;
  t->pfnGetApiVersion = DriverGetApiVersion;
  t->pfnGetProperties = DriverGetProperties;
  t->pfnGetExtensionProperties = DriverGetExtensionProperties;
  t->pfnGetExtensionFunctionAddress = DriverGetExtensionFunctionAddress;
}
void fake_fill(ze_device_dditable_t* t) {
  t->pfnGet = DeviceGet;
  t->pfnGetSubDevices = DeviceGetSubDevices;
  t->pfnGetProperties = DeviceGetProperties;
  t->pfnGetComputeProperties = DeviceGetComputeProperties;
  t->pfnGetMemoryProperties = DeviceGetMemoryProperties;
  t->pfnGetCommandQueueGroupProperties = DeviceGetCommandQueueGroupProperties;
}
void fake_fill(ze_context_dditable_t* t) {
  t->pfnCreate = ContextCreate;
  t->pfnDestroy = ContextDestroy;
  t->pfnGetStatus = ContextGetStatus;
}
void fake_fill(ze_module_dditable_t* t) {
  t->pfnCreate = ModuleCreate;
  t->pfnDestroy = ModuleDestroy;
}
void fake_fill(ze_module_build_log_dditable_t* t) {
  t->pfnDestroy = BuildLogDestroy;
  t->pfnGetString = BuildLogGetString;
}
void fake_fill(ze_kernel_dditable_t* t) {
  t->pfnCreate = KernelCreate;
  t->pfnDestroy = KernelDestroy;
  t->pfnSetGroupSize = KernelSetGroupSize;
  t->pfnSetArgumentValue = KernelSetArgumentValue;
}
void fake_fill(ze_mem_dditable_t* t) {
  t->pfnAllocDevice = MemAllocDevice;
  t->pfnAllocHost = MemAllocHost;
  t->pfnFree = MemFree;
}

}  // namespace fake_ze
