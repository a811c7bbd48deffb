#include "backends/cuda/cuda_device.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <limits>
#include <string>

#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/cuda_test_fault.hpp"
#include "backends/cuda/nvml_processes.hpp"
#include "zob/errors.hpp"

namespace zob {
namespace {

constexpr std::size_t kBlasWorkspaceBytes = std::size_t{32} << 20;  // NVIDIA's advice for Hopper

std::string mib(std::size_t bytes) {
  return std::to_string(bytes) + " bytes (" + std::to_string(bytes >> 20) + " MiB)";
}

std::string err_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

// Every failed call: the error cleared (so it does not resurface in an unrelated later check)
// and one line naming the call and what it was asked.
[[noreturn]] void fail(DeviceErrorKind kind, const std::string& call, const std::string& detail,
                       cudaError_t e) {
  cudaGetLastError();
  throw DeviceError(kind, "cuda: " + call + "(" + detail + ") failed: " + err_text(e));
}

// Both pass the result through the test-only fault hook (cuda_test_fault.hpp), which returns
// it unchanged unless ZOB_TEST_CUDA_FAULT names this call.
void check(cudaError_t e, const char* call, const std::string& detail = "") {
  e = cuda::test_fault(e, call);
  if (e != cudaSuccess) fail(DeviceErrorKind::runtime, call, detail, e);
}

void check_launch(cudaError_t e, const char* kernel, const std::string& shape) {
  e = cuda::test_fault(e, kernel);
  if (e != cudaSuccess) fail(DeviceErrorKind::runtime, std::string("kernel ") + kernel, shape, e);
}

void check_blas(cublasStatus_t s, const char* call, const std::string& detail) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    cudaGetLastError();
    throw DeviceError(DeviceErrorKind::runtime, std::string("cuda: ") + call + "(" + detail +
                                                    ") failed: " + cublasGetStatusName(s) + ": " +
                                                    cublasGetStatusString(s));
  }
}

