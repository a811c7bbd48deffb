#include "collectives/shm_collectives.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <new>
#include <utility>

#include "collectives/reduce.hpp"
#include "zob/errors.hpp"
#include "zob/system.hpp"

namespace zob {

struct ShmRegion::Header {
  std::uint32_t magic;
  std::int32_t ranks;
  std::uint64_t slot_bytes;
  std::uint64_t data_offset;
  alignas(64) std::atomic<std::uint32_t> aborted;
  std::atomic<std::int32_t> culprit;
  std::atomic<std::uint32_t> reason_ready;
  char reason[512];
  alignas(64) std::atomic<std::uint32_t> arrived;
  alignas(64) std::atomic<std::uint32_t> generation;          // the futex word
  alignas(64) std::atomic<std::uint32_t> entered[kMaxRanks];  // barriers entered, per rank
};
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

namespace {

constexpr std::uint32_t kMagic = 0x7a6f6231;  // "zob1"

long futex(std::atomic<std::uint32_t>* word, int op, std::uint32_t val, const timespec* ts) {
  // Not FUTEX_PRIVATE: the word lives in memory shared between processes.
  return ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), op, val, ts, nullptr, 0);
}

std::string errno_text(int e) { return std::strerror(e); }

}  // namespace

ShmRegion ShmRegion::create(int ranks, std::size_t slot_bytes, const std::string& tag) {
  if (ranks < 1 || ranks > kMaxRanks || slot_bytes == 0) {
    throw UsageError(
        fmt::format("shared-memory collectives: {} ranks (1..{}) and a slot of {} "
                    "bytes (> 0) requested",
                    ranks, kMaxRanks, slot_bytes));
  }
  std::uint64_t nonce = 0;
  if (::getrandom(&nonce, sizeof nonce, 0) != static_cast<ssize_t>(sizeof nonce)) {
    nonce = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }
  ShmRegion r;
  r.name_ = fmt::format("/zob-{}-{}-{:016x}", ::getpid(), tag, nonce);
  const std::size_t data_offset = round_up_to_page(sizeof(Header));
  const std::size_t slot = (slot_bytes + 63) / 64 * 64;
  r.bytes_ = data_offset + slot * static_cast<std::size_t>(ranks);
  const int fd = ::shm_open(r.name_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw DeviceError(DeviceErrorKind::runtime,
                      fmt::format("shm_open({}) for the ranks' collectives failed: {}; check that "
                                  "/dev/shm is mounted and writable",
                                  r.name_, errno_text(errno)));
  }
  void* p = MAP_FAILED;
  int err = 0;
  if (::ftruncate(fd, static_cast<off_t>(r.bytes_)) != 0) {
    err = errno;
  } else {
    p = ::mmap(nullptr, r.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) err = errno;
  }
  // Unlinked at once, on success and failure alike: the mapping (inherited by the forked
  // ranks) keeps the memory; the name is never needed again.
  ::shm_unlink(r.name_.c_str());
  ::close(fd);
  if (p == MAP_FAILED) {
    throw DeviceError(DeviceErrorKind::out_of_memory,
                      fmt::format("ftruncate/mmap of {} bytes of shared memory ({}) for the ranks' "
                                  "collectives failed: {}; /dev/shm may be too small (docker: "
                                  "--shm-size)",
                                  r.bytes_, r.name_, errno_text(err)));
  }
  r.header_ = new (p) Header{};
  r.header_->magic = kMagic;
  r.header_->ranks = ranks;
  r.header_->slot_bytes = slot;
  r.header_->data_offset = data_offset;
  r.header_->culprit.store(-1);
  return r;
}

ShmRegion::~ShmRegion() { release(); }
ShmRegion::ShmRegion(ShmRegion&& o) noexcept
    : header_(std::exchange(o.header_, nullptr)), bytes_(o.bytes_), name_(std::move(o.name_)) {}
ShmRegion& ShmRegion::operator=(ShmRegion&& o) noexcept {
  if (this != &o) {
    release();
    header_ = std::exchange(o.header_, nullptr);
    bytes_ = o.bytes_;
    name_ = std::move(o.name_);
  }
  return *this;
}
void ShmRegion::release() noexcept {
  if (header_ != nullptr) ::munmap(header_, bytes_);
  header_ = nullptr;
}

int ShmRegion::ranks() const { return header_->ranks; }
std::size_t ShmRegion::slot_bytes() const { return header_->slot_bytes; }
unsigned char* ShmRegion::slot(int rank) const {
  return reinterpret_cast<unsigned char*>(header_) + header_->data_offset +
         static_cast<std::size_t>(rank) * header_->slot_bytes;
}

void ShmRegion::abort(int culprit, const std::string& reason) noexcept {
  if (header_ == nullptr) return;
  std::int32_t none = -1;
  std::uint32_t zero = 0;
  if (header_->aborted.compare_exchange_strong(zero, 1)) {
    header_->culprit.compare_exchange_strong(none, culprit);
    const std::size_t n = std::min(reason.size(), sizeof header_->reason - 1);
    std::memcpy(header_->reason, reason.data(), n);
    header_->reason[n] = '\0';
    header_->reason_ready.store(1);
  }
  futex(&header_->generation, FUTEX_WAKE, INT_MAX, nullptr);
}

