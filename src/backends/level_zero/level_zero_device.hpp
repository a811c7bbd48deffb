// zob::LevelZeroDevice: zob::Device on a Level Zero GPU (the "xpu" backend).
//
// Engines: one immediate command list per zob::Queue. compute runs on the compute group;
// h2d and d2h copy on the copy-only group (one list shared when that group has a single
// queue, as the main copy engine does) and run their kernels (the step's casts) on extra
// compute lists; a queue that moves between its copy and kernel lists is kept in order by an
// internal event. A list completes its commands in any order unless a barrier orders them
// (the specification promises only that they start in order), so a queue's command on a list
// that already holds one of the queue's commands since the list's last barrier is appended
// after a barrier: each queue runs in order, as zob::Device requires. Timing: kernel-timestamp
// events, ticks masked to kernelTimestampValidBits and scaled by timerResolution in Hz
// (ZE_STRUCTURE_TYPE_DEVICE_PROPERTIES_1_2). Registration: ZE_extension_external_memmap_sysmem when
// the driver reports it, else ZEX_driver_import_host_pointer (verified with
// zexDriverGetHostPointerBaseAddress), else DeviceError(registration_refused). Registered memory is
// only ever copied, never given to a kernel (imported memory is copy-only).
#pragma once
#include <level_zero/ze_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "zob/device.hpp"
#include "zob/errors.hpp"

namespace zob {

namespace l0 {
struct Shared;  // context and event pools, kept alive by the device and its events
enum class KernelId : int;
}  // namespace l0

class LevelZeroDevice final : public Device {
 public:
  // Throws DeviceError(unavailable) when zeInit fails, or there is no driver / GPU / index.
  explicit LevelZeroDevice(int index);
  ~LevelZeroDevice() override;
  LevelZeroDevice(const LevelZeroDevice&) = delete;
  LevelZeroDevice& operator=(const LevelZeroDevice&) = delete;

  const DeviceInfo& info() const override { return info_; }

  void* allocate(std::size_t bytes) override;
  void deallocate(void* device) noexcept override;
  std::size_t memory_in_use() const override;
  std::size_t memory_peak() const override;

  bool registration_applicable() const override { return true; }
  Registration register_host(void* host, std::size_t bytes) override;
  void unregister_host(void* host) noexcept override;
  bool is_registered(const void* host) const override;
  void* allocate_host(std::size_t bytes) override;
  void deallocate_host(void* host) noexcept override;

  void copy_to_device(Queue q, void* device, const void* host, std::size_t bytes) override;
  void copy_to_host(Queue q, void* host, const void* device, std::size_t bytes) override;
  void fill_zero(Queue q, void* device, std::size_t bytes) override;
  void copy_on_device(Queue q, void* dst, const void* src, std::size_t bytes) override;

  std::unique_ptr<DeviceEvent> create_event() override;
  void record(DeviceEvent& event, Queue q) override;
  void queue_wait(Queue q, DeviceEvent& event) override;
  void event_synchronize(DeviceEvent& event) override;
  double elapsed_seconds(DeviceEvent& start, DeviceEvent& end) override;
  void synchronize() override;

  void gemm(const GemmArgs& args) override;
  void embedding_forward(const std::int32_t* ids, const bf16* table, bf16* out, std::int64_t tokens,
                         std::int64_t hidden) override;
  void embedding_backward(const EmbeddingGradIndex& index, const bf16* dout, bf16* dtable,
                          std::int64_t hidden) override;
  void bias_add(bf16* y, const bf16* bias, std::int64_t rows, std::int64_t cols) override;
  void bias_gelu_forward(bf16* pre, const bf16* bias, bf16* act, std::int64_t rows,
                         std::int64_t cols) override;
  void gelu_backward(const bf16* dact, const bf16* pre, bf16* dpre, std::int64_t n) override;
  void column_sum(const bf16* x, bf16* out, std::int64_t rows, std::int64_t cols) override;
  void residual_add(bf16* x, const bf16* y, std::int64_t n) override;
  void fill(bf16* x, float value, std::int64_t n) override;
  void sum(const bf16* x, std::int64_t n, float* result) override;
  void cast_f32_to_bf16(const float* src, bf16* dst, std::int64_t n, Queue q) override;
  void cast_bf16_to_f32(const bf16* src, float* dst, std::int64_t n, Queue q) override;

