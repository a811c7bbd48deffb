// Facts of the machine this process runs on that every layer may ask for.
#pragma once
#include <cstddef>

namespace zob {

// The page size (sysconf(_SC_PAGESIZE); 4096 when it cannot be read).
std::size_t page_size();
// n rounded up to a multiple of the page size.
inline std::size_t round_up_to_page(std::size_t n) {
  const std::size_t page = page_size();
  return (n + page - 1) / page * page;
}

}  // namespace zob
