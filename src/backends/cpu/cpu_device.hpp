// The CPU device: zob::Device on host memory, the kernels of cpu_kernels.hpp. Every operation
// runs synchronously at enqueue time (a valid schedule: each queue is trivially ordered), so
// events are host timestamps and queue_wait has nothing to wait for.
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "zob/device.hpp"
#include "zob/thread_pool.hpp"

namespace zob {

class CpuDevice : public Device {
 public:
  // `threads` runs the kernels (and large copies); OpenBLAS keeps its own threads for sgemm.
  explicit CpuDevice(int threads = available_cpus());
  ~CpuDevice() override;

  const DeviceInfo& info() const override { return info_; }

  void* allocate(std::size_t bytes) override;
  void deallocate(void* device) noexcept override;
  std::size_t memory_in_use() const override;
  std::size_t memory_peak() const override;

  bool registration_applicable() const override { return false; }
  Registration register_host(void* host, std::size_t bytes) override;
  void unregister_host(void*) noexcept override {}
  bool is_registered(const void*) const override { return false; }
  void* allocate_host(std::size_t bytes) override;
  void deallocate_host(void* host) noexcept override;

  void copy_to_device(Queue q, void* device, const void* host, std::size_t bytes) override;
  void copy_to_host(Queue q, void* host, const void* device, std::size_t bytes) override;
  void fill_zero(Queue q, void* device, std::size_t bytes) override;
  void copy_on_device(Queue q, void* dst, const void* src, std::size_t bytes) override;

  std::unique_ptr<DeviceEvent> create_event() override;
  void record(DeviceEvent& event, Queue q) override;
  void queue_wait(Queue, DeviceEvent&) override {}
  void event_synchronize(DeviceEvent& event) override;
  bool event_done(DeviceEvent& event) override;  // the CPU's queues run in order, at once
  double elapsed_seconds(DeviceEvent& start, DeviceEvent& end) override;
  void synchronize() override {}

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

  // Its memory is host memory: the ranks' host collectives (shared memory) serve it directly.
  void check_rank_collectives() const override {}
  std::unique_ptr<Collectives> make_rank_collectives(Collectives&,
                                                     const RankCollectivesOptions&) override {
    return nullptr;
  }

 private:
  void copy(void* dst, const void* src, std::size_t bytes);

  DeviceInfo info_;
  std::unique_ptr<ThreadPool> pool_;
  mutable std::mutex memory_mutex_;
  std::unordered_map<void*, std::size_t> allocations_;  // pointer -> bytes, for deallocate
  std::size_t in_use_ = 0;
  std::size_t peak_ = 0;
};

}  // namespace zob
