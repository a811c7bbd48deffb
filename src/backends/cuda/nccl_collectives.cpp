#include "backends/cuda/nccl_collectives.hpp"

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>

#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/nccl_api.hpp"
#include "zob/errors.hpp"

namespace zob::cuda {
namespace {

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

// Polls spin for this many rounds before they start to sleep: a module's all-gather takes tens
// of microseconds on NVLink, and a sleeping waiter would add its wake-up latency to each.
constexpr int kSpinRounds = 4096;
constexpr auto kPollSleep = std::chrono::microseconds(50);

void pause_after(int round) {
  if (round >= kSpinRounds) std::this_thread::sleep_for(kPollSleep);
}

}  // namespace

NcclCollectives::NcclCollectives(CudaDevice& device, Collectives& host, double timeout_s)
    : device_(device),
      host_(host),
      api_(NcclApi::get()),
      timeout_s_(timeout_s),
      rank_(host.rank()),
      size_(host.size()),
      version_(nccl_version_text(api_.version)) {
  try {
    const cudaError_t set = cudaSetDevice(device.index());
    if (set != cudaSuccess) fail(std::string("cudaSetDevice: ") + cudaGetErrorString(set));
    const cudaError_t made = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    if (made != cudaSuccess) fail(std::string("cudaStreamCreate: ") + cudaGetErrorString(made));
    for (cudaEvent_t* e : {&queue_done_, &collective_done_}) {
      const cudaError_t ev = cudaEventCreateWithFlags(e, cudaEventDisableTiming);
      if (ev != cudaSuccess) fail(std::string("cudaEventCreate: ") + cudaGetErrorString(ev));
    }
    ncclUniqueId id{};
    if (rank_ == 0) check(api_.get_unique_id(&id), "ncclGetUniqueId");
    host_.broadcast(&id, sizeof id, 0);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every wait is ours, with a deadline
    check(api_.comm_init_rank_config(&comm_, size_, id, rank_, &config), "ncclCommInitRankConfig");
    wait_ready("ncclCommInitRankConfig (rendezvous of " + std::to_string(size_) + " ranks)");
  } catch (...) {
    abort_comm();
    destroy_stream_and_events();
    throw;
  }
}

NcclCollectives::~NcclCollectives() {
  // Orderly (flush, quiescent, free) when healthy; any trouble, an earlier failure, or a
  // failure the host communicator saw (a peer that died or hangs would never finalize with
  // us, and a finalize would wait for it): abort.
  try {
    host_.check_peers();
  } catch (...) {
    broken_ = true;
  }
  if (comm_ != nullptr && !broken_ && finalize_within(std::min(timeout_s_, 10.0)) &&
      api_.comm_destroy(comm_) == ncclSuccess) {
    comm_ = nullptr;
  }
  abort_comm();  // a no-op when destroyed above
  if (staging_ != nullptr) device_.deallocate(staging_);
  destroy_stream_and_events();
}

void NcclCollectives::destroy_stream_and_events() noexcept {
  for (cudaEvent_t e : {queue_done_, collective_done_}) {
    if (e != nullptr) cudaEventDestroy(e);
  }
  queue_done_ = collective_done_ = nullptr;
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  stream_ = nullptr;
}

bool NcclCollectives::finalize_within(double seconds) noexcept {
  const ncclResult_t r = api_.comm_finalize(comm_);
  if (r != ncclSuccess && r != ncclInProgress) return false;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(seconds));
  for (int round = 0;; ++round) {
    ncclResult_t state = ncclInProgress;
    if (api_.comm_get_async_error(comm_, &state) != ncclSuccess) return false;
    if (state == ncclSuccess) return true;
    if (state != ncclInProgress || Clock::now() > deadline) return false;
    pause_after(round);
  }
}

void NcclCollectives::usable() const {
  if (broken_) {
    throw CollectiveError(-1, "NCCL collectives of rank " + std::to_string(rank_) +
                                  " are unusable after an earlier failure");
  }
}

