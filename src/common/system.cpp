#include "zob/system.hpp"

#include <unistd.h>

namespace zob {

std::size_t page_size() {
  static const std::size_t page = [] {
    const long p = ::sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<std::size_t>(p) : std::size_t{4096};
  }();
  return page;
}

}  // namespace zob