std::string version_string(const char* what, int v) {
  return std::string(what) + " " + std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

int read_numa_node(std::string bus_id) {
  std::transform(bus_id.begin(), bus_id.end(), bus_id.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::ifstream in("/sys/bus/pci/devices/" + bus_id + "/numa_node");
  int node = -1;
  if (!(in >> node)) return -1;
  return node;  // the kernel writes -1 on single-node machines
}

// The kernel driver's own version (e.g. "580.159.04"), which the CUDA API does not report;
// empty where the module is not visible (containers without /sys/module).
std::string kernel_driver_version() {
  std::ifstream in("/sys/module/nvidia/version");
  std::string v;
  if (!(in >> v)) return {};
  return v;
}

class CudaEvent final : public DeviceEvent {
 public:
  CudaEvent() { check(cudaEventCreateWithFlags(&event_, cudaEventDefault), "cudaEventCreate"); }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

cudaEvent_t native(DeviceEvent& e) {
  auto* ce = dynamic_cast<CudaEvent*>(&e);
  if (ce == nullptr) {
    throw DeviceError(DeviceErrorKind::runtime,
                      "cuda: an event from another device was passed to the CUDA device");
  }
  return ce->get();
}

std::string shape(std::int64_t a, std::int64_t b) {
  return std::to_string(a) + "x" + std::to_string(b);
}

}  // namespace

CudaDevice::CudaDevice(int index) : index_(index) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    int driver = 0;
    cudaDriverGetVersion(&driver);
    throw DeviceError(DeviceErrorKind::unavailable,
                      "cuda: no usable NVIDIA driver or GPU: cudaGetDeviceCount failed: " +
                          err_text(e) + " (driver supports CUDA " +
                          (driver ? version_string("", driver).substr(1) : std::string("none")) +
                          ", this build needs " + std::to_string(CUDART_VERSION / 1000) + "." +
                          std::to_string((CUDART_VERSION % 1000) / 10) + ")");
  }
  if (index < 0 || index >= count) {
    throw DeviceError(DeviceErrorKind::unavailable, "cuda: device index " + std::to_string(index) +
                                                        " out of range: " + std::to_string(count) +
                                                        " CUDA device(s) visible");
  }
  try {
    bind();
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, index_), "cudaGetDeviceProperties",
          std::to_string(index_));
    int runtime = 0;
    int driver = 0;
    check(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
    check(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
    char bus[32] = {};
    check(cudaDeviceGetPCIBusId(bus, sizeof bus, index_), "cudaDeviceGetPCIBusId");
    info_.backend = "cuda";
    info_.name = prop.name;
    info_.runtime_version = version_string("CUDA runtime", runtime);
    const std::string module = kernel_driver_version();
    info_.driver_version = (module.empty() ? std::string() : "NVIDIA " + module + ", ") +
                           version_string("CUDA driver API", driver);
    info_.pci_bus_id = bus;
    info_.total_memory_bytes = prop.totalGlobalMem;
    info_.numa_node = read_numa_node(info_.pci_bus_id);

    for (int q = 0; q < kQueueCount; ++q) {
      check(cudaStreamCreateWithFlags(&streams_[q], cudaStreamNonBlocking), "cudaStreamCreate",
            to_string(static_cast<Queue>(q)));
    }
    check_blas(cublasCreate(&blas_), "cublasCreate", "");
    check_blas(cublasSetStream(blas_, stream(Queue::compute)), "cublasSetStream", "compute");
    check(cudaMalloc(&blas_workspace_, kBlasWorkspaceBytes), "cudaMalloc",
          "cuBLAS workspace " + mib(kBlasWorkspaceBytes));
    check_blas(cublasSetWorkspace(blas_, blas_workspace_, kBlasWorkspaceBytes),
               "cublasSetWorkspace", mib(kBlasWorkspaceBytes));
    void* partials = nullptr;
    check(cudaMalloc(&partials, sizeof(float) * cuda::kSumBlocks), "cudaMalloc", "sum scratch");
    sum_partials_ = static_cast<float*>(partials);
  } catch (...) {
    release_resources();
    throw;
  }
}

CudaDevice::~CudaDevice() { release_resources(); }

void CudaDevice::release_resources() noexcept {
  cudaSetDevice(index_);
  // Work still queued may touch what is freed below.
  cudaDeviceSynchronize();
  if (blas_ != nullptr) cublasDestroy(blas_);
  blas_ = nullptr;
  cudaFree(blas_workspace_);
  cudaFree(sum_partials_);
  blas_workspace_ = nullptr;
  sum_partials_ = nullptr;
  for (auto& s : streams_) {
    if (s != nullptr) cudaStreamDestroy(s);
    s = nullptr;
  }
  for (auto& [ptr, bytes] : allocations_) cudaFree(ptr);
  allocations_.clear();
  cudaGetLastError();
}

void CudaDevice::bind() const {
  check(cudaSetDevice(index_), "cudaSetDevice", std::to_string(index_));
}

// ---- device memory ----

void* CudaDevice::allocate(std::size_t bytes) {
  bind();
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    std::size_t free_b = 0;
    std::size_t total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    cudaGetLastError();
    const DeviceErrorKind kind =
        e == cudaErrorMemoryAllocation ? DeviceErrorKind::out_of_memory : DeviceErrorKind::runtime;
    throw DeviceError(kind, "cuda: cudaMalloc(" + mib(bytes) + ") failed: " + err_text(e) +
                                "; the device has " + mib(free_b) + " free of " + mib(total_b) +
                                ", this run holds " + mib(memory_in_use()) +
                                ": use a smaller model or batch");
  }
  std::lock_guard lock(mutex_);
  allocations_[p] = bytes;
  in_use_ += bytes;
  peak_ = std::max(peak_, in_use_);
  return p;
}

