// The caching pool of device memory (caching_pool.hpp): PyTorch's block sizes, segment sizes,
// split and merge rules, blocks per queue as its blocks per stream; fences where it records
// events for record_stream.
#include "step/caching_pool.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <utility>

#include "zob/errors.hpp"

namespace zob::step_detail {

namespace {

// c10/cuda/CUDACachingAllocator.cpp's constants.
constexpr std::uint64_t kMinBlockSize = 512;      // every request is rounded to a multiple
constexpr std::uint64_t kSmallSize = 1 << 20;     // largest "small" request
constexpr std::uint64_t kSmallBuffer = 2 << 20;   // a small segment
constexpr std::uint64_t kLargeBuffer = 20 << 20;  // a segment for requests of < kMinLargeAlloc
constexpr std::uint64_t kMinLargeAlloc = 10 << 20;
constexpr std::uint64_t kRoundLarge = 2 << 20;  // larger segments: multiples of this

std::string mib(std::uint64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

}  // namespace

std::uint64_t CachingPoolDevice::round_size(std::uint64_t bytes) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  return kMinBlockSize * ((bytes + kMinBlockSize - 1) / kMinBlockSize);
}

std::uint64_t CachingPoolDevice::segment_size(std::uint64_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((rounded + kRoundLarge - 1) / kRoundLarge);
}

std::uint64_t CachingPoolDevice::fresh_block_size(std::uint64_t bytes) {
  const std::uint64_t rounded = round_size(bytes);
  const std::uint64_t rest = segment_size(rounded) - rounded;
  const bool small = rounded <= kSmallSize;
  return (small ? rest >= kMinBlockSize : rest > kSmallSize) ? rounded : rounded + rest;
}

CachingPoolDevice::CachingPoolDevice(Device& inner, std::uint64_t cap_bytes)
    : ForwardingDevice(inner), cap_(cap_bytes) {
  if (const char* path = std::getenv("ZOB_POOL_TRACE"); path != nullptr && *path != '\0') {
    trace_ = std::fopen(path, "a");
    // Every arm's process appends to the one file: a header starts each pool's lines.
    if (trace_ != nullptr)
      std::fprintf(trace_, "# pool of process %d\n", static_cast<int>(::getpid()));
    if (trace_ == nullptr) {
      throw UsageError(
          fmt::format("ZOB_POOL_TRACE: cannot open {} for appending; give a "
                      "writable path or unset it",
                      path));
    }
  }
}

CachingPoolDevice::~CachingPoolDevice() {
  // Every owner has drained its queues (DrainQueuesOnExit) before its buffers went; a block
  // still live here belongs to an owner that outlived the pool, which would be a bug: its
  // segment goes back all the same, so nothing leaks.
  for (const auto& b : blocks_) {
    if (b->ptr != nullptr && b->prev == nullptr) inner().deallocate(b->ptr);
  }
  if (trace_ != nullptr) std::fclose(trace_);
}

void CachingPoolDevice::trace(char op, const Block* b, Queue q) const {
  // op: a (allocate), f (free now), p (free after a fence), c (a pending block collected),
  // s (a new segment), r (a segment returned); then the block's address, size and queue, and
  // the pool's allocated and reserved bytes after it.
  if (trace_ == nullptr) return;
  std::fprintf(trace_, "%c %p %llu %s %llu %llu\n", op, static_cast<const void*>(b->ptr),
               static_cast<unsigned long long>(b->size), to_string(q),
               static_cast<unsigned long long>(allocated_),
               static_cast<unsigned long long>(reserved_));
}

std::string CachingPoolDevice::describe() const {
  struct PerQueue {
    std::uint64_t reserved = 0, free = 0, largest_free = 0, pending = 0;
  };
  PerQueue q[kQueueCount];
  for (const auto& b : blocks_) {
    if (b->ptr == nullptr) continue;
    PerQueue& s = q[static_cast<int>(b->queue)];
    s.reserved += b->size;  // every block of a segment: the segment's bytes
    if (b->free) {
      s.free += b->size;
      s.largest_free = std::max(s.largest_free, b->size);
    }
  }
  for (const Pending& p : pending_) q[static_cast<int>(p.block->queue)].pending += p.block->size;
  std::string out =
      fmt::format("the pool: {} reserved, {} allocated", mib(reserved_), mib(allocated_));
  for (int i = 0; i < kQueueCount; ++i) {
    if (q[i].reserved == 0) continue;
    out += fmt::format("; {} queue: {} reserved, {} free (largest {}), {} waiting for a fence",
                       to_string(static_cast<Queue>(i)), mib(q[i].reserved), mib(q[i].free),
                       mib(q[i].largest_free), mib(q[i].pending));
  }
  return out;
}

void* CachingPoolDevice::allocate(std::size_t bytes) {
  return take(round_size(bytes), Queue::compute)->ptr;
}

void* CachingPoolDevice::allocate_on(Queue owner, std::size_t bytes) {
  return take(round_size(bytes), owner)->ptr;
}

void CachingPoolDevice::deallocate(void* device) noexcept {
  const auto it = live_.find(device);
  if (it == live_.end()) return;
  Block* b = it->second;
  live_.erase(it);
  allocated_ -= b->size;
  trace('f', b, b->queue);
  free_block(b);
}

void CachingPoolDevice::deallocate_after(void* device, Queue last_use) {
  const auto it = live_.find(device);
  if (it == live_.end()) return;
  Block* b = it->second;
  if (last_use == b->queue) {  // its own queue orders every later use after this one
    deallocate(device);
    return;
  }
  live_.erase(it);
  allocated_ -= b->size;  // PyTorch counts it free at once; only its reuse waits
  trace('p', b, last_use);
  Pending p{b, {}};
  for (int q = 0; q < kQueueCount; ++q) {
    if (static_cast<Queue>(q) == b->queue) continue;  // requests of that queue come after
    if (spare_fences_.empty()) {
      p.fences[q] = inner().create_event();
    } else {
      p.fences[q] = std::move(spare_fences_.back());
      spare_fences_.pop_back();
    }
    inner().record(*p.fences[q], static_cast<Queue>(q));
  }
  pending_.push_back(std::move(p));
}

void CachingPoolDevice::collect_pending(bool wait) {
  while (!pending_.empty()) {
    Pending& p = pending_.front();
    for (auto& f : p.fences) {
      if (f && wait) inner().event_synchronize(*f);
    }
    if (!wait) {
      for (auto& f : p.fences) {
        if (f && !inner().event_done(*f)) return;
      }
    }
    trace('c', p.block, p.block->queue);
    free_block(p.block);
    for (auto& f : p.fences) {
      if (f) spare_fences_.push_back(std::move(f));
    }
    pending_.pop_front();
  }
}

bool CachingPoolDevice::has_pending() const { return !pending_.empty(); }

CachingPoolDevice::Block* CachingPoolDevice::new_block() {
  if (spare_blocks_.empty()) return blocks_.emplace_back(std::make_unique<Block>()).get();
  Block* b = spare_blocks_.back();
  spare_blocks_.pop_back();
  *b = Block{};
  return b;
}

CachingPoolDevice::Block* CachingPoolDevice::take(std::uint64_t rounded, Queue owner) {
  const bool small = rounded <= kSmallSize;
  Block key;
  key.small = small;
  key.size = rounded;
  key.queue = owner;
  collect_pending(false);
  const auto find = [&]() -> Block* {
    const auto it = free_.lower_bound(&key);
    if (it == free_.end() || (*it)->small != small || (*it)->queue != owner) return nullptr;
    Block* found = *it;
    free_.erase(it);
    return found;
  };
  Block* b = find();
  if (b == nullptr && cap_ > 0 && has_pending() && reserved_ + segment_size(rounded) > cap_) {
    collect_pending(true);  // under the cap: wait for the freed blocks rather than refuse
    b = find();
  }
  if (b == nullptr) {
    try {
      b = new_segment(rounded, small, owner);
    } catch (const DeviceError& e) {
      // PyTorch's retry: wait for the blocks freed behind the queues, take one that fits, else
      // give every wholly free segment back and ask once more.
      if (e.kind() != DeviceErrorKind::out_of_memory) throw;
      collect_pending(true);
      b = find();
      if (b == nullptr) {
        release_free_segments();
        try {
          b = new_segment(rounded, small, owner);
        } catch (const DeviceError& again) {
          if (again.kind() != DeviceErrorKind::out_of_memory) throw;
          throw DeviceError(DeviceErrorKind::out_of_memory,
                            fmt::format("{} ({} for the {} queue; {})", again.what(), mib(rounded),
                                        to_string(owner), describe()));
        }
      }
    }
  }
  const std::uint64_t rest = b->size - rounded;
  if (small ? rest >= kMinBlockSize : rest > kSmallSize) {
    Block* r = new_block();
    r->ptr = b->ptr + rounded;
    r->size = rest;
    r->small = small;
    r->queue = owner;
    r->prev = b;
    r->next = b->next;
    if (b->next != nullptr) b->next->prev = r;
    b->next = r;
    b->size = rounded;
    free_.insert(r);
  }
  b->free = false;
  live_[b->ptr] = b;
  allocated_ += b->size;
  allocated_peak_ = std::max(allocated_peak_, allocated_);
  trace('a', b, owner);
  return b;
}

CachingPoolDevice::Block* CachingPoolDevice::new_segment(std::uint64_t rounded, bool small,
                                                         Queue owner) {
  const std::uint64_t size = segment_size(rounded);
  if (cap_ > 0 && reserved_ + size > cap_) release_free_segments();
  if (cap_ > 0 && reserved_ + size > cap_) refuse(rounded, "--device-memory");
  void* p = inner().allocate(static_cast<std::size_t>(size));
  reserved_ += size;
  reserved_peak_ = std::max(reserved_peak_, reserved_);
  Block* b = new_block();
  b->ptr = static_cast<char*>(p);
  b->size = size;
  b->small = small;
  b->queue = owner;
  trace('s', b, owner);
  return b;
}

void CachingPoolDevice::free_block(Block* b) {
  b->free = true;
  auto absorb = [&](Block* into, Block* gone) {  // `gone` directly follows `into`
    into->size += gone->size;
    into->next = gone->next;
    if (gone->next != nullptr) gone->next->prev = into;
    *gone = Block{};
    spare_blocks_.push_back(gone);
  };
  if (b->prev != nullptr && b->prev->free) {
    Block* p = b->prev;
    free_.erase(p);
    absorb(p, b);
    b = p;
  }
  if (b->next != nullptr && b->next->free) {
    Block* n = b->next;
    free_.erase(n);
    absorb(b, n);
  }
  free_.insert(b);
}

void CachingPoolDevice::release_free_segments() {
  for (auto it = free_.begin(); it != free_.end();) {
    Block* b = *it;
    if (b->prev != nullptr || b->next != nullptr) {
      ++it;
      continue;
    }
    inner().deallocate(b->ptr);
    reserved_ -= b->size;
    trace('r', b, b->queue);
    it = free_.erase(it);
    *b = Block{};
    spare_blocks_.push_back(b);
  }
}

void CachingPoolDevice::refuse(std::uint64_t rounded, const std::string& why) const {
  throw DeviceError(
      DeviceErrorKind::out_of_memory,
      fmt::format("out of device memory under {} {}: a block of {} needs a new segment of {}, "
                  "but {} is reserved ({} allocated); give a larger --device-memory or use a "
                  "smaller model, --batch or --seq",
                  why, mib(cap_), mib(rounded), mib(segment_size(rounded)), mib(reserved_),
                  mib(allocated_)));
}

}  // namespace zob::step_detail
