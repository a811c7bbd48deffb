// Helpers shared by the Level Zero tests: environment switches of the fake driver, random
// data, and device buffers on a LevelZeroDevice.
#pragma once
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/level_zero/level_zero_device.hpp"
#include "zob/bf16.hpp"
#include "zob/errors.hpp"

namespace zob::test {

// Sets an environment variable for the scope (the fake driver reads its switches per call).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_.c_str(), old_.c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

inline std::vector<bf16> random_bf16(std::size_t n, std::mt19937& rng, float lo = -2.f,
                                     float hi = 2.f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<bf16> v(n);
  for (auto& x : v) x = f32_to_bf16(d(rng));
  return v;
}

inline bool same_bits(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(bf16)) == 0;
}

inline constexpr float kBf16Ulp = 1.0f / 128;  // one bf16 ulp, relative (8 significant bits)

// Elements outside |got - want| <= rel * |want| + abs (the kernels on PoCL against zob::cpu:
// another summation order, another libm).
inline std::size_t count_far(const std::vector<bf16>& got, const std::vector<bf16>& want, float rel,
                             float abs) {
  if (got.size() != want.size()) return got.size() + want.size();
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float g = bf16_to_f32(got[i]), w = bf16_to_f32(want[i]);
    if (!(std::fabs(g - w) <= rel * std::fabs(w) + abs)) ++bad;
  }
  return bad;
}

// A device allocation holding a copy of host data; read() copies back and synchronizes.
template <typename T>
class Buffer {
 public:
  Buffer(Device& dev, const std::vector<T>& host) : dev_(dev), n_(host.size()) {
    p_ = static_cast<T*>(dev.allocate(bytes()));
    dev.copy_to_device(Queue::h2d, p_, host.data(), bytes());
    dev.synchronize();
  }
  Buffer(Device& dev, std::size_t n) : dev_(dev), n_(n) {
    p_ = static_cast<T*>(dev.allocate(bytes()));
    dev.fill_zero(Queue::compute, p_, bytes());
    dev.synchronize();  // the next user may be on another queue
  }
  ~Buffer() { dev_.deallocate(p_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  T* get() const { return p_; }
  std::vector<T> read() const {
    std::vector<T> out(n_);
    dev_.synchronize();
    dev_.copy_to_host(Queue::d2h, out.data(), p_, bytes());
    dev_.synchronize();
    return out;
  }

 private:
  std::size_t bytes() const { return n_ * sizeof(T); }
  Device& dev_;
  std::size_t n_;
  T* p_ = nullptr;
};

}  // namespace zob::test