  // ---- decoder-transformer kernels (--model) ----
  void gemm_strided_batched(const GemmArgs& args, std::int64_t count, std::int64_t stride_a,
                            std::int64_t stride_b, std::int64_t stride_c) override;
  void rmsnorm_forward(const bf16* x, const bf16* weight, bf16* y, float* rstd, std::int64_t rows,
                       std::int64_t cols, float eps) override;
  void rmsnorm_backward(const bf16* dy, const bf16* x, const bf16* weight, const float* rstd,
                        bf16* dx, bf16* dweight, std::int64_t rows, std::int64_t cols) override;
  void to_heads(const bf16* x, bf16* out, std::int64_t batch, std::int64_t seq, std::int64_t heads,
                std::int64_t head_dim, std::int64_t repeat, double theta) override;
  void from_heads(const bf16* g, bf16* out, std::int64_t batch, std::int64_t seq,
                  std::int64_t heads, std::int64_t head_dim, std::int64_t repeat,
                  double theta) override;
  void causal_softmax_forward(const bf16* scores, bf16* probs, std::int64_t n, std::int64_t seq,
                              float scale) override;
  void causal_softmax_backward(const bf16* probs, const bf16* dprobs, bf16* dscores, std::int64_t n,
                               std::int64_t seq, float scale) override;
  void silu_mul_forward(const bf16* gate, const bf16* up, bf16* out, std::int64_t n) override;
  void silu_mul_backward(const bf16* dout, const bf16* gate, const bf16* up, bf16* dgate, bf16* dup,
                         std::int64_t n) override;
  void elementwise(ElementwiseOp op, const TensorView& out, const TensorView& a,
                   const TensorView& b, float scalar) override;
  void reduce_last(const TensorView& out, const TensorView& in, float scale) override;

  // What register_host will use: "zeMemAllocHost(memmap-sysmem)",
  // "zexDriverImportExternalPointer" or "" (none: register_host throws).
  std::string registration_method() const;

 private:
  struct Lane {
    ze_command_list_handle_t copy_list = nullptr;    // copies and fills
    ze_command_list_handle_t kernel_list = nullptr;  // kernels (a compute list)
    ze_command_list_handle_t current = nullptr;      // where the queue's last op went
  };
  struct HostRange {
    std::size_t bytes;
    bool memmap;  // released with zeMemFree, else zexDriverReleaseImportedPointer
  };

  void open(int index);
  void create_lists();
  void create_kernels();
  void probe_registration();
  void release_all() noexcept;
  ze_command_list_handle_t enter(Queue q, bool kernel);  // caller holds mutex_
  // After a barrier on `list` (appended or found there): nothing before it can reorder with
  // what follows (caller holds mutex_).
  void barrier_appended(ze_command_list_handle_t list) { unordered_[list] = 0; }
  ze_event_handle_t internal_event();
  void launch(Queue q, l0::KernelId id, std::array<std::uint32_t, 3> groups,
              const std::vector<std::pair<std::size_t, const void*>>& args);
  void launch_1d(Queue q, l0::KernelId id, std::int64_t n, std::int64_t per_item,
                 const std::vector<std::pair<std::size_t, const void*>>& args);
  // The rotary cos / sin table of (seq, head_dim, theta) in device memory, made on first use
  // (level_zero_decoder.cpp).
  const float* rope_table(std::int64_t seq, std::int64_t head_dim, double theta);

  DeviceInfo info_;
  ze_driver_handle_t driver_ = nullptr;
  ze_driver_handle_t zex_driver_ = nullptr;  // driver_ through zelLoaderTranslateHandle
  ze_device_handle_t device_ = nullptr;
  std::shared_ptr<l0::Shared> shared_;
  std::uint64_t timer_hz_ = 0;
  std::uint64_t timestamp_mask_ = 0;

  std::vector<ze_command_list_handle_t> lists_;  // owned, each once
  std::array<Lane, kQueueCount> lanes_{};
  std::vector<ze_module_handle_t> modules_;
  std::vector<ze_kernel_handle_t> kernels_;  // by KernelId
  std::vector<ze_event_handle_t> internal_in_flight_;
  // Per list, the queues (bit 1 << Queue) that appended a command since its last barrier.
  std::map<ze_command_list_handle_t, unsigned> unordered_;
  float* sum_partials_ = nullptr;  // sum()'s scratch: kSumGroups floats of device memory

  bool has_memmap_ = false;
  void* zex_import_ = nullptr;
  void* zex_release_ = nullptr;
  void* zex_base_ = nullptr;

  mutable std::mutex mutex_;  // guards everything below and every append
  std::map<std::uintptr_t, std::size_t> device_allocs_;
  std::size_t in_use_ = 0;
  std::size_t peak_ = 0;
  std::map<std::uintptr_t, HostRange> registered_;
  std::map<std::uintptr_t, std::size_t> host_allocs_;
  // Rotary tables by (seq, head_dim, theta): the host copy stays alive for the asynchronous
  // upload; the device copy is backend scratch like sum_partials_ (not in memory_in_use).
  struct RopeTable {
    std::vector<float> host;
    void* device = nullptr;
  };
  std::map<std::tuple<std::int64_t, std::int64_t, double>, RopeTable> rope_tables_;
};

}  // namespace zob
