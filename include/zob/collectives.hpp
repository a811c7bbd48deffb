// Collective operations between the ranks of one arm (ZeRO-3 over several devices): one rank
// per device, each owning 1/N of every module's parameters. The step uses only this interface;
// implementations live next to their transport (src/collectives: processes on one host over
// POSIX shared memory; src/backends/cuda: NCCL over device memory, made by the device).
//
// Semantics shared by every implementation
// - Every rank calls the same collectives in the same order with the same sizes.
// - Buffers are memory the implementation can address: host memory for the shared-memory
//   implementation (which also serves ranks on the CPU device, whose memory is host memory),
//   device memory for a device's own (Device::make_rank_collectives). The caller makes sure
//   the inputs are complete before the call; outputs are complete when the call returns.
// - Reductions are deterministic: the fp32 sum over ranks in rank order 0, 1, ..., N-1,
//   starting from rank 0's value, so results are reproducible and N = 1 is the identity.
// - Every wait has a deadline. A peer that failed (or aborted) or a deadline that passed makes
//   the call throw CollectiveError naming the rank at fault; after that the communicator is
//   unusable (every later call throws at once).
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace zob {

class Device;
enum class Queue;  // device.hpp

enum class ElemType { bf16, f32 };
inline std::size_t elem_size(ElemType t) { return t == ElemType::bf16 ? 2 : 4; }

class CollectiveError : public std::runtime_error {
 public:
  // culprit: the rank that failed or that we waited for in vain; -1 unknown.
  CollectiveError(int culprit, const std::string& what)
      : std::runtime_error(what), culprit_(culprit) {}
  int culprit() const { return culprit_; }

 private:
  int culprit_;
};

class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // full[r * shard_bytes .. (r+1) * shard_bytes) = rank r's shard, for every r. Byte-wise, so
  // it gathers bf16 parameter shards and small fp32 values alike.
  virtual void all_gather(const void* shard, void* full, std::size_t shard_bytes) = 0;
  // in holds size() * shard_elems elements of in_type; out[i] (fp32, shard_elems) = the fp32
  // sum over ranks r = 0..N-1 of rank r's in[rank() * shard_elems + i].
  virtual void reduce_scatter(const void* in, ElemType in_type, float* out,
                              std::size_t shard_elems) = 0;
  // The step's forms of the two above: enqueued on queue q of `device` behind the work already
  // there, complete when q gets past them (a later event on q says so); the host does not wait
  // for the device (the launch itself may wait for the peers' launches). The inputs are
  // whatever q will have produced by then. The default runs the blocking form at once, which
  // is right for a device that completes every operation at enqueue time (the CPU device);
  // a communicator over an asynchronous device's memory must override both (NCCL does).
  virtual void enqueue_all_gather(Device& device, Queue q, const void* shard, void* full,
                                  std::size_t shard_bytes) {
    (void)device;
    (void)q;
    all_gather(shard, full, shard_bytes);
  }
  virtual void enqueue_reduce_scatter(Device& device, Queue q, const void* in, ElemType in_type,
                                      float* out, std::size_t shard_elems) {
    (void)device;
    (void)q;
    reduce_scatter(in, in_type, out, shard_elems);
  }
  // data (bytes) on every rank = data on root.
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Throws CollectiveError if a peer has failed or aborted; never waits. Lets a transport that
  // waits elsewhere (NCCL kernels on a stream) watch the flag of the one that carries failures.
  virtual void check_peers() {}
  // Tell every peer to fail fast (their waits throw naming this rank); never throws.
  virtual void abort(const std::string& reason) noexcept = 0;
};

// The identity communicator of one rank (N = 1), for the single-device path and the tests.
class SingleRankCollectives final : public Collectives {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_gather(const void* shard, void* full, std::size_t shard_bytes) override;
  void reduce_scatter(const void* in, ElemType in_type, float* out,
                      std::size_t shard_elems) override;
  void broadcast(void*, std::size_t, int) override {}
  void barrier() override {}
  void abort(const std::string&) noexcept override {}
};

}  // namespace zob
