// The bf16 copy-back piece stock and overlap enqueue (copy_back.hpp).
#include "step/copy_back.hpp"

namespace zob::step_detail {

void enqueue_bf16_copy_back_piece(Device& dev, const bf16* host_params, bf16* device_params,
                                  std::int64_t begin, std::int64_t len, std::int64_t piece,
                                  const Events& copy_start, const Events& copy_end) {
  dev.record(copy_start[piece], Queue::h2d);
  dev.copy_to_device(Queue::h2d, device_params + begin, host_params + begin,
                     static_cast<std::size_t>(len) * 2);
  dev.record(copy_end[piece], Queue::h2d);
}

}  // namespace zob::step_detail
