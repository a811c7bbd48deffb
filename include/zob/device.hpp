// The device abstraction: everything the ZeRO-3 step needs from an accelerator, and nothing
// more. Backends (src/backends/{cpu,cuda,level_zero}) implement it; the step uses only this.
//
// Conventions
// - Pointers named `device` point to memory from Device::allocate; `host` pointers point to
//   host memory (pageable, locked, registered or allocate_host'ed).
// - Every operation is enqueued on a queue and ordered within it. Work on different queues
//   is ordered only through events (record on one queue, queue_wait on another). A backend
//   may execute synchronously at enqueue time (the CPU device does): that is a valid schedule.
// - Matrices are row-major. bf16 math: inputs bf16, arithmetic and accumulation fp32, one
//   rounding to bf16 (round to nearest even) at the store. Reductions are deterministic: the
//   same inputs give the same bits on every call (no float atomics).
// - Every failure throws DeviceError (errors.hpp) with one line naming the call, the bytes
//   or shape involved, and the runtime's own error string.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "zob/bf16.hpp"
#include "zob/collectives.hpp"
#include "zob/errors.hpp"

namespace zob {

enum class Queue { compute = 0, h2d = 1, d2h = 2 };
inline constexpr int kQueueCount = 3;
inline const char* to_string(Queue q) {
  switch (q) {
    case Queue::compute: return "compute";
    case Queue::h2d: return "h2d";
    case Queue::d2h: return "d2h";
  }
  return "?";
}

// Opaque timing / ordering point. Created by Device::create_event.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
};

struct DeviceInfo {
  std::string backend;          // "cpu", "cuda", "xpu" (the --device name)
  std::string name;             // e.g. "NVIDIA H200"
  std::string runtime_version;  // e.g. "CUDA runtime 13.0"
  std::string driver_version;
  std::string pci_bus_id;  // "" where not applicable
  std::uint64_t total_memory_bytes = 0;
  int numa_node = -1;  // NUMA node closest to the device, -1 unknown
  // The device's memory is the host's RAM (the CPU device): what it allocates competes with the
  // host buffers for MemAvailable.
  bool memory_is_host_ram = false;
};

// How a host range was made DMA-able. `method` is what DRIVERRESULT reports:
// "cudaHostRegister", "zexDriverImportExternalPointer", "zeMemAllocHost(memmap-sysmem)",
// or "not-applicable" on the CPU device.
struct Registration {
  std::string method;
  bool verified = false;  // the runtime confirmed it (cudaPointerGetAttributes, zex base address)
};

// C[M,N] = op(A) * op(B), bf16 in/out, fp32 accumulation.
// op(A) is [M,K]: A is stored [M,K] (lda >= K), or [K,M] when trans_a (lda >= M).
// op(B) is [K,N]: B is stored [K,N] (ldb >= N), or [N,K] when trans_b (ldb >= K).
// The step's three shapes: forward Y = X W^T (trans_b), input grad dX = dY W (none),
// weight grad dW = dY^T X (trans_a).
struct GemmArgs {
  bool trans_a = false;
  bool trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  const bf16* a = nullptr;
  std::int64_t lda = 0;
  const bf16* b = nullptr;
  std::int64_t ldb = 0;
  bf16* c = nullptr;
  std::int64_t ldc = 0;
};

// Deterministic embedding backward without atomics: the step builds, once, the list of
// distinct token ids and for each the positions where it occurs (CSR, positions ascending),
// and uploads it to device memory. Row unique_ids[i] of dtable gets the fp32 sum, in position
// order, of dout rows positions[offsets[i] .. offsets[i+1]), rounded once to bf16.
// ---- the generic tensor operations (the deepspeed schedule's eager decomposition) ----
// Element types of a TensorView: each element is read as fp32 (bf16 widens exactly) and
// stored with one rounding (round to nearest even for bf16).
enum class DType : std::int32_t { bf16 = 0, f32 = 1 };
inline constexpr int kViewDims = 6;
// A strided view of up to six dimensions, outermost first (unused leading dimensions have
// size 1), strides in elements; a stride of 0 broadcasts. What PyTorch's TensorIterator sees
// for a view (a transpose, a slice, a broadcast [rows, 1] or [cols] operand) without a copy.
struct TensorView {
  const void* data = nullptr;
  DType dtype = DType::bf16;
  std::int64_t size[kViewDims] = {1, 1, 1, 1, 1, 1};
  std::int64_t stride[kViewDims] = {0, 0, 0, 0, 0, 0};
  std::int64_t elements() const {
    std::int64_t n = 1;
    for (std::int64_t s : size) n *= s;
    return n;
  }
};
// n elements, `stride` apart, in the last dimension: a flat tensor (stride 1) or a strided one.
inline TensorView vector_view(const void* data, DType dtype, std::int64_t n,
                              std::int64_t stride = 1) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.size[kViewDims - 1] = n;
  v.stride[kViewDims - 1] = stride;
  return v;
}

