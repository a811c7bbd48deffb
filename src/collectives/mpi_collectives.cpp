#include "collectives/mpi_collectives.hpp"

#include <sched.h>
#include <time.h>

#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>

#include "collectives/reduce.hpp"

namespace zob {

namespace {

std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", rc);
  return std::string(text, static_cast<std::size_t>(std::max(len, 0)));
}

bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto* pa = static_cast<const unsigned char*>(a);
  const auto* pb = static_cast<const unsigned char*>(b);
  return pa < pb + b_bytes && pb < pa + a_bytes;
}

}  // namespace

MpiCollectives::MpiCollectives(MPI_Comm comm, double timeout_s, std::size_t piece_bytes)
    : timeout_s_(timeout_s),
      piece_bytes_(std::clamp<std::size_t>(piece_bytes, 1, static_cast<std::size_t>(INT_MAX))) {
  check_mpi(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
  // Errors come back as codes on this communicator, so they become CollectiveErrors with a
  // reason instead of MPI's default abort without one.
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
}

MpiCollectives::~MpiCollectives() {
  // A communicator with a collective still pending (a wait that timed out) cannot be freed.
  if (comm_ != MPI_COMM_NULL && !failed_) MPI_Comm_free(&comm_);
}

void MpiCollectives::check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  failed_ = true;
  throw CollectiveError(
      -1, fmt::format("rank {} of {}: {} failed: {}", rank_, size_, call, mpi_error_text(rc)));
}

void MpiCollectives::check_peers() {
  if (failed_) {
    throw CollectiveError(-1, fmt::format("rank {}: the MPI collectives failed before; the run "
                                          "cannot go on",
                                          rank_));
  }
}

void MpiCollectives::wait(MPI_Request& request, const char* what) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
  for (int polls = 0;; ++polls) {
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    if (Clock::now() > deadline) {
      failed_ = true;
      throw CollectiveError(-1, fmt::format("rank {} of {}: {} over MPI did not complete within "
                                            "{:g} s: a peer failed or hangs",
                                            rank_, size_, what, timeout_s_));
    }
    // Short collectives complete within microseconds; longer waits must not eat a core the
    // peers' (or our own) Adam threads could use.
    if (polls < 1000) {
      sched_yield();
    } else {
      const timespec pause{0, 50'000};
      nanosleep(&pause, nullptr);
    }
  }
}

void MpiCollectives::alltoall_blocks(const void* send, void* recv, std::size_t block_bytes,
                                     bool gather) {
  const auto* s = static_cast<const unsigned char*>(send);
  auto* r = static_cast<unsigned char*>(recv);
  const char* what = gather ? "all_gather" : "reduce_scatter";
  if (block_bytes <= piece_bytes_) {
    const int n = static_cast<int>(block_bytes);
    MPI_Request req;
    if (gather) {
      check_mpi(MPI_Iallgather(s, n, MPI_BYTE, r, n, MPI_BYTE, comm_, &req), "MPI_Iallgather");
    } else {
      check_mpi(MPI_Ialltoall(s, n, MPI_BYTE, r, n, MPI_BYTE, comm_, &req), "MPI_Ialltoall");
    }
    wait(req, what);
    return;
  }
  // Piece [off, off + len) of every block: a type of len bytes whose extent is a whole block,
  // so element k of it lands in block k.
  for (std::size_t off = 0; off < block_bytes; off += piece_bytes_) {
    const std::size_t len = std::min(piece_bytes_, block_bytes - off);
    MPI_Datatype piece, strided;
    check_mpi(MPI_Type_contiguous(static_cast<int>(len), MPI_BYTE, &piece), "MPI_Type_contiguous");
    check_mpi(MPI_Type_create_resized(piece, 0, static_cast<MPI_Aint>(block_bytes), &strided),
              "MPI_Type_create_resized");
    MPI_Type_free(&piece);
    check_mpi(MPI_Type_commit(&strided), "MPI_Type_commit");
    MPI_Request req;
    int rc;
    if (gather) {
      rc = MPI_Iallgather(s + off, static_cast<int>(len), MPI_BYTE, r + off, 1, strided, comm_,
                          &req);
    } else {
      rc = MPI_Ialltoall(s + off, 1, strided, r + off, 1, strided, comm_, &req);
    }
    if (rc != MPI_SUCCESS) MPI_Type_free(&strided);
    check_mpi(rc, gather ? "MPI_Iallgather" : "MPI_Ialltoall");
    try {
      wait(req, what);
    } catch (...) {
      MPI_Type_free(&strided);
      throw;
    }
    MPI_Type_free(&strided);
  }
}

