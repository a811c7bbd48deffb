// The names of the two host-registration extensions, in ONE place, used by the backend and by
// the fake test driver (tests/fake_level_zero). Everything the Level Zero headers in use
// declare is taken from them; what they lack is declared here once, with where it comes from.
#pragma once
#include <level_zero/ze_api.h>

#include <cstddef>
#include <cstdint>

namespace zob::l0 {

// ---- ZE_extension_external_memmap_sysmem: the Level Zero specification 1.12 (loader and
// headers v1.20 and later). Debian bookworm's headers (1.8.12) are spec 1.4 and lack it, so
// CI compiles the fallback; LevelZeroDevice.MemmapDescriptorIsTheSpecifications checks its
// stype and layout against the specification's.
#if defined(ZE_EXTERNAL_MEMMAP_SYSMEM_EXT_NAME)
inline constexpr const char* kMemmapExtensionName = ZE_EXTERNAL_MEMMAP_SYSMEM_EXT_NAME;
inline constexpr auto kStypeExternalMemmapSysmemExtDesc =
    ZE_STRUCTURE_TYPE_EXTERNAL_MEMMAP_SYSMEM_EXT_DESC;
using ExternalMemmapSysmemExtDesc = ze_external_memmap_sysmem_ext_desc_t;
// The fallback below must agree with the headers that do declare it.
static_assert(static_cast<std::uint32_t>(ZE_STRUCTURE_TYPE_EXTERNAL_MEMMAP_SYSMEM_EXT_DESC) ==
              0x00020037u);
#else
inline constexpr const char* kMemmapExtensionName = "ZE_extension_external_memmap_sysmem";
// ZE_STRUCTURE_TYPE_EXTERNAL_MEMMAP_SYSMEM_EXT_DESC, spec 1.12 (ze_structure_type_t).
inline constexpr auto kStypeExternalMemmapSysmemExtDesc =
    static_cast<ze_structure_type_t>(0x00020037);
struct ExternalMemmapSysmemExtDesc {  // ze_external_memmap_sysmem_ext_desc_t, field for field
  ze_structure_type_t stype = kStypeExternalMemmapSysmemExtDesc;
  const void* pNext = nullptr;
  const void* pSystemMemory = nullptr;  // page-aligned
  std::uint64_t size = 0;               // page-aligned
};
#endif
inline constexpr std::uint32_t kMemmapExtensionVersion = ZE_MAKE_VERSION(1, 0);

// ---- ZEX_driver_import_host_pointer: Intel compute-runtime's own extension (its
// level_zero/ze_intel_gpu.h / zex_driver.h), never in the spec headers. Functions are asked for
// by name with zeDriverGetExtensionFunctionAddress and need the driver's own handle.
inline constexpr const char* kImportExtensionName = "ZEX_driver_import_host_pointer";
inline constexpr const char* kZexImportName = "zexDriverImportExternalPointer";
inline constexpr const char* kZexReleaseName = "zexDriverReleaseImportedPointer";
inline constexpr const char* kZexBaseAddressName = "zexDriverGetHostPointerBaseAddress";
using zex_import_fn = ze_result_t (*)(ze_driver_handle_t, void*, std::size_t);
using zex_release_fn = ze_result_t (*)(ze_driver_handle_t, void*);
using zex_base_address_fn = ze_result_t (*)(ze_driver_handle_t, void*, void**);

}  // namespace zob::l0