// One elementwise kernel as eager PyTorch launches it: out = op(a[, b][, scalar]) over out's
// shape, a and b read through their own strides (same sizes as out). fp32 arithmetic:
//   copy: a (a dtype cast when the dtypes differ)   neg: -a
//   add: a + b   mul: a * b   add_scalar: a + scalar   mul_scalar: a * scalar
//   square: a * a   cube: (a * a) * a   rsqrt: 1.0f / sqrtf(a)
//   silu: a / (1.0f + expf(-a))
//   silu_backward (a: the gradient, b: the input x): s = 1.0f / (1.0f + expf(-x));
//                 a * (s * (1.0f + x * (1.0f - s)))
//   cat_last: a then b along the last dimension (torch.cat(dim=-1), one kernel as eager's
//             CatArrayBatchedCopy): out[..., k] = k < a.size[5] ? a[..., k] : b[..., k -
//             a.size[5]]; a and b have out's sizes except the last, and a.size[5] + b.size[5] =
//             out.size[5].
// The ops of torch.optim.AdamW's foreach step (torch 2.x _multi_tensor_adam, src/step/
// device_adam.hpp), each the fp32 expression of its CUDA foreach functor (ForeachFunctors.cuh):
//   lerp (_foreach_lerp_, w = scalar): fabsf(w) < 0.5f ? a + w * (b - a)
//                                                      : b - (b - a) * (1.0f - w)
//   sqrt: sqrtf(a)   div_scalar: a / scalar, a true division (_foreach_div_ by a scalar list)
//   addcmul: out + scalar * (a * b)   addcdiv: out + scalar * (a / b)
//     (_foreach_addcmul_ / _foreach_addcdiv_: self + value * op(t1, t2); the foreach addcmul
//     rounds t1 * t2 first, the unfused one (value * t1) * t2). These two read out as a third
//     operand (out may be the same view as a or b), so each is one pass over its arrays as
//     torch's kernel is: a division into the scratch tensor and then an add over it instead
//     would move 24 bytes an element where torch's addcdiv moves 16.
// Each product and sum keeps its own rounding, as in every op here: torch's CUDA build lets
// nvcc contract `x + s * y` into one fma, so torch's bits may differ from these by an ulp of
// such a step; the kernels, their order and their bytes are torch's.
enum class ElementwiseOp : std::int32_t {
  copy = 0,
  neg,
  add,
  mul,
  add_scalar,
  mul_scalar,
  square,
  cube,
  rsqrt,
  silu,
  silu_backward,
  cat_last,
  lerp,
  sqrt,
  div_scalar,
  addcmul,
  addcdiv,
};
// The last op: elementwise_problem's range, and what the tests loop over. New ops are appended
// (the OpenCL and CUDA kernels switch on the values).
inline constexpr ElementwiseOp kLastElementwiseOp = ElementwiseOp::addcdiv;
// Ops that read out's elements before they store (out = out + ...): a third operand.
inline bool reads_out(ElementwiseOp op) {
  return op == ElementwiseOp::addcmul || op == ElementwiseOp::addcdiv;
}
inline bool is_binary(ElementwiseOp op) {
  return op == ElementwiseOp::add || op == ElementwiseOp::mul ||
         op == ElementwiseOp::silu_backward || op == ElementwiseOp::cat_last ||
         op == ElementwiseOp::lerp || reads_out(op);
}

