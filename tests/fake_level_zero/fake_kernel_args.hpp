// The fake driver's launch checks, shared by the files that list kernels (fake_kernels.cpp,
// fake_decoder_kernels.cpp): the arguments of one launch, checked as a real device would need
// them, and the table of kernels by name.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <type_traits>

#include "fake_state.hpp"

namespace fake_ze::launch_check {

struct Bad {  // a launch the fake refuses; the message goes to stderr
  std::string why;
};

class Args {
 public:
  Args(const KernelLaunch& l, KernelPlan& plan) : l_(l), plan_(plan) {}
  template <typename T>
  T get(std::size_t i) const {
    if (i >= l_.args.size() || l_.args[i].size() != sizeof(T))
      throw Bad{"argument " + std::to_string(i) + " not set or of the wrong size"};
    T v;
    std::memcpy(&v, l_.args[i].data(), sizeof v);
    return v;
  }
  // A pointer argument that must cover `count` elements of device memory; recorded as read
  // (const T) or written.
  template <typename T>
  T* ptr(std::size_t i, std::int64_t count) const {
    auto* p = get<T*>(i);
    const auto bytes = static_cast<std::size_t>(std::max<std::int64_t>(count, 1)) * sizeof(T);
    if (!is_device_range(p, bytes))
      throw Bad{"argument " + std::to_string(i) + " is not " + std::to_string(bytes) +
                " bytes of device memory (host or imported memory given to a kernel?)"};
    const auto b = reinterpret_cast<std::uintptr_t>(p);
    plan_.accesses.push_back(Access{b, b + bytes, !std::is_const_v<T>});
    plan_.pointer_args.push_back(static_cast<std::uint32_t>(i));
    return p;
  }
  // The elements a row-major matrix view of `rows` x `cols` with leading dimension ld spans.
  static std::int64_t span(std::int64_t rows, std::int64_t cols, std::int64_t ld) {
    return rows <= 0 || cols <= 0 ? 0 : (rows - 1) * ld + cols;
  }
  void run(std::function<void()> f) const { plan_.cpu = std::move(f); }
  void need_args(std::size_t n) const {
    if (l_.args.size() != n) throw Bad{"expects " + std::to_string(n) + " arguments"};
  }
  void need_group(std::uint32_t x, std::uint32_t y) const {
    if (l_.group_size[0] != x || l_.group_size[1] != y || l_.group_size[2] != 1)
      throw Bad{"group size must be the kernel's reqd_work_group_size"};
  }
  std::uint32_t groups(int d) const {
    const std::uint32_t counts[3] = {l_.groups.groupCountX, l_.groups.groupCountY,
                                     l_.groups.groupCountZ};
    return counts[d];
  }
  // The grid must cover `items` elements along dimension d, `per_item` per work-item.
  void need_cover(int d, std::int64_t items, std::int64_t per_item = 1) const {
    if (static_cast<std::int64_t>(groups(d)) * l_.group_size[d] * per_item < items)
      throw Bad{"grid does not cover " + std::to_string(items) + " items in dimension " +
                std::to_string(d)};
  }
  // The element-wise kernels: 4 elements per work-item (ZOB_VEC), groups of 256.
  void need_1d(std::int64_t n, std::int64_t per_item = 4) const {
    need_group(256, 1);
    need_cover(0, n, per_item);
  }

 private:
  const KernelLaunch& l_;
  KernelPlan& plan_;
};

inline std::int64_t max_plus_one(const std::int32_t* v, std::int64_t n) {
  std::int64_t m = 0;
  for (std::int64_t i = 0; i < n; ++i) m = std::max<std::int64_t>(m, std::int64_t{v[i]} + 1);
  return m;
}

using Runner = std::function<void(const Args&)>;

using Table = std::map<std::string, Runner>;

// The decoder-transformer kernels (fake_decoder_kernels.cpp).
void add_decoder(Table& t);

}  // namespace fake_ze::launch_check
