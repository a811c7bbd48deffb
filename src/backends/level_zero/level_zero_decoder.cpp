// LevelZeroDevice: the decoder-transformer operations (--model), on kernels/decoder.cl and
// gemm.cl's gemm_batched. Launch geometry is what each kernel's comment says; the fake driver
// (tests/fake_level_zero/fake_decoder_kernels.cpp) checks it launch by launch.
#include <cmath>
#include <string>

#include "level_zero_device.hpp"
#include "shared.hpp"
#include "ze_support.hpp"

namespace zob {
namespace {

using l0::KernelId;

[[noreturn]] void bad_shape(const char* op, const std::string& why) {
  throw DeviceError(DeviceErrorKind::runtime, std::string("xpu: ") + op + ": " + why);
}

void check_rotary(const char* op, std::int64_t head_dim, double theta) {
  if (theta > 0 && head_dim % 2 != 0)
    bad_shape(op, "rotary embedding needs an even head_dim, got " + std::to_string(head_dim));
}

bool any_empty(std::int64_t batch, std::int64_t seq, std::int64_t heads, std::int64_t head_dim,
               std::int64_t repeat) {
  return batch <= 0 || seq <= 0 || heads <= 0 || head_dim <= 0 || repeat <= 0;
}

}  // namespace

#define ZOB_ARG(x) \
  std::pair<std::size_t, const void*> { sizeof(x), &(x) }

// cos at [s * half + d], sin at [(seq + s) * half + d]: exactly the CPU reference's values
// (inv_freq = theta^(-2d / head_dim), angle, cos and sin in double, then cast to float), which
// the kernels cannot compute themselves without fp64 (an extension IGC lacks on some GPUs).
const float* LevelZeroDevice::rope_table(std::int64_t seq, std::int64_t head_dim, double theta) {
  std::lock_guard lock(mutex_);
  const auto key = std::make_tuple(seq, head_dim, theta);
  if (auto it = rope_tables_.find(key); it != rope_tables_.end())
    return static_cast<const float*>(it->second.device);
  const std::int64_t half = head_dim / 2;
  RopeTable table;
  table.host.resize(static_cast<std::size_t>(2 * seq * half));
  for (std::int64_t d = 0; d < half; ++d) {
    const double inv_freq =
        std::pow(theta, -2.0 * static_cast<double>(d) / static_cast<double>(head_dim));
    for (std::int64_t s = 0; s < seq; ++s) {
      const double angle = static_cast<double>(s) * inv_freq;
      table.host[static_cast<std::size_t>(s * half + d)] = static_cast<float>(std::cos(angle));
      table.host[static_cast<std::size_t>((seq + s) * half + d)] =
          static_cast<float>(std::sin(angle));
    }
  }
  const std::size_t bytes = table.host.size() * sizeof(float);
  ze_device_mem_alloc_desc_t desc{ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC, nullptr, 0, 0};
  ZE_CHECK_D(zeMemAllocDevice(shared_->context, &desc, bytes, 256, device_, &table.device),
             "rotary table, " + std::to_string(bytes) + " bytes");
  // On the compute queue: the kernel reading it comes after a barrier (enter()).
  const ze_result_t r = zeCommandListAppendMemoryCopy(
      enter(Queue::compute, false), table.device, table.host.data(), bytes, nullptr, 0, nullptr);
  if (r != ZE_RESULT_SUCCESS) {
    zeMemFree(shared_->context, table.device);
    l0::fail("zeCommandListAppendMemoryCopy", r, "rotary table upload", l0::kind_of(r));
  }
  return static_cast<const float*>(
      rope_tables_.emplace(key, std::move(table)).first->second.device);
}

void LevelZeroDevice::gemm_strided_batched(const GemmArgs& a, std::int64_t count,
                                           std::int64_t stride_a, std::int64_t stride_b,
                                           std::int64_t stride_c) {
  if (a.m <= 0 || a.n <= 0 || count <= 0) return;
  if (count > 1 && stride_c <= 0)
    bad_shape("gemm_strided_batched", "stride_c must be > 0 (the outputs would overlap)");
  if (count > l0::kMaxBatch)
    bad_shape("gemm_strided_batched", std::to_string(count) + " entries exceed one launch's " +
                                          std::to_string(l0::kMaxBatch) + ": use a smaller batch");
  const std::int32_t ta = a.trans_a ? 1 : 0, tb = a.trans_b ? 1 : 0;
  launch(Queue::compute, KernelId::gemm_batched,
         {l0::groups_for(a.n, l0::kGemmBlock, "gemm_batched"),
          l0::groups_for(a.m, l0::kGemmBlock, "gemm_batched"), static_cast<std::uint32_t>(count)},
         {ZOB_ARG(ta), ZOB_ARG(tb), ZOB_ARG(a.m), ZOB_ARG(a.n), ZOB_ARG(a.k), ZOB_ARG(a.a),
          ZOB_ARG(a.lda), ZOB_ARG(a.b), ZOB_ARG(a.ldb), ZOB_ARG(a.c), ZOB_ARG(a.ldc),
          ZOB_ARG(stride_a), ZOB_ARG(stride_b), ZOB_ARG(stride_c)});
}

void LevelZeroDevice::rmsnorm_forward(const bf16* x, const bf16* weight, bf16* y, float* rstd,
                                      std::int64_t rows, std::int64_t cols, float eps) {
  if (rows <= 0 || cols <= 0) return;
  launch(Queue::compute, KernelId::rmsnorm_forward,
         {l0::groups_for(rows, 1, "rmsnorm_forward"), 1, 1},
         {ZOB_ARG(x), ZOB_ARG(weight), ZOB_ARG(y), ZOB_ARG(rstd), ZOB_ARG(rows), ZOB_ARG(cols),
          ZOB_ARG(eps)});
}

// One launch: a group per row of dx, then a group per ZOB_WG columns of dweight.
void LevelZeroDevice::rmsnorm_backward(const bf16* dy, const bf16* x, const bf16* weight,
                                       const float* rstd, bf16* dx, bf16* dweight,
                                       std::int64_t rows, std::int64_t cols) {
  if (cols <= 0) return;
  if (rows < 0) rows = 0;
  const std::int64_t groups = rows + (cols + l0::kWg - 1) / l0::kWg;
  launch(Queue::compute, KernelId::rmsnorm_backward,
         {l0::groups_for(groups, 1, "rmsnorm_backward"), 1, 1},
         {ZOB_ARG(dy), ZOB_ARG(x), ZOB_ARG(weight), ZOB_ARG(rstd), ZOB_ARG(dx), ZOB_ARG(dweight),
          ZOB_ARG(rows), ZOB_ARG(cols)});
}

void LevelZeroDevice::to_heads(const bf16* x, bf16* out, std::int64_t batch, std::int64_t seq,
                               std::int64_t heads, std::int64_t head_dim, std::int64_t repeat,
                               double theta) {
  check_rotary("to_heads", head_dim, theta);
  if (any_empty(batch, seq, heads, head_dim, repeat)) return;
  const std::int64_t elements = batch * seq * heads * head_dim;
  if (theta > 0) {
    const float* table = rope_table(seq, head_dim, theta);
    launch_1d(Queue::compute, KernelId::to_heads_rope, elements / 2, 1,
              {ZOB_ARG(x), ZOB_ARG(out), ZOB_ARG(table), ZOB_ARG(batch), ZOB_ARG(seq),
               ZOB_ARG(heads), ZOB_ARG(head_dim), ZOB_ARG(repeat)});
  } else {
    launch_1d(Queue::compute, KernelId::to_heads, elements, 1,
              {ZOB_ARG(x), ZOB_ARG(out), ZOB_ARG(batch), ZOB_ARG(seq), ZOB_ARG(heads),
               ZOB_ARG(head_dim), ZOB_ARG(repeat)});
  }
}

void LevelZeroDevice::from_heads(const bf16* g, bf16* out, std::int64_t batch, std::int64_t seq,
                                 std::int64_t heads, std::int64_t head_dim, std::int64_t repeat,
                                 double theta) {
  check_rotary("from_heads", head_dim, theta);
  if (any_empty(batch, seq, heads, head_dim, repeat)) return;
  const std::int64_t elements = batch * seq * heads * head_dim;
  if (theta > 0) {
    const float* table = rope_table(seq, head_dim, theta);
    launch_1d(Queue::compute, KernelId::from_heads_rope, elements / 2, 1,
              {ZOB_ARG(g), ZOB_ARG(out), ZOB_ARG(table), ZOB_ARG(batch), ZOB_ARG(seq),
               ZOB_ARG(heads), ZOB_ARG(head_dim), ZOB_ARG(repeat)});
  } else {
    launch_1d(Queue::compute, KernelId::from_heads, elements, 1,
              {ZOB_ARG(g), ZOB_ARG(out), ZOB_ARG(batch), ZOB_ARG(seq), ZOB_ARG(heads),
               ZOB_ARG(head_dim), ZOB_ARG(repeat)});
  }
}

void LevelZeroDevice::causal_softmax_forward(const bf16* scores, bf16* probs, std::int64_t n,
                                             std::int64_t seq, float scale) {
  if (n <= 0 || seq <= 0) return;
  launch(Queue::compute, KernelId::causal_softmax_forward,
         {l0::groups_for(n * seq, 1, "causal_softmax_forward"), 1, 1},
         {ZOB_ARG(scores), ZOB_ARG(probs), ZOB_ARG(n), ZOB_ARG(seq), ZOB_ARG(scale)});
}

void LevelZeroDevice::causal_softmax_backward(const bf16* probs, const bf16* dprobs, bf16* dscores,
                                              std::int64_t n, std::int64_t seq, float scale) {
  if (n <= 0 || seq <= 0) return;
  launch(Queue::compute, KernelId::causal_softmax_backward,
         {l0::groups_for(n * seq, 1, "causal_softmax_backward"), 1, 1},
         {ZOB_ARG(probs), ZOB_ARG(dprobs), ZOB_ARG(dscores), ZOB_ARG(n), ZOB_ARG(seq),
          ZOB_ARG(scale)});
}

void LevelZeroDevice::silu_mul_forward(const bf16* gate, const bf16* up, bf16* out,
                                       std::int64_t n) {
  launch_1d(Queue::compute, KernelId::silu_mul_forward, n, l0::kVec,
            {ZOB_ARG(gate), ZOB_ARG(up), ZOB_ARG(out), ZOB_ARG(n)});
}

void LevelZeroDevice::silu_mul_backward(const bf16* dout, const bf16* gate, const bf16* up,
                                        bf16* dgate, bf16* dup, std::int64_t n) {
  launch_1d(Queue::compute, KernelId::silu_mul_backward, n, l0::kVec,
            {ZOB_ARG(dout), ZOB_ARG(gate), ZOB_ARG(up), ZOB_ARG(dgate), ZOB_ARG(dup), ZOB_ARG(n)});
}

namespace {

// A view's sizes or strides as the kernels' long8 (the last two lanes unused).
struct Long8 {
  std::int64_t v[8];
};
Long8 long8(const std::int64_t (&x)[kViewDims]) {
  Long8 r{};
  for (int d = 0; d < kViewDims; ++d) r.v[d] = x[d];
  return r;
}

void check_view(const char* call, const std::string& why) {
  if (!why.empty()) bad_shape(call, why);
}

}  // namespace

void LevelZeroDevice::elementwise(ElementwiseOp op, const TensorView& out, const TensorView& a,
                                  const TensorView& b, float scalar) {
  check_view("elementwise", elementwise_problem(op, out, a, b));
  const std::int64_t n = out.elements();
  const TensorView& second = is_binary(op) ? b : a;  // a unary op's b: any valid pointer
  const std::int32_t code = static_cast<std::int32_t>(op), out_f32 = out.dtype == DType::f32,
                     a_f32 = a.dtype == DType::f32, b_f32 = second.dtype == DType::f32;
  const Long8 size = long8(out.size), out_stride = long8(out.stride),
              b_stride = long8(second.stride);
  Long8 a_stride = long8(a.stride);
  a_stride.v[kViewDims] = a.size[kViewDims - 1];  // cat_last's split (tensor.cl)
  launch_1d(Queue::compute, KernelId::tensor_elementwise, n, 1,
            {ZOB_ARG(code), ZOB_ARG(scalar), ZOB_ARG(n), ZOB_ARG(size), ZOB_ARG(out.data),
             ZOB_ARG(out_f32), ZOB_ARG(out_stride), ZOB_ARG(a.data), ZOB_ARG(a_f32),
             ZOB_ARG(a_stride), ZOB_ARG(second.data), ZOB_ARG(b_f32), ZOB_ARG(b_stride)});
}

void LevelZeroDevice::reduce_last(const TensorView& out, const TensorView& in, float scale) {
  check_view("reduce_last", reduce_last_problem(out, in));
  const std::int64_t outputs = out.elements();
  const std::int32_t out_f32 = out.dtype == DType::f32, in_f32 = in.dtype == DType::f32;
  const Long8 size = long8(in.size), out_stride = long8(out.stride), in_stride = long8(in.stride);
  launch_1d(Queue::compute, KernelId::tensor_reduce_last, outputs, 1,
            {ZOB_ARG(scale), ZOB_ARG(outputs), ZOB_ARG(size), ZOB_ARG(out.data), ZOB_ARG(out_f32),
             ZOB_ARG(out_stride), ZOB_ARG(in.data), ZOB_ARG(in_f32), ZOB_ARG(in_stride)});
}

#undef ZOB_ARG

}  // namespace zob