// Rewrites views that share their sizes in the first `dims` dimensions (every operand of an
// elementwise op but cat_last: 6; of reduce_last and cat_last: 5, the last dimension kept) so
// that those dimensions are fewest: size-1 dimensions dropped, neighbours that every view walks
// contiguously (outer stride = inner stride * inner size) merged, right-aligned. The same
// elements in the same order, with fewer index divisions per element (PyTorch's
// TensorIterator coalesces the same way). At most 4 views. Returns the dimensions left in use
// (0..dims).
inline int coalesce_views(TensorView* const* views, int count, int dims) {
  std::int64_t size[kViewDims] = {}, stride[kViewDims][4] = {};
  int used = 0;  // merged dimensions, innermost first
  for (int d = dims - 1; d >= 0; --d) {
    const std::int64_t n = views[0]->size[d];
    if (n == 1) continue;
    bool merges = used > 0;
    for (int v = 0; v < count && merges; ++v)
      merges = views[v]->stride[d] == stride[used - 1][v] * size[used - 1];
    if (merges) {
      size[used - 1] *= n;
    } else {
      size[used] = n;
      for (int v = 0; v < count; ++v) stride[used][v] = views[v]->stride[d];
      ++used;
    }
  }
  for (int i = 0; i < dims; ++i) {  // merged dimension i (innermost first) lands at dims - 1 - i
    for (int v = 0; v < count; ++v) {
      views[v]->size[dims - 1 - i] = i < used ? size[i] : 1;
      views[v]->stride[dims - 1 - i] = i < used ? stride[i][v] : 0;
    }
  }
  return used;
}

// Why a view cannot be an operand ("" when it can): an unknown dtype, a negative size, no
// data for a non-empty view, or (`shape`, when given) sizes that differ from it in the first
// `dims` dimensions. Every backend checks its operands with this before it launches.
inline std::string tensor_view_problem(const char* name, const TensorView& v,
                                       const TensorView* shape = nullptr, int dims = kViewDims) {
  const std::string who = std::string(name) + ": ";
  if (v.dtype != DType::bf16 && v.dtype != DType::f32) return who + "unknown dtype";
  for (int d = 0; d < kViewDims; ++d) {
    if (v.size[d] < 0) return who + "negative size";
    if (shape != nullptr && d < dims && v.size[d] != shape->size[d])
      return who + "size " + std::to_string(v.size[d]) + " in dimension " + std::to_string(d) +
             " differs from out's " + std::to_string(shape->size[d]);
  }
  if (v.data == nullptr && v.elements() > 0) return who + "no data";
  return "";
}
inline std::string elementwise_problem(ElementwiseOp op, const TensorView& out, const TensorView& a,
                                       const TensorView& b) {
  if (static_cast<int>(op) < 0 || op > kLastElementwiseOp) return "unknown op";
  std::string why = tensor_view_problem("out", out);
  if (op == ElementwiseOp::cat_last) {
    if (why.empty()) why = tensor_view_problem("a", a, &out, kViewDims - 1);
    if (why.empty()) why = tensor_view_problem("b", b, &out, kViewDims - 1);
    if (why.empty() && a.size[kViewDims - 1] + b.size[kViewDims - 1] != out.size[kViewDims - 1])
      why = "cat_last: a's and b's last sizes do not add up to out's";
    return why;
  }
  if (why.empty()) why = tensor_view_problem("a", a, &out);
  if (why.empty() && is_binary(op)) why = tensor_view_problem("b", b, &out);
  return why;
}
inline std::string reduce_last_problem(const TensorView& out, const TensorView& in) {
  if (out.size[kViewDims - 1] != 1) return "out's last dimension must be 1";
  std::string why = tensor_view_problem("out", out);
  if (why.empty()) why = tensor_view_problem("in", in, &out, kViewDims - 1);
  return why;
}

struct EmbeddingGradIndex {
  const std::int32_t* unique_ids = nullptr;  // device, n_unique
  const std::int32_t* offsets = nullptr;     // device, n_unique + 1
  const std::int32_t* positions = nullptr;   // device, tokens
  std::int64_t n_unique = 0;
};

class Device {
 public:
  virtual ~Device() = default;

  virtual const DeviceInfo& info() const = 0;

  // ---- device memory; the backend tracks bytes in use and the high-water mark itself ----
  virtual void* allocate(std::size_t bytes) = 0;  // 256-byte aligned at least
  virtual void deallocate(void* device) noexcept = 0;
  virtual std::size_t memory_in_use() const = 0;
  virtual std::size_t memory_peak() const = 0;

