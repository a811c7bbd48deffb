// State the device shares with its events: the context and the event pools. Events may be
// destroyed after the device (std::unique_ptr order in callers), so both hold it.
#pragma once
#include <level_zero/ze_api.h>

#include <mutex>
#include <vector>

#include "zob/device.hpp"

namespace zob::l0 {

struct Shared {
  ze_context_handle_t context = nullptr;
  ze_device_handle_t device = nullptr;

  Shared() = default;
  Shared(const Shared&) = delete;
  Shared& operator=(const Shared&) = delete;
  ~Shared();  // destroys the events, the pools, then the context

  // A reset, host-visible kernel-timestamp event (pools grow by kPoolSize).
  ze_event_handle_t acquire_event();
  void release_event(ze_event_handle_t e) noexcept;  // resets it first
  // An event that queued commands may still signal or wait for: kept out of the pool until
  // the device has synchronized (reclaim_retired), since a reset now would race with them.
  void retire_event(ze_event_handle_t e) noexcept;
  void reclaim_retired() noexcept;  // after a full synchronize

 private:
  static constexpr std::uint32_t kPoolSize = 64;
  std::mutex mutex_;
  std::vector<ze_event_pool_handle_t> pools_;
  std::vector<ze_event_handle_t> all_;
  std::vector<ze_event_handle_t> free_;
  std::vector<ze_event_handle_t> retired_;
};

class LevelZeroEvent final : public DeviceEvent {
 public:
  explicit LevelZeroEvent(std::shared_ptr<Shared> shared)
      : shared_(std::move(shared)), handle_(shared_->acquire_event()) {}
  // A recorded event may still be signaled (or waited for) by queued commands.
  ~LevelZeroEvent() override {
    if (recorded) shared_->retire_event(handle_);
    else shared_->release_event(handle_);
  }
  ze_event_handle_t handle() const { return handle_; }
  // Each record signals a fresh, reset event: the previous one is retired, not reset, so
  // its queued waiters are still served and a host wait after the new record cannot return
  // on the old signal (an in-queue reset would leave that window open).
  void renew() {
    shared_->retire_event(handle_);
    handle_ = shared_->acquire_event();
  }
  bool recorded = false;  // never recorded: waits are no-ops, as for a fresh CUDA event

 private:
  std::shared_ptr<Shared> shared_;
  ze_event_handle_t handle_;
};

// Kernels of kernels/*.cl, in the order of the table in lanes.cpp.
enum class KernelId : int {
  gemm,
  embedding_forward,
  embedding_backward,
  bias_add,
  bias_gelu_forward,
  gelu_backward,
  residual_add,
  fill_bf16,
  cast_f32_to_bf16,
  cast_bf16_to_f32,
  column_sum,
  sum_bf16_partial,
  sum_partials,
  // decoder.cl and gemm.cl's gemm_batched: the decoder-transformer kernels (--model)
  gemm_batched,
  rmsnorm_forward,
  rmsnorm_backward,
  to_heads,
  to_heads_rope,
  from_heads,
  from_heads_rope,
  causal_softmax_forward,
  causal_softmax_backward,
  silu_mul_forward,
  silu_mul_backward,
  // tensor.cl: the generic strided kernels (the deepspeed schedule's eager decomposition)
  tensor_elementwise,
  tensor_reduce_last,
  count
};
inline constexpr std::uint32_t kWg = 256;           // ZOB_WG in kernels/bf16.h
inline constexpr std::uint32_t kVec = 4;            // ZOB_VEC: elements per element-wise item
inline constexpr std::uint32_t kSumGroups = 512;    // ZOB_SUM_GROUPS: most partial sums
inline constexpr std::int64_t kSumMinChunk = 4096;  // elements per partial-sum group, at least
inline constexpr std::uint32_t kGemmWg = 16;        // GEMM_WG in kernels/gemm.cl
inline constexpr std::uint32_t kGemmBlock = 64;     // GEMM_BT: C block per work-group
// gemm_batched's entries are group z: the least maxGroupCountZ Level Zero devices report.
inline constexpr std::int64_t kMaxBatch = 65535;
struct KernelInfo {
  const char* name;    // the OpenCL kernel's name
  const char* module;  // the .cl file it is in
  std::uint32_t group[2];
};
const KernelInfo& kernel_info(KernelId id);
// Work-groups of per_group items covering `items`; throws DeviceError naming `what` when the
// count exceeds one launch's (uint32).
std::uint32_t groups_for(std::int64_t items, std::uint32_t per_group, const char* what);

}  // namespace zob::l0
