// Error types shared by every layer. The kind decides the process exit code (see exit_codes.hpp).
#pragma once
#include <stdexcept>
#include <string>

namespace zob {

// Bad flags, bad files, a pre-flight refusal: nothing ran. Exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class DeviceErrorKind {
  unavailable,           // backend not compiled in, runtime/driver missing, no device: exit 3
  out_of_memory,         // device or host allocation refused
  registration_refused,  // the driver would not register / import host memory
  lock_refused,          // mlock refused (RLIMIT_MEMLOCK)
  runtime,               // any other failed runtime call
};

class DeviceError : public std::runtime_error {
 public:
  DeviceError(DeviceErrorKind kind, const std::string& what)
      : std::runtime_error(what), kind_(kind) {}
  DeviceErrorKind kind() const { return kind_; }

 private:
  DeviceErrorKind kind_;
};

}  // namespace zob