  // ---- host memory ----
  // False on the CPU device: registration means nothing there, and is reported so.
  virtual bool registration_applicable() const = 0;
  // Make [host, host+bytes) DMA-able (page-aligned pointer and size). Verifies the result;
  // throws DeviceError(registration_refused) rather than ever returning unregistered memory.
  virtual Registration register_host(void* host, std::size_t bytes) = 0;
  virtual void unregister_host(void* host) noexcept = 0;
  virtual bool is_registered(const void* host) const = 0;
  // Host memory allocated by the runtime (cudaMallocHost / zeMemAllocHost): the `hostalloc`
  // arm. Throws DeviceError(unavailable) where the backend has no such thing.
  virtual void* allocate_host(std::size_t bytes) = 0;
  virtual void deallocate_host(void* host) noexcept = 0;

  // ---- copies and fills, ordered on queue q ----
  virtual void copy_to_device(Queue q, void* device, const void* host, std::size_t bytes) = 0;
  virtual void copy_to_host(Queue q, void* host, const void* device, std::size_t bytes) = 0;
  virtual void fill_zero(Queue q, void* device, std::size_t bytes) = 0;
  // Device memory to device memory (the --gpus N deepspeed schedule's packing of partitions
  // around its collectives, as DeepSpeed's torch.cat does).
  virtual void copy_on_device(Queue q, void* dst, const void* src, std::size_t bytes) = 0;

  // ---- events ----
  virtual std::unique_ptr<DeviceEvent> create_event() = 0;
  virtual void record(DeviceEvent& event, Queue q) = 0;
  virtual void queue_wait(Queue q, DeviceEvent& event) = 0;  // q waits for event
  virtual void event_synchronize(DeviceEvent& event) = 0;    // the host waits
  // Whether the work before a recorded event has completed, without waiting (cudaEventQuery):
  // the caching pool (src/step/caching_pool.hpp) reuses a freed block only then, as PyTorch
  // does. The default, "not known", keeps such blocks until the pool must wait for them.
  virtual bool event_done(DeviceEvent& event) {
    (void)event;
    return false;
  }
  // Device time between two completed events, in seconds.
  virtual double elapsed_seconds(DeviceEvent& start, DeviceEvent& end) = 0;
  virtual void synchronize() = 0;  // the host waits for every queue

  // ---- kernels, enqueued on Queue::compute unless a queue is given ----
  virtual void gemm(const GemmArgs& args) = 0;
  // out[t,:] = table[ids[t],:]
  virtual void embedding_forward(const std::int32_t* ids, const bf16* table, bf16* out,
                                 std::int64_t tokens, std::int64_t hidden) = 0;
  // Writes only the rows listed in index; the caller zero-fills dtable first.
  virtual void embedding_backward(const EmbeddingGradIndex& index, const bf16* dout, bf16* dtable,
                                  std::int64_t hidden) = 0;
  // y[r,c] = bf16(y[r,c] + bias[c])
  virtual void bias_add(bf16* y, const bf16* bias, std::int64_t rows, std::int64_t cols) = 0;
  // pre[r,c] = bf16(pre[r,c] + bias[c]); act[r,c] = bf16(gelu(pre[r,c])), gelu the erf form.
  virtual void bias_gelu_forward(bf16* pre, const bf16* bias, bf16* act, std::int64_t rows,
                                 std::int64_t cols) = 0;
  // dpre = bf16(dact * gelu'(pre)), elementwise over n.
  virtual void gelu_backward(const bf16* dact, const bf16* pre, bf16* dpre, std::int64_t n) = 0;
  // out[c] = bf16(sum over r of x[r,c]), fp32 accumulation: the bias gradient.
  virtual void column_sum(const bf16* x, bf16* out, std::int64_t rows, std::int64_t cols) = 0;
  // x = bf16(x + y), elementwise: the residual connection (forward and backward).
  virtual void residual_add(bf16* x, const bf16* y, std::int64_t n) = 0;
  // x[i] = bf16(value)
  virtual void fill(bf16* x, float value, std::int64_t n) = 0;
  // *result = fp32 sum of x (one float in device memory): the loss.
  virtual void sum(const bf16* x, std::int64_t n, float* result) = 0;
  // Casts, round to nearest even, NaN stays NaN (bf16.hpp). On queue q so the step can cast
  // gradients on the queue that will copy them.
  virtual void cast_f32_to_bf16(const float* src, bf16* dst, std::int64_t n,
                                Queue q = Queue::compute) = 0;
  virtual void cast_bf16_to_f32(const bf16* src, float* dst, std::int64_t n,
                                Queue q = Queue::compute) = 0;

