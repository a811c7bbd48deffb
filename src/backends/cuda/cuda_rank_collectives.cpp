// CudaDevice's side of --gpus N: its collectives are NCCL's (nccl_collectives.hpp), compiled
// in when the build found nccl.h (ZOB_WITH_NCCL) and loaded at run time.
#include "backends/cuda/cuda_device.hpp"

#include <stdlib.h>

#include <string>

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

namespace {

// NCCL reads its environment at its first call in the process, which comes after this. It
// must never use NVLink multicast (NVLS) on these machines. Ranks that share one GPU (test
// hook): NCCL refuses two ranks on one GPU of one host, so each rank claims a host of its own
// and NCCL connects them over loopback sockets; the results are exact, the timings mean nothing.
void set_nccl_environment(int rank, bool ranks_share_device) {
  ::setenv("NCCL_NVLS_ENABLE", "0", 1);
  if (!ranks_share_device) return;
  ::setenv("NCCL_HOSTID", ("zob-test-rank-" + std::to_string(rank)).c_str(), 1);
  ::setenv("NCCL_SOCKET_IFNAME", "lo", 0);
}

}  // namespace

std::unique_ptr<Collectives> CudaDevice::make_rank_collectives(
    Collectives& host, const RankCollectivesOptions& options) {
  check_rank_collectives();
  set_nccl_environment(host.rank(), options.ranks_share_device);
#ifdef ZOB_WITH_NCCL
  return std::make_unique<cuda::NcclCollectives>(*this, host, options.timeout_s);
#else
  (void)host;
  return nullptr;  // not reached: check_rank_collectives threw
#endif
}

}  // namespace zob
