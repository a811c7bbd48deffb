// zob::CudaDevice: the Device interface (zob/device.hpp) on the CUDA runtime and cuBLAS.
// Three non-blocking streams stand for the three queues, so copies overlap compute and none of
// them synchronises with the legacy default stream.
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "zob/device.hpp"

namespace zob {

class CudaDevice final : public Device {
 public:
  // Throws DeviceError(unavailable) when there is no usable driver or device `index`.
  explicit CudaDevice(int index);
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

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
  bool event_done(DeviceEvent& event) override;
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
  void cast_f32_to_bf16(const float* src, bf16* dst, std::int64_t n,
                        Queue q = Queue::compute) override;
  void cast_bf16_to_f32(const bf16* src, float* dst, std::int64_t n,
                        Queue q = Queue::compute) override;

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

  // Other users of the GPU: NVML's process list (dlopen'ed) and cudaMemGetInfo's free memory.
  Occupancy occupancy() const override;

  // --gpus N: NCCL (loaded at run time; nccl_collectives.hpp). Without NCCL headers at build
  // time both throw DeviceError(unavailable) saying so.
  void check_rank_collectives() const override;
  std::unique_ptr<Collectives> make_rank_collectives(
      Collectives& host, const RankCollectivesOptions& options) override;

  cudaStream_t stream(Queue q) const { return streams_[static_cast<int>(q)]; }
  int index() const { return index_; }

 private:
  // The runtime's current device is per host thread; every entry point binds ours first so the
  // step may call from any thread.
  void bind() const;
  void release_resources() noexcept;

  int index_;
  DeviceInfo info_;
  cudaStream_t streams_[kQueueCount] = {};
  cublasHandle_t blas_ = nullptr;
  // Internal scratch, not counted in memory_in_use(): like torch.cuda.max_memory_allocated,
  // the peak reports what the step asked for.
  void* blas_workspace_ = nullptr;
  float* sum_partials_ = nullptr;

  mutable std::mutex mutex_;  // guards the allocation table
  std::unordered_map<void*, std::size_t> allocations_;
  std::size_t in_use_ = 0;
  std::size_t peak_ = 0;
};

}  // namespace zob