  // ---- decoder-transformer kernels (--model) ----
  // Shared contract of every backend: bf16 in/out, fp32 arithmetic and accumulation, one
  // rounding to bf16 at each store, deterministic, on Queue::compute, row-major. The CPU
  // backend's src/backends/cpu/cpu_decoder_kernels.hpp spells out its fp32 evaluation order.

  // C_i = op(A_i) * op(B_i) for i in [0, count): A_i = a + i*stride_a (elements), likewise B, C.
  // stride 0 is allowed for A or B (a shared operand), never for C. Used by attention:
  // scores = Q K^T and out = P V per (batch, head) in head-major layout.
  virtual void gemm_strided_batched(const GemmArgs& args, std::int64_t count, std::int64_t stride_a,
                                    std::int64_t stride_b, std::int64_t stride_c) = 0;

  // RMSNorm (Llama/Mistral/Qwen2): per row r of x[rows, cols]:
  //   rstd[r] = 1 / sqrt(mean_c(x[r,c]^2) + eps)   (fp32, stored in fp32)
  //   y[r,c]  = bf16( weight[c] * (x[r,c] * rstd[r]) )   (fp32 math; one rounding)
  virtual void rmsnorm_forward(const bf16* x, const bf16* weight, bf16* y, float* rstd,
                               std::int64_t rows, std::int64_t cols, float eps) = 0;
  // Backward of the above, given dy and the saved x and rstd:
  //   xhat = x*rstd;  g = dy*weight
  //   dx[r,c]   = bf16( rstd[r] * (g[r,c] - xhat[r,c] * mean_c(g[r,:]*xhat[r,:])) )
  //   dweight[c] = bf16( sum over r (ascending) of dy[r,c]*xhat[r,c] )   (fp32 sum)
  virtual void rmsnorm_backward(const bf16* dy, const bf16* x, const bf16* weight,
                                const float* rstd, bf16* dx, bf16* dweight, std::int64_t rows,
                                std::int64_t cols) = 0;

  // Token-major [batch, seq, heads, head_dim] -> head-major [batch, heads*repeat, seq,
  // head_dim], with rotary position embedding (Hugging Face's rotate_half form) applied when
  // theta > 0, and each source head written to `repeat` consecutive destination heads
  // (grouped-query attention's repeat_kv). Position of token s is s (0-based in its sequence).
  //   half = head_dim/2; for d < half: inv_freq[d] = theta^(-2d/head_dim) (computed in double,
  //   then the angle a = s*inv_freq[d] in double, cos/sin in double, cast to float)
  //   out[d]      = x[d]*cos(a_d) - x[d+half]*sin(a_d)
  //   out[d+half] = x[d+half]*cos(a_d) + x[d]*sin(a_d)      (fp32 math, one rounding)
  // theta == 0: plain permute + repeat (V, and the attention output's backward with repeat 1).
  virtual void to_heads(const bf16* x, bf16* out, std::int64_t batch, std::int64_t seq,
                        std::int64_t heads, std::int64_t head_dim, std::int64_t repeat,
                        double theta) = 0;
  // The adjoint: head-major g [batch, heads*repeat, seq, head_dim] -> token-major out
  // [batch, seq, heads, head_dim]: sum (fp32, r ascending) of the `repeat` destination heads
  // of each source head, then the inverse rotation (sin -> -sin) when theta > 0, one rounding.
  // theta == 0 and repeat 1: the attention output's forward permute back.
  virtual void from_heads(const bf16* g, bf16* out, std::int64_t batch, std::int64_t seq,
                          std::int64_t heads, std::int64_t head_dim, std::int64_t repeat,
                          double theta) = 0;

  // Causal softmax over the last axis of scores [n, seq, seq] (n = batch*heads), in place
  // allowed (probs may equal scores): for row i, columns j <= i:
  //   p[i,j] = exp(scale*s[i,j] - m) / sum_{j'<=i} exp(scale*s[i,j'] - m),
  //   m = max_{j<=i} scale*s (fp32, sum ascending j); columns j > i get exactly 0.
  virtual void causal_softmax_forward(const bf16* scores, bf16* probs, std::int64_t n,
                                      std::int64_t seq, float scale) = 0;
  // dscores[i,j] = bf16( scale * p[i,j] * (dp[i,j] - sum_{j'} p[i,j']*dp[i,j']) ), fp32 dot
  // ascending j'; masked columns give exactly 0. In place allowed (dscores may equal dprobs).
  virtual void causal_softmax_backward(const bf16* probs, const bf16* dprobs, bf16* dscores,
                                       std::int64_t n, std::int64_t seq, float scale) = 0;

