// libFuzzer target: the reader of saved results used by `compare`. Any input must either
// parse or throw UsageError -- never crash, hang, leak or trip a sanitizer.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "zob/compare.hpp"
#include "zob/errors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto doc = zob::parse_result_document(text, "fuzz");
    (void)doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } catch (const zob::UsageError&) {
  }
  return 0;
}