void MpiCollectives::all_gather(const void* shard, void* full, std::size_t shard_bytes) {
  check_peers();
  if (shard_bytes == 0) return;
  const std::size_t total = shard_bytes * static_cast<std::size_t>(size_);
  if (overlaps(shard, shard_bytes, full, total)) {  // MPI forbids aliased buffers
    const auto* s = static_cast<const unsigned char*>(shard);
    std::vector<unsigned char> copy(s, s + shard_bytes);
    alltoall_blocks(copy.data(), full, shard_bytes, true);
    return;
  }
  alltoall_blocks(shard, full, shard_bytes, true);
}

void MpiCollectives::reduce_scatter(const void* in, ElemType in_type, float* out,
                                    std::size_t shard_elems) {
  check_peers();
  if (shard_elems == 0) return;
  const std::size_t block = shard_elems * elem_size(in_type);
  scratch_.resize(block * static_cast<std::size_t>(size_));
  alltoall_blocks(in, scratch_.data(), block, false);
  std::vector<const void*> parts(static_cast<std::size_t>(size_));
  for (int r = 0; r < size_; ++r)
    parts[static_cast<std::size_t>(r)] = scratch_.data() + block * static_cast<std::size_t>(r);
  collectives_detail::sum_in_rank_order(parts.data(), size_, in_type, out, shard_elems);
}

void MpiCollectives::broadcast(void* data, std::size_t bytes, int root) {
  check_peers();
  if (root < 0 || root >= size_) {
    throw CollectiveError(-1,
                          fmt::format("broadcast from rank {} of {}: no such rank", root, size_));
  }
  auto* p = static_cast<unsigned char*>(data);
  for (std::size_t off = 0; off < bytes; off += piece_bytes_) {
    const std::size_t len = std::min(piece_bytes_, bytes - off);
    MPI_Request req;
    check_mpi(MPI_Ibcast(p + off, static_cast<int>(len), MPI_BYTE, root, comm_, &req),
              "MPI_Ibcast");
    wait(req, "broadcast");
  }
}

void MpiCollectives::barrier() {
  check_peers();
  MPI_Request req;
  check_mpi(MPI_Ibarrier(comm_, &req), "MPI_Ibarrier");
  wait(req, "barrier");
}

void MpiCollectives::abort(const std::string& reason) noexcept {
  try {
    const std::string me = fmt::format("rank {} of {}: ", rank_, size_);
    // The reason may be one of our own CollectiveErrors, which already name the rank.
    const std::string why = reason.rfind(me, 0) == 0 ? reason.substr(me.size()) : reason;
    std::string line = fmt::format(
        "zero3-offload-bench: error: {}{}; ending every rank "
        "(MPI_Abort)",
        me, why);
    for (char& c : line) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), stderr);
  } catch (...) {
    std::fputs("zero3-offload-bench: error: a rank failed; ending every rank (MPI_Abort)\n",
               stderr);
  }
  std::fflush(stderr);
  std::fflush(stdout);
  MPI_Abort(comm_ != MPI_COMM_NULL ? comm_ : MPI_COMM_WORLD, 1);
}

}  // namespace zob
