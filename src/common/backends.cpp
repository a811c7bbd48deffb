#include "zob/backends.hpp"

namespace zob {

const BackendInfo* find_backend(std::string_view name) {
  for (const BackendInfo& b : kBackends) {
    if (name == b.name) return &b;
  }
  return nullptr;
}

const BackendInfo* find_backend(DeviceKind kind) {
  for (const BackendInfo& b : kBackends) {
    if (b.kind == kind) return &b;
  }
  return nullptr;
}

std::string backend_names(std::string_view conjunction, bool with_auto) {
  std::string out = with_auto ? "auto" : "";
  const std::size_t n = std::size(kBackends);
  for (std::size_t i = 0; i < n; ++i) {
    if (!out.empty()) {
      if (conjunction == "|" || i + 1 < n) {
        out += conjunction == "|" ? "|" : ", ";
      } else {
        out += ' ';
        out += conjunction;
        out += ' ';
      }
    }
    out += kBackends[i].name;
  }
  return out;
}

}  // namespace zob