void NcclCollectives::check(ncclResult_t r, const std::string& call) {
  if (r == ncclSuccess || r == ncclInProgress) return;
  const char* last = api_.get_last_error(comm_);
  fail(call + " failed: " + api_.get_error_string(r) +
       (last != nullptr && *last != '\0' ? std::string(" (") + last + ")" : std::string()));
}

void NcclCollectives::wait_ready(const std::string& what) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s_));
  for (int round = 0;; ++round) {
    ncclResult_t state = ncclInProgress;
    check(api_.comm_get_async_error(comm_, &state), "ncclCommGetAsyncError");
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) check(state, what);
    check_peers();
    if (Clock::now() > deadline) {
      fail(what + " did not finish within " + seconds_text(timeout_s_) +
           " (a peer rank is missing or stuck)");
    }
    pause_after(round);
  }
}

void NcclCollectives::wait_stream(const std::string& what) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s_));
  for (int round = 0;; ++round) {
    const cudaError_t q = cudaStreamQuery(stream_);
    ncclResult_t state = ncclSuccess;
    check(api_.comm_get_async_error(comm_, &state), "ncclCommGetAsyncError");
    if (state != ncclSuccess && state != ncclInProgress) check(state, what);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) {
      cudaGetLastError();
      fail(what + ": cudaStreamQuery: " + cudaGetErrorName(q) + ": " + cudaGetErrorString(q));
    }
    check_peers();
    if (Clock::now() > deadline) {
      fail(what + " did not complete within " + seconds_text(timeout_s_) +
           " (a peer rank is missing or stuck)");
    }
    pause_after(round);
  }
}

void NcclCollectives::check_peers() {
  try {
    host_.check_peers();
  } catch (const CollectiveError&) {
    abort_comm();  // our kernels may wait on the failed peer forever otherwise
    throw;
  }
}

void NcclCollectives::fail(const std::string& why) {
  const std::string line = "rank " + std::to_string(rank_) + ": NCCL " + why;
  abort(line);
  throw CollectiveError(-1, line);
}

void NcclCollectives::abort_comm() noexcept {
  broken_ = true;
  if (comm_ != nullptr) {
    api_.comm_abort(comm_);
    comm_ = nullptr;
  }
}

void NcclCollectives::abort(const std::string& reason) noexcept {
  host_.abort(reason);  // the peers learn it there (their waits watch the host flag)
  abort_comm();
}

void NcclCollectives::grow_staging(std::size_t bytes) {
  if (bytes <= staging_bytes_) return;
  if (staging_ != nullptr) device_.deallocate(staging_);
  staging_ = nullptr;
  staging_bytes_ = 0;
  staging_ = device_.allocate(bytes);
  staging_bytes_ = bytes;
}

void NcclCollectives::all_gather(const void* shard, void* full, std::size_t shard_bytes) {
  if (launch_all_gather(shard, full, shard_bytes, stream_)) {
    wait_stream("all_gather of " + std::to_string(shard_bytes) + " bytes per rank");
  }
}

void NcclCollectives::enqueue_all_gather(Device& device, Queue q, const void* shard, void* full,
                                         std::size_t shard_bytes) {
  const cudaStream_t queue = queue_stream(device, q);
  join(stream_, queue, queue_done_, "all_gather");
  if (launch_all_gather(shard, full, shard_bytes, stream_)) {
    join(queue, stream_, collective_done_, "all_gather");
  }
}

void NcclCollectives::reduce_scatter(const void* in, ElemType in_type, float* out,
                                     std::size_t shard_elems) {
  if (launch_reduce_scatter(in, in_type, out, shard_elems, stream_)) {
    wait_stream("reduce_scatter of " + std::to_string(shard_elems) + " elements");
  }
}

