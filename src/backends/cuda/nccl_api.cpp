#include "backends/cuda/nccl_api.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <stdexcept>

#include "zob/errors.hpp"

namespace zob::cuda {
namespace {

// NCCL 2.18 has everything used here (nonblocking communicators, ncclCommFinalize, send/recv).
constexpr int kOldestVersion = 21800;

template <typename Fn>
void resolve(void* lib, const char* name, Fn& fn, const std::string& path) {
  fn = reinterpret_cast<Fn>(::dlsym(lib, name));
  if (fn == nullptr) {
    throw DeviceError(DeviceErrorKind::unavailable, "NCCL: " + path + " has no " + name +
                                                        "; install NCCL >= 2.18 or point "
                                                        "ZOB_NCCL_LIBRARY at one");
  }
}

NcclApi load() {
  NcclApi api;
  const char* env = std::getenv("ZOB_NCCL_LIBRARY");
  api.library = (env != nullptr && *env != '\0') ? env : "libnccl.so.2";
  void* lib = ::dlopen(api.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    throw DeviceError(DeviceErrorKind::unavailable,
                      "NCCL: cannot load " + api.library + " (" + (why ? why : "?") +
                          "); --gpus > 1 on CUDA needs NCCL: install libnccl2, or set "
                          "ZOB_NCCL_LIBRARY to its libnccl.so.2");
  }
  resolve(lib, "ncclGetVersion", api.get_version, api.library);
  resolve(lib, "ncclGetErrorString", api.get_error_string, api.library);
  resolve(lib, "ncclGetLastError", api.get_last_error, api.library);
  resolve(lib, "ncclGetUniqueId", api.get_unique_id, api.library);
  resolve(lib, "ncclCommInitRankConfig", api.comm_init_rank_config, api.library);
  resolve(lib, "ncclCommGetAsyncError", api.comm_get_async_error, api.library);
  resolve(lib, "ncclCommFinalize", api.comm_finalize, api.library);
  resolve(lib, "ncclCommDestroy", api.comm_destroy, api.library);
  resolve(lib, "ncclCommAbort", api.comm_abort, api.library);
  resolve(lib, "ncclAllGather", api.all_gather, api.library);
  resolve(lib, "ncclBroadcast", api.broadcast, api.library);
  resolve(lib, "ncclSend", api.send, api.library);
  resolve(lib, "ncclRecv", api.recv, api.library);
  resolve(lib, "ncclGroupStart", api.group_start, api.library);
  resolve(lib, "ncclGroupEnd", api.group_end, api.library);
  if (api.get_version(&api.version) != ncclSuccess || api.version < kOldestVersion) {
    throw DeviceError(DeviceErrorKind::unavailable,
                      "NCCL: " + api.library + " is version " + nccl_version_text(api.version) +
                          "; this tool needs >= " + nccl_version_text(kOldestVersion));
  }
  return api;
}

}  // namespace

std::string nccl_version_text(int v) {
  // Since 2.9 the code is major*10000 + minor*100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." +
         std::to_string(v % 100);
}

const NcclApi& NcclApi::get() {
  // A failed load is remembered and rethrown as the same one line on every call.
  static std::once_flag once;
  static NcclApi api;
  static std::string failure;
  std::call_once(once, [] {
    try {
      api = load();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) throw DeviceError(DeviceErrorKind::unavailable, failure);
  return api;
}

}  // namespace zob::cuda
