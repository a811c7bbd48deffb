// Internal to src/step: device memory and events owned RAII-style, so that every exit from
// run_arm, a throw included, gives them back.
#pragma once
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "zob/device.hpp"

namespace zob::step_detail {

// Device memory owned RAII-style; a zero-byte request owns nothing.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Device& dev, std::uint64_t bytes) : dev_(&dev) {
    if (bytes > 0) ptr_ = dev.allocate(static_cast<std::size_t>(bytes));
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) dev_->deallocate(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : dev_(o.dev_), ptr_(std::exchange(o.ptr_, nullptr)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_ != nullptr) dev_->deallocate(ptr_);
      dev_ = o.dev_;
      ptr_ = std::exchange(o.ptr_, nullptr);
    }
    return *this;
  }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  Device* dev_ = nullptr;
  void* ptr_ = nullptr;
};

using Events = std::vector<std::unique_ptr<DeviceEvent>>;
inline Events make_events(Device& dev, std::size_t n) {
  Events e;
  e.reserve(n);
  for (std::size_t i = 0; i < n; ++i) e.push_back(dev.create_event());
  return e;
}

}  // namespace zob::step_detail