void NcclCollectives::enqueue_reduce_scatter(Device& device, Queue q, const void* in,
                                             ElemType in_type, float* out,
                                             std::size_t shard_elems) {
  const cudaStream_t queue = queue_stream(device, q);
  join(stream_, queue, queue_done_, "reduce_scatter");
  if (launch_reduce_scatter(in, in_type, out, shard_elems, stream_)) {
    join(queue, stream_, collective_done_, "reduce_scatter");
  }
}

cudaStream_t NcclCollectives::queue_stream(Device& device, Queue q) const {
  if (&device != &device_) {
    throw UsageError(
        "NcclCollectives: a collective was enqueued on another device than the "
        "one its communicator was made for");
  }
  return device_.stream(q);
}

// `waiter` waits (on the device) for what `done` has been given so far: the event is
// re-recorded each time, and each wait takes the state it had when the wait was enqueued.
void NcclCollectives::join(cudaStream_t waiter, cudaStream_t done, cudaEvent_t event,
                           const char* what) {
  cudaError_t e = cudaEventRecord(event, done);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(waiter, event, 0);
  if (e != cudaSuccess) {
    fail(std::string(what) +
         ": ordering the collective's stream with the queue's: " + cudaGetErrorString(e));
  }
}

bool NcclCollectives::launch_all_gather(const void* shard, void* full, std::size_t shard_bytes,
                                        cudaStream_t stream) {
  usable();
  if (shard_bytes == 0) return false;
  check(api_.all_gather(shard, full, shard_bytes, ncclUint8, comm_, stream), "ncclAllGather");
  wait_ready("all_gather of " + std::to_string(shard_bytes) + " bytes per rank");
  return true;
}

// Rank r's piece of my shard lands in staging[r] (grouped send/recv: the bytes a ring
// reduce-scatter moves), then one kernel sums the pieces in rank order. Every collective runs
// on stream_, so the next call reuses the staging area only after this one's kernel.
bool NcclCollectives::launch_reduce_scatter(const void* in, ElemType in_type, float* out,
                                            std::size_t shard_elems, cudaStream_t stream) {
  usable();
  if (shard_elems == 0) return false;
  const std::size_t piece = shard_elems * elem_size(in_type);
  grow_staging(piece * static_cast<std::size_t>(size_));  // cudaFree waits for the device
  auto* parts = static_cast<unsigned char*>(staging_);
  const auto* src = static_cast<const unsigned char*>(in);
  const auto me = static_cast<std::size_t>(rank_);
  const std::string what = "reduce_scatter of " + std::to_string(shard_elems) + " elements";
  const cudaError_t own = cudaMemcpyAsync(parts + me * piece, src + me * piece, piece,
                                          cudaMemcpyDeviceToDevice, stream);
  if (own != cudaSuccess) fail(what + ": cudaMemcpyAsync: " + cudaGetErrorString(own));
  if (size_ > 1) {
    check(api_.group_start(), "ncclGroupStart");
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const auto ru = static_cast<std::size_t>(r);
      check(api_.send(src + ru * piece, piece, ncclUint8, r, comm_, stream), "ncclSend");
      check(api_.recv(parts + ru * piece, piece, ncclUint8, r, comm_, stream), "ncclRecv");
    }
    check(api_.group_end(), "ncclGroupEnd");
    wait_ready(what);
  }
  const cudaError_t launched = launch_sum_rank_parts(
      parts, size_, static_cast<std::int64_t>(shard_elems), in_type == ElemType::bf16, out, stream);
  if (launched != cudaSuccess) {
    cudaGetLastError();
    fail(what + ": kernel sum_rank_parts: " + cudaGetErrorString(launched));
  }
  return true;
}

void NcclCollectives::broadcast(void* data, std::size_t bytes, int root) {
  usable();
  if (bytes == 0) return;
  check(api_.broadcast(data, data, bytes, ncclUint8, root, comm_, stream_), "ncclBroadcast");
  const std::string what = "broadcast of " + std::to_string(bytes) + " bytes";
  wait_ready(what);
  wait_stream(what);
}

void NcclCollectives::barrier() {
  usable();
  host_.barrier();
}

}  // namespace zob::cuda
