// Internal to src/step: device memory through a caching pool shaped like PyTorch's CUDA caching
// allocator (c10/cuda/CUDACachingAllocator.cpp), so that a schedule that allocates a parameter
// at its fetch and frees it at its release (as DeepSpeed does) pays no device allocation per
// fetch, and so that the arm reports the two figures PyTorch reports:
//  - allocated: the bytes of live blocks, each request rounded up to 512 B (round_size);
//    torch.cuda.max_memory_allocated, the figure DeepSpeed's GPU-peak column shows;
//  - reserved: the segments taken from the device (2 MiB for requests of <= 1 MiB; 20 MiB for
//    those of < 10 MiB; else the request rounded up to 2 MiB), which a freed block returns to
//    for reuse (best fit, split when the rest is >= 512 B in the small pool or > 1 MiB in the
//    large one, merged with free neighbours on free).
// A cap (--device-memory) bounds the reserved bytes as a device of that size would: on a miss
// the pool first returns its wholly free segments to the device, then refuses with the figures.
//
// Queues, as PyTorch's streams: every segment, and every block cut from it, belongs to the queue
// that asked for it (allocate_on; allocate: the compute queue), and only requests of that queue
// reuse it. A block freed with deallocate_after(ptr, q) where q is its own queue, which alone
// used it, is reusable at once, as PyTorch's free on the block's stream: later work on that
// queue runs after the work already enqueued there. Where q is another queue (PyTorch's
// record_stream), the block waits until the device has passed a fence recorded at that moment
// on every queue but its own (Device::event_done); the fences on the queues other than q cover
// work on them that nothing ordered before q's (a prefetch into a block that no module waited
// for), which H200 runs showed can race. A miss that the cap would refuse first waits for those
// fences on the host, then returns wholly free segments (of any queue).
#pragma once
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "zob/forwarding_device.hpp"

namespace zob::step_detail {

class CachingPoolDevice final : public ForwardingDevice {
 public:
  // cap_bytes: the most the pool may reserve from `inner` (0: no cap but the device's own).
  CachingPoolDevice(Device& inner, std::uint64_t cap_bytes);
  ~CachingPoolDevice() override;
  CachingPoolDevice(const CachingPoolDevice&) = delete;
  CachingPoolDevice& operator=(const CachingPoolDevice&) = delete;

  void* allocate(std::size_t bytes) override;  // a block of the compute queue
  void* allocate_on(Queue owner, std::size_t bytes);
  void deallocate(void* device) noexcept override;  // free now: no queue uses it any more
  void deallocate_after(void* device, Queue last_use);

  std::size_t memory_in_use() const override { return allocated_; }
  std::size_t memory_peak() const override { return allocated_peak_; }
  std::uint64_t reserved() const { return reserved_; }
  std::uint64_t reserved_peak() const { return reserved_peak_; }
  std::uint64_t cap() const { return cap_; }

  // PyTorch's rounding of a request and the segment a miss takes (exposed for the plan).
  static std::uint64_t round_size(std::uint64_t bytes);
  static std::uint64_t segment_size(std::uint64_t rounded);
  // The block a request gets from a new segment: the segment whole where the rest is too
  // small to split (large requests: <= 1 MiB left), which allocated bytes then count
  // (reduce_bucket_size 5e8 bf16: 1,000,341,504 B, as torch.cuda.memory_allocated shows).
  static std::uint64_t fresh_block_size(std::uint64_t bytes);

  // What the pool holds, per queue: reserved, allocated, free and the largest free block, and
  // the blocks still waiting for a fence. An out-of-memory error ends with it, as PyTorch's
  // names "reserved but unallocated", so a refusal shows whether the device was full of live
  // blocks or of cached ones that no request of that queue could use.
  std::string describe() const;

 protected:
  void before(const char* op) override { (void)op; }  // every other call goes straight through

 private:
  struct Block {
    char* ptr = nullptr;
    std::uint64_t size = 0;
    bool small = false;
    bool free = true;
    Queue queue = Queue::compute;  // the queue whose requests may reuse it
    Block* prev = nullptr;         // neighbours within one segment
    Block* next = nullptr;
  };
  struct Pending {  // freed by deallocate_after, reusable once every queue passed its fence
    Block* block;
    std::unique_ptr<DeviceEvent> fences[kQueueCount];
  };
  struct BySize {
    bool operator()(const Block* a, const Block* b) const {
      if (a->queue != b->queue) return a->queue < b->queue;
      if (a->small != b->small) return a->small < b->small;
      if (a->size != b->size) return a->size < b->size;
      return a->ptr < b->ptr;
    }
  };

  Block* new_block();
  Block* take(std::uint64_t rounded, Queue owner);
  Block* new_segment(std::uint64_t rounded, bool small, Queue owner);
  void collect_pending(bool wait);  // free the pending blocks whose fence passed (or all)
  bool has_pending() const;
  void release_free_segments();
  void free_block(Block* b);
  [[noreturn]] void refuse(std::uint64_t rounded, const std::string& why) const;
  // ZOB_POOL_TRACE=FILE: one line per request, free and segment (a diagnosis of reserved bytes
  // against allocated ones, replayable offline); off (nullptr) unless set.
  void trace(char op, const Block* b, Queue q) const;

  std::FILE* trace_ = nullptr;

  std::uint64_t cap_ = 0;
  std::set<Block*, BySize> free_;
  std::map<const void*, Block*> live_;
  std::vector<std::unique_ptr<Block>> blocks_;  // every Block object ever made (reused)
  std::vector<Block*> spare_blocks_;
  // In the order freed: each queue passes its fences in that order, so a scan stops at the
  // first block not yet released (O(1) per request, not O(pending)).
  std::deque<Pending> pending_;
  std::vector<std::unique_ptr<DeviceEvent>> spare_fences_;
  std::uint64_t allocated_ = 0, allocated_peak_ = 0, reserved_ = 0, reserved_peak_ = 0;
};

}  // namespace zob::step_detail
