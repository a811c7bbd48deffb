// Collectives for ranks that are processes on one host, over one POSIX shared-memory segment.
//
// The launcher creates the region, then forks the ranks, which inherit the mapping. The
// segment's name is fresh per arm run ("/zob-<pid>-<tag>-<nonce>") and is unlinked right after
// it is mapped, before any rank exists: no path, a SIGKILL included, can leave a segment behind
// in /dev/shm, and no rank can ever attach to a stale one.
//
// Synchronisation is a generation barrier on process-shared atomics, waiting on a futex with a
// deadline. Every wait also watches an abort flag in the header: the launcher raises it when a
// rank dies, a rank raises it when it fails or times out, and every waiter then throws at once.
#pragma once
#include <cstddef>
#include <string>

#include "zob/collectives.hpp"

namespace zob {

inline constexpr int kMaxRanks = 64;

class ShmRegion {
 public:
  // A zeroed region for `ranks` ranks with a data slot of slot_bytes each. `tag` goes into the
  // segment name (e.g. the arm). Throws DeviceError(runtime) naming the call on failure.
  static ShmRegion create(int ranks, std::size_t slot_bytes, const std::string& tag);
  ShmRegion() = default;
  ~ShmRegion();
  ShmRegion(ShmRegion&&) noexcept;
  ShmRegion& operator=(ShmRegion&&) noexcept;
  ShmRegion(const ShmRegion&) = delete;
  ShmRegion& operator=(const ShmRegion&) = delete;

  int ranks() const;
  std::size_t slot_bytes() const;
  const std::string& name() const { return name_; }  // as created (already unlinked)
  unsigned char* slot(int rank) const;

  // Marks the run failed because of `culprit` (the first caller wins) and wakes every waiter.
  void abort(int culprit, const std::string& reason) noexcept;
  bool aborted() const;
  int culprit() const;         // -1 when not aborted or unknown
  std::string reason() const;  // "" when not aborted

  struct Header;
  Header* header() const { return header_; }

 private:
  void release() noexcept;
  Header* header_ = nullptr;
  std::size_t bytes_ = 0;
  std::string name_;
};

class ShmCollectives final : public Collectives {
 public:
  // region must outlive this object. timeout_s > 0 bounds every single wait.
  ShmCollectives(ShmRegion& region, int rank, double timeout_s);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_gather(const void* shard, void* full, std::size_t shard_bytes) override;
  void reduce_scatter(const void* in, ElemType in_type, float* out,
                      std::size_t shard_elems) override;
  void broadcast(void* data, std::size_t bytes, int root) override;
  void barrier() override;
  void check_peers() override { check_abort(); }
  void abort(const std::string& reason) noexcept override;

 private:
  void check_abort() const;
  ShmRegion& region_;
  int rank_;
  int size_;
  double timeout_s_;
  unsigned entered_ = 0;  // barriers this rank has entered
};

}  // namespace zob
