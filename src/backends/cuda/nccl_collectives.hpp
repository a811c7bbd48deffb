// Collectives over CUDA device memory with NCCL, for the ranks of one arm (--gpus N, one GPU
// per rank). Semantics are those of zob/collectives.hpp, which the shared-memory collectives
// of the CPU device also follow, so both give the same bits:
// - all_gather and broadcast move bytes (ncclAllGather / ncclBroadcast of ncclUint8);
// - reduce_scatter is NOT ncclReduceScatter, whose summation order depends on the ring and
//   whose output type equals its input type: each rank receives the N pieces of its shard
//   (grouped ncclSend/ncclRecv, the bytes a ring reduce-scatter moves) and sums them in fp32
//   in rank order with one kernel, so results are deterministic and match the CPU device.
// - The communicator is nonblocking (ncclConfig_t::blocking = 0): no NCCL call can hang. Every
//   wait (init, enqueue, completion) polls with a deadline and watches the host communicator's
//   abort flag; on a peer's failure or a passed deadline the communicator is aborted
//   (ncclCommAbort stops its kernels) and the call throws CollectiveError.
// The unique id travels over the host communicator (rank 0 makes it, broadcast), so the
// rendezvous is fresh per arm and bounded by the host communicator's deadline.
#pragma once
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <string>

#include "backends/cuda/cuda_device.hpp"
#include "zob/collectives.hpp"

namespace zob::cuda {

struct NcclApi;

class NcclCollectives final : public Collectives {
 public:
  // Joins the communicator of host.size() ranks as rank host.rank(); device must outlive this.
  NcclCollectives(CudaDevice& device, Collectives& host, double timeout_s);
  ~NcclCollectives() override;
  NcclCollectives(const NcclCollectives&) = delete;
  NcclCollectives& operator=(const NcclCollectives&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_gather(const void* shard, void* full, std::size_t shard_bytes) override;
  void reduce_scatter(const void* in, ElemType in_type, float* out,
                      std::size_t shard_elems) override;
  // Ordered after queue q's work so far and before its later work, through events; no host
  // wait for the device (the step's plan).
  void enqueue_all_gather(Device& device, Queue q, const void* shard, void* full,
                          std::size_t shard_bytes) override;
  void enqueue_reduce_scatter(Device& device, Queue q, const void* in, ElemType in_type, float* out,
                              std::size_t shard_elems) override;
  void broadcast(void* data, std::size_t bytes, int root) override;
  void barrier() override;  // the host communicator's: device buffers need no barrier
  void check_peers() override;
  void abort(const std::string& reason) noexcept override;

  const std::string& nccl_version() const { return version_; }

 private:
  using Clock = std::chrono::steady_clock;
  void usable() const;
  // Checks an NCCL call's result; ncclInProgress is fine (waited for by wait_ready).
  void check(ncclResult_t r, const std::string& call);
  // Until the communicator is no longer ncclInProgress (nonblocking init / enqueue).
  void wait_ready(const std::string& what);
  // Until every operation on stream_ has completed.
  void wait_stream(const std::string& what);
  [[noreturn]] void fail(const std::string& why);
  void abort_comm() noexcept;
  bool finalize_within(double seconds) noexcept;
  void grow_staging(std::size_t bytes);
  cudaStream_t queue_stream(Device& device, Queue q) const;
  void join(cudaStream_t waiter, cudaStream_t done, cudaEvent_t event, const char* what);
  void destroy_stream_and_events() noexcept;
  // Enqueue on `stream`; false when there is nothing to do.
  bool launch_all_gather(const void* shard, void* full, std::size_t shard_bytes,
                         cudaStream_t stream);
  bool launch_reduce_scatter(const void* in, ElemType in_type, float* out, std::size_t shard_elems,
                             cudaStream_t stream);

  CudaDevice& device_;
  Collectives& host_;
  const NcclApi& api_;
  double timeout_s_;
  int rank_;
  int size_;
  std::string version_;
  ncclComm_t comm_ = nullptr;
  // Every collective, blocking or enqueued, runs on this one stream, in the order the host
  // issues them (the same on every rank), joined to the step's queue by the two events.
  cudaStream_t stream_ = nullptr;
  cudaEvent_t queue_done_ = nullptr, collective_done_ = nullptr;
  void* staging_ = nullptr;  // reduce_scatter's N received pieces
  std::size_t staging_bytes_ = 0;
  bool broken_ = false;
};

}  // namespace zob::cuda
