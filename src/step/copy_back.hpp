// Internal to src/step: the copy-back of the fp32 master into the device's bf16 parameters,
// piece by piece, that every schedule enqueues (the what-if ArmRunner and DeepSpeed's
// executor alike), so it lives beside the other shared pieces and not in either schedule.
#pragma once
#include <cstdint>

#include "step/device_buffer.hpp"
#include "zob/bf16.hpp"
#include "zob/device.hpp"

namespace zob::step_detail {

// Copies [begin, end) of the fp32 master back to the device's bf16 parameters in pieces of
// chunk_elems through one fp32 temporary (docs/anatomy.md §3.1): the next piece's
// copy waits for the previous piece's cast; the host waits once, at the end. Piece p records
// events[k][first_piece + p] (k: copy start, copy end, cast start, cast end).
struct CopyBackEvents {
  const Events* copy_start;
  const Events* copy_end;
  const Events* cast_start;
  const Events* cast_end;
};
// One piece of it: [begin, begin + len) through `temp`, whose copy waits for temp_free (the
// cast that last read temp; null: none). The one copy-back of every schedule.
void enqueue_copy_back_piece(Device& dev, const float* master, bf16* device_params, float* temp,
                             std::int64_t begin, std::int64_t len, std::int64_t piece,
                             const CopyBackEvents& events, DeviceEvent* temp_free);
// stock and overlap: one piece of the bf16 parameters Adam + cast wrote on the host, copied
// into the device's parameters on the h2d queue between events copy_start/copy_end[piece].
void enqueue_bf16_copy_back_piece(Device& dev, const bf16* host_params, bf16* device_params,
                                  std::int64_t begin, std::int64_t len, std::int64_t piece,
                                  const Events& copy_start, const Events& copy_end);
void copy_back_range(Device& dev, const float* master, bf16* device_params, float* temp,
                     std::int64_t begin, std::int64_t end, std::int64_t chunk_elems,
                     std::int64_t first_piece, const CopyBackEvents& events);

}  // namespace zob::step_detail
