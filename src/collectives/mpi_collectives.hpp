// Collectives over MPI (host memory), for ranks started by mpirun, on one host or several
// (--launcher mpi). Only built when CMake finds MPI (target zob_mpi); zob_core never needs it.
//
// Same semantics as every Collectives (include/zob/collectives.hpp), the reduction included:
// reduce_scatter moves the pieces with an all-to-all and sums them here with the one
// summation every implementation uses (collectives_detail::sum_in_rank_order), so the results
// are bitwise those of the shared-memory collectives. Every wait is a nonblocking MPI call
// polled against a deadline. MPI cannot cancel a collective that a peer never joins, so a
// failure ends the whole job: abort() prints the reason and calls MPI_Abort.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

#include "zob/collectives.hpp"

namespace zob {

class MpiCollectives final : public Collectives {
 public:
  // Works on a duplicate of `comm` (so no other MPI traffic can match its calls); MPI must be
  // initialised and stay so until this object is gone. timeout_s > 0 bounds every single wait.
  // Buffers move in messages of at most piece_bytes (MPI counts are ints; tests lower it to
  // exercise the piecewise path).
  static constexpr std::size_t kDefaultPieceBytes = std::size_t{1} << 30;
  MpiCollectives(MPI_Comm comm, double timeout_s, std::size_t piece_bytes = kDefaultPieceBytes);
  ~MpiCollectives() override;
  MpiCollectives(const MpiCollectives&) = delete;
  MpiCollectives& operator=(const MpiCollectives&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_gather(const void* shard, void* full, std::size_t shard_bytes) override;
  void reduce_scatter(const void* in, ElemType in_type, float* out,
                      std::size_t shard_elems) override;
  void broadcast(void* data, std::size_t bytes, int root) override;
  void barrier() override;
  void check_peers() override;
  // Prints "zero3-offload-bench: error: rank R: <reason>" and ends every rank (MPI_Abort).
  void abort(const std::string& reason) noexcept override;

 private:
  void wait(MPI_Request& request, const char* what);
  void check_mpi(int rc, const char* call);
  // Each rank's block is `block_bytes` long at stride block_bytes, moved in pieces that fit
  // MPI's int counts: op(send piece, recv piece, one-element type of the piece).
  void alltoall_blocks(const void* send, void* recv, std::size_t block_bytes, bool gather);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
  double timeout_s_;
  std::size_t piece_bytes_;
  bool failed_ = false;
  std::vector<unsigned char> scratch_;  // reduce_scatter: every rank's piece of my shard
};

}  // namespace zob
