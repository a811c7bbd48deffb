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
  T* as() const {
    return static_cast<T*>(ptr_);
  }

 private:
  Device* dev_ = nullptr;
  void* ptr_ = nullptr;
};

// Device events of one kind (a module's D2H end, a piece's cast start, ...), created once and
// re-recorded every step. Indexed by the signed counts the steps compute with (module j,
// piece p, fetch f): events[j] is the event itself.
class Events {
 public:
  Events() = default;
  Events(Device& dev, std::int64_t n) {
    events_.reserve(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) events_.push_back(dev.create_event());
  }
  DeviceEvent& operator[](std::int64_t i) const { return *events_[static_cast<std::size_t>(i)]; }
  std::int64_t size() const { return static_cast<std::int64_t>(events_.size()); }

 private:
  std::vector<std::unique_ptr<DeviceEvent>> events_;
};
inline Events make_events(Device& dev, std::int64_t n) { return Events(dev, n); }

}  // namespace zob::step_detail
