// A Device that forwards every call to another and first names the member being called to
// before(): the one list of the Device members for wrappers that watch the calls (the deepspeed
// schedule's per-module counts, step/deepspeed/counting_device.hpp; the test-only faults,
// driver/fault_device.hpp). A member added to Device is added here once, and every wrapper
// forwards it. before() is called for every member that issues, orders or waits for work, or
// allocates device memory; not for queries (info, memory_in_use, elapsed_seconds, ...), events'
// creation, registration or host allocation.
#pragma once
#include <memory>

#include "zob/device.hpp"

namespace zob {

class ForwardingDevice : public Device {
 public:
  explicit ForwardingDevice(Device& inner) : inner_(&inner) {}

  const DeviceInfo& info() const override { return inner_->info(); }
  void* allocate(std::size_t bytes) override {
    before("allocate");
    return inner_->allocate(bytes);
  }
  void deallocate(void* device) noexcept override { inner_->deallocate(device); }
  std::size_t memory_in_use() const override { return inner_->memory_in_use(); }
  std::size_t memory_peak() const override { return inner_->memory_peak(); }
  bool registration_applicable() const override { return inner_->registration_applicable(); }
  Registration register_host(void* host, std::size_t bytes) override {
    return inner_->register_host(host, bytes);
  }
  void unregister_host(void* host) noexcept override { inner_->unregister_host(host); }
  bool is_registered(const void* host) const override { return inner_->is_registered(host); }
  void* allocate_host(std::size_t bytes) override { return inner_->allocate_host(bytes); }
  void deallocate_host(void* host) noexcept override { inner_->deallocate_host(host); }
  void copy_to_device(Queue q, void* device, const void* host, std::size_t bytes) override {
    before("copy_to_device");
    inner_->copy_to_device(q, device, host, bytes);
  }
  void copy_to_host(Queue q, void* host, const void* device, std::size_t bytes) override {
    before("copy_to_host");
    inner_->copy_to_host(q, host, device, bytes);
  }
  void fill_zero(Queue q, void* device, std::size_t bytes) override {
    before("fill_zero");
    inner_->fill_zero(q, device, bytes);
  }
  void copy_on_device(Queue q, void* dst, const void* src, std::size_t bytes) override {
    before("copy_on_device");
    inner_->copy_on_device(q, dst, src, bytes);
  }
  std::unique_ptr<DeviceEvent> create_event() override { return inner_->create_event(); }
  void record(DeviceEvent& event, Queue q) override {
    before("record");
    inner_->record(event, q);
  }
  void queue_wait(Queue q, DeviceEvent& event) override {
    before("queue_wait");
    inner_->queue_wait(q, event);
  }
  void event_synchronize(DeviceEvent& event) override {
    before("event_synchronize");
    inner_->event_synchronize(event);
  }
  bool event_done(DeviceEvent& event) override { return inner_->event_done(event); }
  double elapsed_seconds(DeviceEvent& start, DeviceEvent& end) override {
    return inner_->elapsed_seconds(start, end);
  }
  void synchronize() override {
    before("synchronize");
    inner_->synchronize();
  }
  void gemm(const GemmArgs& args) override {
    before("gemm");
    inner_->gemm(args);
  }
  void embedding_forward(const std::int32_t* ids, const bf16* table, bf16* out, std::int64_t tokens,
                         std::int64_t hidden) override {
    before("embedding_forward");
    inner_->embedding_forward(ids, table, out, tokens, hidden);
  }
  void embedding_backward(const EmbeddingGradIndex& index, const bf16* dout, bf16* dtable,
                          std::int64_t hidden) override {
    before("embedding_backward");
    inner_->embedding_backward(index, dout, dtable, hidden);
  }
  void bias_add(bf16* y, const bf16* bias, std::int64_t rows, std::int64_t cols) override {
    before("bias_add");
    inner_->bias_add(y, bias, rows, cols);
  }
  void bias_gelu_forward(bf16* pre, const bf16* bias, bf16* act, std::int64_t rows,
                         std::int64_t cols) override {
    before("bias_gelu_forward");
    inner_->bias_gelu_forward(pre, bias, act, rows, cols);
  }
  void gelu_backward(const bf16* dact, const bf16* pre, bf16* dpre, std::int64_t n) override {
    before("gelu_backward");
    inner_->gelu_backward(dact, pre, dpre, n);
  }
  void column_sum(const bf16* x, bf16* out, std::int64_t rows, std::int64_t cols) override {
    before("column_sum");
    inner_->column_sum(x, out, rows, cols);
  }
  void residual_add(bf16* x, const bf16* y, std::int64_t n) override {
    before("residual_add");
    inner_->residual_add(x, y, n);
  }
  void fill(bf16* x, float value, std::int64_t n) override {
    before("fill");
    inner_->fill(x, value, n);
  }
  void sum(const bf16* x, std::int64_t n, float* result) override {
    before("sum");
    inner_->sum(x, n, result);
  }
  void cast_f32_to_bf16(const float* src, bf16* dst, std::int64_t n, Queue q) override {
    before("cast_f32_to_bf16");
    inner_->cast_f32_to_bf16(src, dst, n, q);
  }
  void cast_bf16_to_f32(const bf16* src, float* dst, std::int64_t n, Queue q) override {
    before("cast_bf16_to_f32");
    inner_->cast_bf16_to_f32(src, dst, n, q);
  }
  void gemm_strided_batched(const GemmArgs& args, std::int64_t count, std::int64_t stride_a,
                            std::int64_t stride_b, std::int64_t stride_c) override {
    before("gemm_strided_batched");
    inner_->gemm_strided_batched(args, count, stride_a, stride_b, stride_c);
  }
  void rmsnorm_forward(const bf16* x, const bf16* weight, bf16* y, float* rstd, std::int64_t rows,
                       std::int64_t cols, float eps) override {
    before("rmsnorm_forward");
    inner_->rmsnorm_forward(x, weight, y, rstd, rows, cols, eps);
  }
  void rmsnorm_backward(const bf16* dy, const bf16* x, const bf16* weight, const float* rstd,
                        bf16* dx, bf16* dweight, std::int64_t rows, std::int64_t cols) override {
    before("rmsnorm_backward");
    inner_->rmsnorm_backward(dy, x, weight, rstd, dx, dweight, rows, cols);
  }
  void to_heads(const bf16* x, bf16* out, std::int64_t batch, std::int64_t seq, std::int64_t heads,
                std::int64_t head_dim, std::int64_t repeat, double theta) override {
    before("to_heads");
    inner_->to_heads(x, out, batch, seq, heads, head_dim, repeat, theta);
  }
  void from_heads(const bf16* g, bf16* out, std::int64_t batch, std::int64_t seq,
                  std::int64_t heads, std::int64_t head_dim, std::int64_t repeat,
                  double theta) override {
    before("from_heads");
    inner_->from_heads(g, out, batch, seq, heads, head_dim, repeat, theta);
  }
  void causal_softmax_forward(const bf16* scores, bf16* probs, std::int64_t n, std::int64_t seq,
                              float scale) override {
    before("causal_softmax_forward");
    inner_->causal_softmax_forward(scores, probs, n, seq, scale);
  }
  void causal_softmax_backward(const bf16* probs, const bf16* dprobs, bf16* dscores, std::int64_t n,
                               std::int64_t seq, float scale) override {
    before("causal_softmax_backward");
    inner_->causal_softmax_backward(probs, dprobs, dscores, n, seq, scale);
  }
  void silu_mul_forward(const bf16* gate, const bf16* up, bf16* out, std::int64_t n) override {
    before("silu_mul_forward");
    inner_->silu_mul_forward(gate, up, out, n);
  }
  void silu_mul_backward(const bf16* dout, const bf16* gate, const bf16* up, bf16* dgate, bf16* dup,
                         std::int64_t n) override {
    before("silu_mul_backward");
    inner_->silu_mul_backward(dout, gate, up, dgate, dup, n);
  }
  void elementwise(ElementwiseOp op, const TensorView& out, const TensorView& a,
                   const TensorView& b, float scalar) override {
    before("elementwise");
    inner_->elementwise(op, out, a, b, scalar);
  }
  void reduce_last(const TensorView& out, const TensorView& in, float scale) override {
    before("reduce_last");
    inner_->reduce_last(out, in, scale);
  }
  Occupancy occupancy() const override { return inner_->occupancy(); }
  void check_rank_collectives() const override { inner_->check_rank_collectives(); }
  std::unique_ptr<Collectives> make_rank_collectives(
      Collectives& host, const RankCollectivesOptions& options) override {
    return inner_->make_rank_collectives(host, options);
  }

 protected:
  // The Device member about to be called, by its name ("gemm", "copy_to_host", ...).
  virtual void before(const char* op) = 0;
  Device& inner() const { return *inner_; }

 private:
  Device* inner_;
};

}  // namespace zob
