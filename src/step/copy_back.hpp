// Internal to src/step: the copy-back of the host's bf16 parameters into the device's, piece by
// piece, as stock and overlap enqueue it (the deepspeed schedule copies each sub-group whole,
// as PyTorch's copy_ does: deepspeed/deepspeed_step.cpp).
#pragma once
#include <cstdint>

#include "step/device_buffer.hpp"
#include "zob/bf16.hpp"
#include "zob/device.hpp"

namespace zob::step_detail {

// stock and overlap: one piece of the bf16 parameters Adam + cast wrote on the host, copied
// into the device's parameters on the h2d queue between events copy_start/copy_end[piece].
void enqueue_bf16_copy_back_piece(Device& dev, const bf16* host_params, bf16* device_params,
                                  std::int64_t begin, std::int64_t len, std::int64_t piece,
                                  const Events& copy_start, const Events& copy_end);

}  // namespace zob::step_detail
