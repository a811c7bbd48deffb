// Internal to src/backends/cuda: the CUDA backend's test-only fault hooks (docs/faults.md), the
// environment variables this backend reads for the tests:
//   ZOB_TEST_CUDA_FAULT=<call>:<n>[:<error>]
//   ZOB_TEST_CUDA_SKIP_REGISTER=1
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

// ZOB_TEST_CUDA_SKIP_REGISTER=1: register_host does not call cudaHostRegister and takes it as
// a success, as a runtime that says yes and registers nothing would; the backend's own check
// (cudaPointerGetAttributes) must then refuse the arm. tests/gpu/gpu_e2e_test.cpp proves it.
bool test_skip_host_register();

}  // namespace zob::cuda
