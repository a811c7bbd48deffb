// The copy-back pieces every schedule enqueues (copy_back.hpp).
#include "step/copy_back.hpp"

#include <algorithm>

namespace zob::step_detail {

void enqueue_bf16_copy_back_piece(Device& dev, const bf16* host_params, bf16* device_params,
                                  std::int64_t begin, std::int64_t len, std::int64_t piece,
                                  const Events& copy_start, const Events& copy_end) {
  dev.record(copy_start[piece], Queue::h2d);
  dev.copy_to_device(Queue::h2d, device_params + begin, host_params + begin,
                     static_cast<std::size_t>(len) * 2);
  dev.record(copy_end[piece], Queue::h2d);
}

void enqueue_copy_back_piece(Device& dev, const float* master, bf16* device_params, float* temp,
                             std::int64_t begin, std::int64_t len, std::int64_t piece,
                             const CopyBackEvents& ev, DeviceEvent* temp_free) {
  if (temp_free != nullptr) dev.queue_wait(Queue::h2d, *temp_free);
  dev.record((*ev.copy_start)[piece], Queue::h2d);
  dev.copy_to_device(Queue::h2d, temp, master + begin, static_cast<std::size_t>(len) * 4);
  dev.record((*ev.copy_end)[piece], Queue::h2d);
  dev.queue_wait(Queue::compute, (*ev.copy_end)[piece]);
  dev.record((*ev.cast_start)[piece], Queue::compute);
  dev.cast_f32_to_bf16(temp, device_params + begin, len, Queue::compute);
  dev.record((*ev.cast_end)[piece], Queue::compute);
}

void copy_back_range(Device& dev, const float* master, bf16* device_params, float* temp,
                     std::int64_t begin, std::int64_t end, std::int64_t chunk_elems,
                     std::int64_t first_piece, const CopyBackEvents& ev) {
  DeviceEvent* last_cast = nullptr;
  std::int64_t piece = first_piece;
  for (std::int64_t off = begin; off < end; off += chunk_elems, ++piece) {
    const std::int64_t len = std::min(chunk_elems, end - off);
    enqueue_copy_back_piece(dev, master, device_params, temp, off, len, piece, ev, last_cast);
    last_cast = &(*ev.cast_end)[piece];
  }
  if (last_cast != nullptr) dev.event_synchronize(*last_cast);
}

}  // namespace zob::step_detail
