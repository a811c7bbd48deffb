#include "backends/cuda/cuda_test_fault.hpp"

#include <cstdlib>
#include <string>

namespace zob::cuda {

namespace {

struct Spec {
  std::string call;  // empty: no fault asked for
  long at = 0;
  cudaError_t error = cudaErrorIllegalAddress;
};

// The error of that name; cudaErrorIllegalAddress for a name the runtime does not know.
cudaError_t error_named(const std::string& name) {
  for (int code = 1; code < 1000; ++code) {
    const auto e = static_cast<cudaError_t>(code);
    if (name == cudaGetErrorName(e)) return e;
  }
  return cudaErrorIllegalAddress;
}

// Read once: the plugin is loaded once per process, after the driver set the environment.
const Spec& spec() {
  static const Spec read = [] {
    Spec s;
    const char* v = std::getenv("ZOB_TEST_CUDA_FAULT");
    if (v == nullptr) return s;
    const std::string text(v);
    const auto first = text.find(':');
    if (first == std::string::npos) return s;
    const auto second = text.find(':', first + 1);
    s.at = std::atol(text.substr(first + 1, second - first - 1).c_str());
    if (s.at < 1) return s;
    s.call = text.substr(0, first);
    if (second != std::string::npos) s.error = error_named(text.substr(second + 1));
    return s;
  }();
  return read;
}

}  // namespace

cudaError_t test_fault(cudaError_t e, const char* call) {
  static long seen = 0;
  const Spec& s = spec();
  if (s.call.empty() || s.call != call || ++seen != s.at) return e;
  return s.error;
}

bool test_skip_host_register() {
  static const bool skip = [] {
    const char* v = std::getenv("ZOB_TEST_CUDA_SKIP_REGISTER");
    return v != nullptr && std::string(v) == "1";
  }();
  return skip;
}

}  // namespace zob::cuda
