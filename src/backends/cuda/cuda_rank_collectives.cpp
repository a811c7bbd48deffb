// CudaDevice's side of --gpus N: its collectives are NCCL's (nccl_collectives.hpp), compiled
// in when the build found nccl.h (ZOB_WITH_NCCL) and loaded at run time.
#include "backends/cuda/cuda_device.hpp"
#include "zob/errors.hpp"

#ifdef ZOB_WITH_NCCL
#include "backends/cuda/nccl_api.hpp"
#include "backends/cuda/nccl_collectives.hpp"
#endif

namespace zob {

void CudaDevice::check_rank_collectives() const {
#ifdef ZOB_WITH_NCCL
  (void)cuda::NcclApi::get();  // throws DeviceError(unavailable) naming what is missing
#else
  throw DeviceError(DeviceErrorKind::unavailable,
                    "cuda: this build has no NCCL support (nccl.h was not found when it was "
                    "built); rebuild where NCCL's headers are installed, or use --gpus 1");
#endif
}

std::unique_ptr<Collectives> CudaDevice::make_rank_collectives(Collectives& host,
                                                               double timeout_s) {
  check_rank_collectives();
#ifdef ZOB_WITH_NCCL
  return std::make_unique<cuda::NcclCollectives>(*this, host, timeout_s);
#else
  (void)host;
  (void)timeout_s;
  return nullptr;  // not reached: check_rank_collectives threw
#endif
}

}  // namespace zob
