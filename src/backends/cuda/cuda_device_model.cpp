// CudaDevice: the decoder-transformer operations (--model). The attention GEMMs are one
// cublasGemmStridedBatchedEx each; the rest are this backend's kernels (cuda_model_kernels.cu).
#include <limits>
#include <string>

#include "backends/cuda/cuda_device.hpp"
#include "backends/cuda/cuda_model_kernels.hpp"
#include "backends/cuda/cuda_tensor_ops.hpp"
#include "zob/errors.hpp"

namespace zob {
namespace {

constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();

std::string dims(std::initializer_list<std::int64_t> values) {
  std::string s;
  for (const std::int64_t v : values) {
    if (!s.empty()) s += 'x';
    s += std::to_string(v);
  }
  return s;
}

void check_launch(cudaError_t e, const char* kernel, const std::string& shape) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  throw DeviceError(DeviceErrorKind::runtime, std::string("cuda: kernel ") + kernel + "(" + shape +
                                                  ") failed: " + cudaGetErrorName(e) + ": " +
                                                  cudaGetErrorString(e));
}

[[noreturn]] void bad_shape(const char* op, const std::string& why) {
  throw DeviceError(DeviceErrorKind::runtime, std::string("cuda: ") + op + ": " + why);
}

// One block per row: the row count is the grid's x dimension.
void check_rows(const char* op, std::int64_t rows) {
  if (rows > kIntMax) {
    bad_shape(op, std::to_string(rows) + " rows exceed one launch's " + std::to_string(kIntMax) +
                      " blocks: use a smaller batch or sequence");
  }
}

void check_rotary(const char* op, std::int64_t head_dim, double theta) {
  if (theta > 0 && head_dim % 2 != 0) {
    bad_shape(op, "rotary embedding needs an even head_dim, got " + std::to_string(head_dim));
  }
}

}  // namespace

void CudaDevice::gemm_strided_batched(const GemmArgs& g, std::int64_t count, std::int64_t stride_a,
                                      std::int64_t stride_b, std::int64_t stride_c) {
  if (g.m <= 0 || g.n <= 0 || count <= 0) return;
  const std::string what = "m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) +
                           " k=" + std::to_string(g.k) + " count=" + std::to_string(count) +
                           (g.trans_a ? " trans_a" : "") + (g.trans_b ? " trans_b" : "");
  if (g.k < 0 || g.m > kIntMax || g.n > kIntMax || g.k > kIntMax || g.lda > kIntMax ||
      g.ldb > kIntMax || g.ldc > kIntMax || count > kIntMax) {
    bad_shape("gemm_strided_batched", what + " is outside cuBLAS's 32-bit dimensions");
  }
  if (count > 1 && stride_c <= 0) {
    bad_shape("gemm_strided_batched", what + ": stride_c must be > 0 (the outputs would overlap)");
  }
  bind();
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the operands swap, each
  // keeps its own transpose flag and stride (as in gemm, cuda_device.cpp).
  const float alpha = 1.0f;
  const float beta = 0.0f;
  const cublasStatus_t s = cublasGemmStridedBatchedEx(
      blas_, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(g.n), static_cast<int>(g.m), static_cast<int>(g.k), &alpha, g.b, CUDA_R_16BF,
      static_cast<int>(g.ldb), static_cast<long long>(stride_b), g.a, CUDA_R_16BF,
      static_cast<int>(g.lda), static_cast<long long>(stride_a), &beta, g.c, CUDA_R_16BF,
      static_cast<int>(g.ldc), static_cast<long long>(stride_c), static_cast<int>(count),
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS) {
    cudaGetLastError();
    throw DeviceError(DeviceErrorKind::runtime, "cuda: cublasGemmStridedBatchedEx(" + what +
                                                    ") failed: " + cublasGetStatusName(s) + ": " +
                                                    cublasGetStatusString(s));
  }
}

void CudaDevice::rmsnorm_forward(const bf16* x, const bf16* weight, bf16* y, float* rstd,
                                 std::int64_t rows, std::int64_t cols, float eps) {
  check_rows("rmsnorm_forward", rows);
  bind();
  check_launch(
      cuda::launch_rmsnorm_forward(x, weight, y, rstd, rows, cols, eps, stream(Queue::compute)),
      "rmsnorm_forward", dims({rows, cols}));
}

void CudaDevice::rmsnorm_backward(const bf16* dy, const bf16* x, const bf16* weight,
                                  const float* rstd, bf16* dx, bf16* dweight, std::int64_t rows,
                                  std::int64_t cols) {
  check_rows("rmsnorm_backward", rows);
  bind();
  check_launch(cuda::launch_rmsnorm_backward(dy, x, weight, rstd, dx, dweight, rows, cols,
                                             stream(Queue::compute)),
               "rmsnorm_backward", dims({rows, cols}));
}

