// Internal to src/backends/cuda: the CUDA backend's test-only fault hook (docs/faults.md), the
// one environment variable this backend reads for the tests:
//   ZOB_TEST_CUDA_FAULT=<call>:<n>[:<error>]
// The n-th checked call named <call> in this process (a runtime call such as
// cudaMemcpyAsync or cudaEventSynchronize, or a kernel's name such as embedding_backward, once
// per step) reports <error> (a cudaError_t name; default cudaErrorIllegalAddress) through the
// backend's usual check, so its one line carries the runtime's own text. The call itself was
// made: the context stays usable, which a real sticky error would not leave it. Unset (every
// user's case) it costs one comparison per checked call.
#pragma once
#include <cuda_runtime.h>

namespace zob::cuda {

// e, or the hook's error when this is the chosen call.
cudaError_t test_fault(cudaError_t e, const char* call);

}  // namespace zob::cuda