void CudaDevice::deallocate(void* device) noexcept {
  if (device == nullptr) return;
  {
    std::lock_guard lock(mutex_);
    auto it = allocations_.find(device);
    if (it == allocations_.end()) return;  // not ours: never free what we did not allocate
    in_use_ -= it->second;
    allocations_.erase(it);
  }
  cudaSetDevice(index_);
  cudaFree(device);
  cudaGetLastError();
}

// NVML's process list where the driver's libnvidia-ml is there (nvml_processes.hpp), and the
// free memory the runtime reports; a failure leaves a field unknown rather than failing the arm.
Device::Occupancy CudaDevice::occupancy() const {
  Occupancy o;
  bind();
  std::size_t free_b = 0;
  std::size_t total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) o.free_bytes = free_b;
  cudaGetLastError();
  o.other_processes = cuda::nvml_other_processes(info_.pci_bus_id);
  return o;
}

std::size_t CudaDevice::memory_in_use() const {
  std::lock_guard lock(mutex_);
  return in_use_;
}

std::size_t CudaDevice::memory_peak() const {
  std::lock_guard lock(mutex_);
  return peak_;
}

// ---- host memory ----

Registration CudaDevice::register_host(void* host, std::size_t bytes) {
  bind();
  // Both test hooks (cuda_test_fault.hpp): a refusal (ZOB_TEST_CUDA_FAULT=cudaHostRegister:n),
  // or no call at all taken as a success, which the check below must catch.
  const bool skip = cuda::test_skip_host_register();
  const cudaError_t made =
      skip ? cudaSuccess : cudaHostRegister(host, bytes, cudaHostRegisterDefault);
  const cudaError_t e = cuda::test_fault(made, "cudaHostRegister");
  if (e != cudaSuccess) {
    if (made == cudaSuccess && !skip) cudaHostUnregister(host);  // the test's refusal: undo it
    cudaGetLastError();
    throw DeviceError(DeviceErrorKind::registration_refused,
                      "cuda: cudaHostRegister(" + mib(bytes) + ") refused: " + err_text(e) +
                          " (page-aligned range required; run --arms unregistered,pageable to "
                          "measure without registration)");
  }
  // Trust but verify: the range must now be host memory with a device mapping. Anything else
  // would make the "registered" arm silently measure pageable copies.
  cudaPointerAttributes attr{};
  const cudaError_t a = cudaPointerGetAttributes(&attr, host);
  if (a != cudaSuccess || attr.type != cudaMemoryTypeHost || attr.devicePointer == nullptr) {
    cudaGetLastError();
    cudaHostUnregister(host);
    cudaGetLastError();
    throw DeviceError(
        DeviceErrorKind::registration_refused,
        "cuda: cudaHostRegister(" + mib(bytes) +
            ") returned success but cudaPointerGetAttributes does not report the "
            "range as registered host memory (" +
            (a != cudaSuccess ? err_text(a)
                              : "type " + std::to_string(static_cast<int>(attr.type))) +
            ")");
  }
  return Registration{"cudaHostRegister", true};
}

void CudaDevice::unregister_host(void* host) noexcept {
  if (host == nullptr) return;
  cudaSetDevice(index_);
  cudaHostUnregister(host);
  cudaGetLastError();
}

bool CudaDevice::is_registered(const void* host) const {
  bind();
  cudaPointerAttributes attr{};
  const cudaError_t e = cudaPointerGetAttributes(&attr, host);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost && attr.devicePointer != nullptr;
}

void* CudaDevice::allocate_host(std::size_t bytes) {
  bind();
  void* p = nullptr;
  const cudaError_t e = cudaMallocHost(&p, bytes == 0 ? 1 : bytes);
  if (e != cudaSuccess) {
    fail(e == cudaErrorMemoryAllocation ? DeviceErrorKind::out_of_memory : DeviceErrorKind::runtime,
         "cudaMallocHost", mib(bytes), e);
  }
  return p;
}