bool ShmRegion::aborted() const { return header_ != nullptr && header_->aborted.load() != 0; }
int ShmRegion::culprit() const { return aborted() ? header_->culprit.load() : -1; }
std::string ShmRegion::reason() const {
  if (!aborted() || header_->reason_ready.load() == 0) return aborted() ? "aborted" : "";
  return header_->reason;
}

ShmCollectives::ShmCollectives(ShmRegion& region, int rank, double timeout_s)
    : region_(region), rank_(rank), size_(region.ranks()), timeout_s_(timeout_s) {
  if (rank < 0 || rank >= size_ || !(timeout_s > 0)) {
    throw UsageError(
        fmt::format("shared-memory collectives: rank {} of {} with a timeout of "
                    "{} s (must be > 0)",
                    rank, size_, timeout_s));
  }
}

void ShmCollectives::check_abort() const {
  if (!region_.aborted()) return;
  const int c = region_.culprit();
  throw CollectiveError(c, fmt::format("rank {}: stopped because {}", rank_, region_.reason()));
}

void ShmCollectives::abort(const std::string& reason) noexcept { region_.abort(rank_, reason); }

void ShmCollectives::barrier() {
  check_abort();
  ShmRegion::Header* h = region_.header();
  const std::uint32_t gen = h->generation.load();
  ++entered_;
  h->entered[rank_].store(entered_);
  if (h->arrived.fetch_add(1) + 1 == static_cast<std::uint32_t>(size_)) {
    // Reset before the release: nobody can arrive at the next barrier before it.
    h->arrived.store(0);
    h->generation.fetch_add(1);
    futex(&h->generation, FUTEX_WAKE, INT_MAX, nullptr);
    return;
  }
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s_));
  while (h->generation.load() == gen) {
    check_abort();
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) {
      int late = -1;
      for (int r = 0; r < size_ && late < 0; ++r) {
        if (h->entered[r].load() < entered_) late = r;
      }
      const std::string why = fmt::format(
          "rank {} did not reach barrier {} of the collectives within {:g} s (--timeout)", late,
          entered_, timeout_s_);
      region_.abort(late, why);
      throw CollectiveError(late, fmt::format("rank {}: {}", rank_, why));
    }
    // Short slices: a lost wake-up costs at most 100 ms, never the whole deadline.
    const auto slice = std::min<Clock::duration>(left, std::chrono::milliseconds(100));
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(slice).count();
    const timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    futex(&h->generation, FUTEX_WAIT, gen, &ts);  // EAGAIN / ETIMEDOUT / EINTR: loop re-checks
  }
  check_abort();
}

void ShmCollectives::all_gather(const void* shard, void* full, std::size_t shard_bytes) {
  const std::size_t cap = region_.slot_bytes();
  const auto* src = static_cast<const unsigned char*>(shard);
  auto* dst = static_cast<unsigned char*>(full);
  for (std::size_t off = 0; off < shard_bytes; off += cap) {
    const std::size_t len = std::min(cap, shard_bytes - off);
    std::memcpy(region_.slot(rank_), src + off, len);
    barrier();
    for (int r = 0; r < size_; ++r) {
      std::memcpy(dst + static_cast<std::size_t>(r) * shard_bytes + off, region_.slot(r), len);
    }
    barrier();  // the slots may be overwritten only after everyone has read them
  }
}

void ShmCollectives::reduce_scatter(const void* in, ElemType in_type, float* out,
                                    std::size_t shard_elems) {
  const std::size_t es = elem_size(in_type);
  const std::size_t n = static_cast<std::size_t>(size_);
  // Per chunk, every rank's slot holds n consecutive pieces of `chunk` elements: piece d is
  // the part destined for rank d.
  const std::size_t chunk = std::max<std::size_t>(1, region_.slot_bytes() / (n * es));
  const auto* src = static_cast<const unsigned char*>(in);
  const void* parts[kMaxRanks];
  for (std::size_t off = 0; off < shard_elems; off += chunk) {
    const std::size_t len = std::min(chunk, shard_elems - off);
    unsigned char* mine = region_.slot(rank_);
    for (std::size_t d = 0; d < n; ++d) {
      std::memcpy(mine + d * len * es, src + (d * shard_elems + off) * es, len * es);
    }
    barrier();
    for (int r = 0; r < size_; ++r) {
      parts[r] = region_.slot(r) + static_cast<std::size_t>(rank_) * len * es;
    }
    collectives_detail::sum_in_rank_order(parts, size_, in_type, out + off, len);
    barrier();
  }
}

void ShmCollectives::broadcast(void* data, std::size_t bytes, int root) {
  if (root < 0 || root >= size_) {
    throw UsageError(fmt::format("broadcast from rank {} of {}", root, size_));
  }
  const std::size_t cap = region_.slot_bytes();
  auto* p = static_cast<unsigned char*>(data);
  for (std::size_t off = 0; off < bytes; off += cap) {
    const std::size_t len = std::min(cap, bytes - off);
    if (rank_ == root) std::memcpy(region_.slot(root), p + off, len);
    barrier();
    if (rank_ != root) std::memcpy(p + off, region_.slot(root), len);
    barrier();
  }
}

}  // namespace zob