  // Gated MLP: out = bf16( silu(gate) * up ), silu(x) = x / (1 + exp(-x)), fp32, elementwise.
  virtual void silu_mul_forward(const bf16* gate, const bf16* up, bf16* out, std::int64_t n) = 0;
  // dgate = bf16( dout * up * silu'(gate) ),  dup = bf16( dout * silu(gate) ),
  // silu'(x) = s*(1 + x*(1-s)), s = 1/(1+exp(-x)).
  virtual void silu_mul_backward(const bf16* dout, const bf16* gate, const bf16* up, bf16* dgate,
                                 bf16* dup, std::int64_t n) = 0;

  // ---- generic tensor operations: the deepspeed schedule's eager decomposition ----
  // One kernel each, on Queue::compute. out must not overlap a or b unless it is the same view.
  // b is ignored (may be empty) for unary ops. Deterministic. addcmul and addcdiv read out too.
  virtual void elementwise(ElementwiseOp op, const TensorView& out, const TensorView& a,
                           const TensorView& b, float scalar) = 0;
  // out[i0..i4] = round(scale * (fp32 sum over j ascending of in[i0..i4, j])): the last
  // dimension of `in` (in.size[5]) is reduced; out.size[5] must be 1 and the other sizes
  // equal in's. A mean is scale = 1/n (eager's sum-then-multiply).
  virtual void reduce_last(const TensorView& out, const TensorView& in, float scale) = 0;

  // ---- other users of the device (two runs on one GPU, a run beside a training job) ----
  struct Occupancy {
    int other_processes = -1;      // processes other than this one on the device; -1 unknown
    std::uint64_t free_bytes = 0;  // the device's free memory now; 0 unknown
  };
  // What the runtime tells of the device's other users now; the driver compares the arms'
  // answers and says when the device was shared. Defined inline: plugins do not link zob_core.
  // The default (the CPU device, Level Zero without Sysman) knows neither.
  virtual Occupancy occupancy() const { return {}; }

  // ---- several ranks per arm (--gpus N), one device each ----
  // How the launcher placed the ranks, for make_rank_collectives.
  struct RankCollectivesOptions {
    double timeout_s = 0;  // the bound of every wait (the driver's collective_timeout_s)
    // Every rank on one device (a test hook of the driver: ZOB_TEST_SHARE_DEVICE).
    bool ranks_share_device = false;
  };
  // Returns when ranks on this backend can exchange device memory. Throws UsageError when the
  // backend has no collectives over device memory, DeviceError(unavailable) when their library
  // is missing (one line, with the fix). Defined inline: plugins do not link zob_core.
  virtual void check_rank_collectives() const {
    throw UsageError("--gpus > 1 on the " + info().backend +
                     " device needs collectives over "
                     "its memory, which this backend does not have; use --gpus 1, or --device cpu");
  }
  // The collectives over device memory for rank host.rank() of host.size(), bootstrapped over
  // `host` (the ranks' host-memory communicator, which also carries failures); every wait is
  // bounded by options.timeout_s. nullptr when `host` itself addresses this device's memory (the
  // CPU device). The backend's own settings for its collectives library (its environment) are
  // made here, before the library's first call in this process. Throws as
  // check_rank_collectives, or DeviceError / CollectiveError on failure.
  virtual std::unique_ptr<Collectives> make_rank_collectives(
      Collectives& host, const RankCollectivesOptions& options) {
    (void)host;
    (void)options;
    check_rank_collectives();
    throw UsageError("make_rank_collectives: not implemented for " + info().backend);
  }
};

// ---- the backend registry (src/device/registry.cpp) ----

struct DeviceRequest {
  std::string backend;  // "cpu", "cuda", "xpu"
  int index = 0;
};

// Creates the device. Throws DeviceError(unavailable) with one line saying why (backend not
// compiled in, runtime library missing, no driver, no device, version mismatch).
std::unique_ptr<Device> create_device(const DeviceRequest& request);

// For --device auto: the first backend that yields a device, in the order cuda, xpu, cpu.
// `notice` receives the reason each accelerator was skipped.
std::unique_ptr<Device> create_first_available_device(int index, std::string* notice);

}  // namespace zob