void CudaDevice::to_heads(const bf16* x, bf16* out, std::int64_t batch, std::int64_t seq,
                          std::int64_t heads, std::int64_t head_dim, std::int64_t repeat,
                          double theta) {
  check_rotary("to_heads", head_dim, theta);
  bind();
  check_launch(cuda::launch_to_heads(x, out, batch, seq, heads, head_dim, repeat, theta,
                                     stream(Queue::compute)),
               "to_heads", dims({batch, seq, heads, head_dim, repeat}));
}

void CudaDevice::from_heads(const bf16* g, bf16* out, std::int64_t batch, std::int64_t seq,
                            std::int64_t heads, std::int64_t head_dim, std::int64_t repeat,
                            double theta) {
  check_rotary("from_heads", head_dim, theta);
  bind();
  check_launch(cuda::launch_from_heads(g, out, batch, seq, heads, head_dim, repeat, theta,
                                       stream(Queue::compute)),
               "from_heads", dims({batch, seq, heads, head_dim, repeat}));
}

void CudaDevice::causal_softmax_forward(const bf16* scores, bf16* probs, std::int64_t n,
                                        std::int64_t seq, float scale) {
  check_rows("causal_softmax_forward", n * seq);
  bind();
  check_launch(
      cuda::launch_causal_softmax_forward(scores, probs, n, seq, scale, stream(Queue::compute)),
      "causal_softmax_forward", dims({n, seq, seq}));
}

void CudaDevice::causal_softmax_backward(const bf16* probs, const bf16* dprobs, bf16* dscores,
                                         std::int64_t n, std::int64_t seq, float scale) {
  check_rows("causal_softmax_backward", n * seq);
  bind();
  check_launch(cuda::launch_causal_softmax_backward(probs, dprobs, dscores, n, seq, scale,
                                                    stream(Queue::compute)),
               "causal_softmax_backward", dims({n, seq, seq}));
}

void CudaDevice::silu_mul_forward(const bf16* gate, const bf16* up, bf16* out, std::int64_t n) {
  bind();
  check_launch(cuda::launch_silu_mul_forward(gate, up, out, n, stream(Queue::compute)),
               "silu_mul_forward", std::to_string(n));
}

void CudaDevice::silu_mul_backward(const bf16* dout, const bf16* gate, const bf16* up, bf16* dgate,
                                   bf16* dup, std::int64_t n) {
  bind();
  check_launch(
      cuda::launch_silu_mul_backward(dout, gate, up, dgate, dup, n, stream(Queue::compute)),
      "silu_mul_backward", std::to_string(n));
}

namespace {

cuda::View cuda_view(const TensorView& v) {
  cuda::View c{v.data, v.dtype == DType::f32 ? 1 : 0, {}, {}};
  for (int d = 0; d < kViewDims; ++d) {
    c.size[d] = v.size[d];
    c.stride[d] = v.stride[d];
  }
  return c;
}

void check_view(const char* call, const std::string& why) {
  if (!why.empty())
    throw DeviceError(DeviceErrorKind::runtime, std::string("cuda: ") + call + ": " + why);
}

}  // namespace

void CudaDevice::elementwise(ElementwiseOp op, const TensorView& out, const TensorView& a,
                             const TensorView& b, float scalar) {
  check_view("elementwise", elementwise_problem(op, out, a, b));
  TensorView o = out, x = a, y = is_binary(op) ? b : a;
  TensorView* views[] = {&o, &x, &y};
  const int dims = op == ElementwiseOp::cat_last ? kViewDims - 1 : kViewDims;
  const int lo = dims - coalesce_views(views, 3, dims);
  bind();
  check_launch(cuda::launch_elementwise(static_cast<std::int32_t>(op), cuda_view(o), cuda_view(x),
                                        cuda_view(y), scalar, lo, stream(Queue::compute)),
               "elementwise", std::to_string(out.elements()));
}

void CudaDevice::reduce_last(const TensorView& out, const TensorView& in, float scale) {
  check_view("reduce_last", reduce_last_problem(out, in));
  TensorView o = out, x = in;
  TensorView* views[] = {&o, &x};
  const int lo = kViewDims - 1 - coalesce_views(views, 2, kViewDims - 1);
  bind();
  check_launch(
      cuda::launch_reduce_last(cuda_view(o), cuda_view(x), scale, lo, stream(Queue::compute)),
      "reduce_last", std::to_string(out.elements()));
}

}  // namespace zob