void CudaDevice::deallocate_host(void* host) noexcept {
  if (host == nullptr) return;
  cudaSetDevice(index_);
  cudaFreeHost(host);
  cudaGetLastError();
}

// ---- copies ----

void CudaDevice::copy_to_device(Queue q, void* device, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  bind();
  check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream(q)), "cudaMemcpyAsync",
        std::string("host->device, ") + mib(bytes) + ", queue " + to_string(q));
}

void CudaDevice::copy_to_host(Queue q, void* host, const void* device, std::size_t bytes) {
  if (bytes == 0) return;
  bind();
  check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream(q)), "cudaMemcpyAsync",
        std::string("device->host, ") + mib(bytes) + ", queue " + to_string(q));
}

void CudaDevice::copy_on_device(Queue q, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  bind();
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream(q)), "cudaMemcpyAsync",
        std::string("device->device, ") + mib(bytes) + ", queue " + to_string(q));
}

void CudaDevice::fill_zero(Queue q, void* device, std::size_t bytes) {
  if (bytes == 0) return;
  bind();
  check(cudaMemsetAsync(device, 0, bytes, stream(q)), "cudaMemsetAsync",
        mib(bytes) + ", queue " + to_string(q));
}

// ---- events ----

std::unique_ptr<DeviceEvent> CudaDevice::create_event() {
  bind();
  return std::make_unique<CudaEvent>();
}

void CudaDevice::record(DeviceEvent& event, Queue q) {
  check(cudaEventRecord(native(event), stream(q)), "cudaEventRecord", to_string(q));
}

void CudaDevice::queue_wait(Queue q, DeviceEvent& event) {
  check(cudaStreamWaitEvent(stream(q), native(event), 0), "cudaStreamWaitEvent", to_string(q));
}

void CudaDevice::event_synchronize(DeviceEvent& event) {
  check(cudaEventSynchronize(native(event)), "cudaEventSynchronize");
}

bool CudaDevice::event_done(DeviceEvent& event) {
  const cudaError_t rc = cudaEventQuery(native(event));
  if (rc == cudaErrorNotReady) {
    (void)cudaGetLastError();  // not an error: clear it so the next check does not see it
    return false;
  }
  check(rc, "cudaEventQuery");
  return true;
}

double CudaDevice::elapsed_seconds(DeviceEvent& start, DeviceEvent& end) {
  float ms = 0.0f;
  check(cudaEventElapsedTime(&ms, native(start), native(end)), "cudaEventElapsedTime");
  return static_cast<double>(ms) * 1e-3;
}

void CudaDevice::synchronize() {
  bind();
  for (int q = 0; q < kQueueCount; ++q) {
    check(cudaStreamSynchronize(streams_[q]), "cudaStreamSynchronize",
          to_string(static_cast<Queue>(q)));
  }
}

// ---- kernels ----

