// NCCL, loaded at run time. The CUDA plugin does not link libnccl: a machine without it still
// runs every one-GPU measurement, and --gpus N > 1 then fails with one line naming the library
// (exit 3). nccl.h (CUDA toolkit) gives the types only; the functions come from dlsym.
#pragma once
#include <nccl.h>

#include <string>

namespace zob::cuda {

struct NcclApi {
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  decltype(&ncclGetLastError) get_last_error = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRankConfig) comm_init_rank_config = nullptr;
  decltype(&ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&ncclCommFinalize) comm_finalize = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;

  std::string library;  // the file that was loaded
  int version = 0;      // e.g. 22803 for 2.28.3

  // The process-wide instance: dlopen of $ZOB_NCCL_LIBRARY, else "libnccl.so.2" (the loader's
  // search path). Throws DeviceError(unavailable) naming what is missing and the fix. Never
  // unloaded: NCCL keeps threads of its own.
  static const NcclApi& get();
};

// "2.28.3"
std::string nccl_version_text(int version);

}  // namespace zob::cuda
