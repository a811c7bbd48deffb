// Small helpers every Level Zero call site uses: the result's name, a checked call that
// throws zob::DeviceError naming the call, and the declarations the 1.8.12 headers lack.
#pragma once
#include <level_zero/ze_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "zob/errors.hpp"

namespace zob::l0 {

const char* result_name(ze_result_t r);

// The kind a failed call maps to: the two out-of-memory results -> out_of_memory, the rest
// -> runtime (callers that know better pass their own kind).
DeviceErrorKind kind_of(ze_result_t r);

// Throws DeviceError("xpu: <call> failed: <ZE_RESULT_...> (<detail>)").
[[noreturn]] void fail(const char* call, ze_result_t r, const std::string& detail,
                       DeviceErrorKind kind);

inline void check(ze_result_t r, const char* call, const std::string& detail = {}) {
  if (r != ZE_RESULT_SUCCESS) fail(call, r, detail, kind_of(r));
}

// Checks a call, naming it by its source text: ZE_CHECK(zeFoo(a, b)).
#define ZE_CHECK(expr) ::zob::l0::check((expr), #expr)
#define ZE_CHECK_D(expr, detail) ::zob::l0::check((expr), #expr, (detail))

// ---- ZEX_driver_import_host_pointer (Intel compute-runtime; not in the spec headers) ----
using zex_import_fn = ze_result_t (*)(ze_driver_handle_t, void*, std::size_t);
using zex_release_fn = ze_result_t (*)(ze_driver_handle_t, void*);
using zex_base_address_fn = ze_result_t (*)(ze_driver_handle_t, void*, void**);

inline constexpr const char* kImportExtensionName = "ZEX_driver_import_host_pointer";

// ---- ZE_extension_external_memmap_sysmem (spec 1.12+; Debian's 1.8.12 headers are 1.4) ----
inline constexpr const char* kMemmapExtensionName = "ZE_extension_external_memmap_sysmem";
inline constexpr auto kStypeExternalMemmapSysmemExtDesc = static_cast<ze_structure_type_t>(0x00020037);
struct ExternalMemmapSysmemExtDesc {  // ze_external_memmap_sysmem_ext_desc_t, field for field
  ze_structure_type_t stype = kStypeExternalMemmapSysmemExtDesc;
  const void* pNext = nullptr;
  const void* pSystemMemory = nullptr;
  std::uint64_t size = 0;
};

}  // namespace zob::l0