void CudaDevice::gemm(const GemmArgs& g) {
  if (g.m <= 0 || g.n <= 0) return;
  bind();
  constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();
  if (g.k < 0 || g.m > kIntMax || g.n > kIntMax || g.k > kIntMax || g.lda > kIntMax ||
      g.ldb > kIntMax || g.ldc > kIntMax) {
    throw DeviceError(DeviceErrorKind::runtime,
                      "cuda: gemm m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) +
                          " k=" + std::to_string(g.k) +
                          " is outside cuBLAS's 32-bit dimensions: use a smaller shape");
  }
  // cuBLAS is column-major. A row-major [R,C] matrix with leading dimension ld is the
  // column-major [C,R] one, so C = op(A) op(B) (row-major) is C^T = op(B)^T op(A)^T
  // (column-major): swap the operands and the roles of m and n; each transpose flag stays
  // with its own operand.
  const float alpha = 1.0f;
  const float beta = 0.0f;
  const cublasStatus_t s = cublasGemmEx(
      blas_, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(g.n), static_cast<int>(g.m), static_cast<int>(g.k), &alpha, g.b, CUDA_R_16BF,
      static_cast<int>(g.ldb), g.a, CUDA_R_16BF, static_cast<int>(g.lda), &beta, g.c, CUDA_R_16BF,
      static_cast<int>(g.ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  check_blas(s, "cublasGemmEx",
             "m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) +
                 " k=" + std::to_string(g.k) + (g.trans_a ? " trans_a" : "") +
                 (g.trans_b ? " trans_b" : ""));
}

void CudaDevice::embedding_forward(const std::int32_t* ids, const bf16* table, bf16* out,
                                   std::int64_t tokens, std::int64_t hidden) {
  bind();
  check_launch(
      cuda::launch_embedding_forward(ids, table, out, tokens, hidden, stream(Queue::compute)),
      "embedding_forward", shape(tokens, hidden));
}

void CudaDevice::embedding_backward(const EmbeddingGradIndex& index, const bf16* dout, bf16* dtable,
                                    std::int64_t hidden) {
  bind();
  check_launch(
      cuda::launch_embedding_backward(index.unique_ids, index.offsets, index.positions,
                                      index.n_unique, dout, dtable, hidden, stream(Queue::compute)),
      "embedding_backward", shape(index.n_unique, hidden));
}

void CudaDevice::bias_add(bf16* y, const bf16* bias, std::int64_t rows, std::int64_t cols) {
  bind();
  check_launch(cuda::launch_bias_add(y, bias, rows, cols, stream(Queue::compute)), "bias_add",
               shape(rows, cols));
}

void CudaDevice::bias_gelu_forward(bf16* pre, const bf16* bias, bf16* act, std::int64_t rows,
                                   std::int64_t cols) {
  bind();
  check_launch(cuda::launch_bias_gelu_forward(pre, bias, act, rows, cols, stream(Queue::compute)),
               "bias_gelu_forward", shape(rows, cols));
}

void CudaDevice::gelu_backward(const bf16* dact, const bf16* pre, bf16* dpre, std::int64_t n) {
  bind();
  check_launch(cuda::launch_gelu_backward(dact, pre, dpre, n, stream(Queue::compute)),
               "gelu_backward", std::to_string(n));
}

void CudaDevice::column_sum(const bf16* x, bf16* out, std::int64_t rows, std::int64_t cols) {
  bind();
  check_launch(cuda::launch_column_sum(x, out, rows, cols, stream(Queue::compute)), "column_sum",
               shape(rows, cols));
}

void CudaDevice::residual_add(bf16* x, const bf16* y, std::int64_t n) {
  bind();
  check_launch(cuda::launch_residual_add(x, y, n, stream(Queue::compute)), "residual_add",
               std::to_string(n));
}

void CudaDevice::fill(bf16* x, float value, std::int64_t n) {
  bind();
  check_launch(cuda::launch_fill(x, value, n, stream(Queue::compute)), "fill", std::to_string(n));
}

void CudaDevice::sum(const bf16* x, std::int64_t n, float* result) {
  bind();
  check_launch(cuda::launch_sum(x, n, sum_partials_, result, stream(Queue::compute)), "sum",
               std::to_string(n));
}

void CudaDevice::cast_f32_to_bf16(const float* src, bf16* dst, std::int64_t n, Queue q) {
  bind();
  check_launch(cuda::launch_cast_f32_to_bf16(src, dst, n, stream(q)), "cast_f32_to_bf16",
               std::to_string(n) + " elements, queue " + to_string(q));
}

void CudaDevice::cast_bf16_to_f32(const bf16* src, float* dst, std::int64_t n, Queue q) {
  bind();
  check_launch(cuda::launch_cast_bf16_to_f32(src, dst, n, stream(q)), "cast_bf16_to_f32",
               std::to_string(n) + " elements, queue " + to_string(q));
}

}  // namespace zob
