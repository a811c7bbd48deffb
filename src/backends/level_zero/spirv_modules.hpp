// The SPIR-V modules compiled from kernels/*.cl at build time (see CMakeLists.txt).
#pragma once
#include <cstddef>

namespace zob::l0 {

struct SpirvModule {
  const char* name;  // the .cl file's stem: "gemm", "embedding", "elementwise", "reduce"
  const unsigned char* data;
  std::size_t size;
};
extern const SpirvModule kSpirvModules[];
extern const int kSpirvModuleCount;

}  // namespace zob::l0
