// Small helpers every Level Zero call site uses: the result's name, a checked call that
// throws zob::DeviceError naming the call (extension names: ze_extensions.hpp).
#pragma once
#include <level_zero/ze_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "ze_extensions.hpp"
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

}  // namespace zob::l0
