// Internal to src/step: the optimizer phase of --schedule overlap.
//
// Stock (docs/anatomy.md §3) waits for every gradient, then per sub-group runs Adam + cast and
// copies the sub-group back. Overlap runs the same element-wise math in another order:
//  (a) pieces (each sub-group split into chunk_elems, the stock copy-back pieces) are taken
//      in the order their gradients land on the host - head first, layers in reverse, the
//      embedding last - and each waits only on the D2H of its own elements (landing_parts);
//  (b) a piece's Adam is fused with its cast to the host bf16 parameters (adam_step_cast);
//  (c) copy_back loop: then the piece's bf16 are copied straight into the device's parameters
//      (H2D, no device temporary or cast; the copy waits on the device for the backward of
//      the modules it overwrites) and the host goes on with the next piece's Adam.
// Adam and the casts are element-wise and bitwise independent of how a range is split, so
// the results equal stock bit for bit. With unregistered memory each copy blocks the host
// thread while the driver stages it, so (c) mostly disappears: that is what the tool measures.
#pragma once
#include <chrono>
#include <cstdint>
#include <vector>

#include "step/device_buffer.hpp"
#include "zob/adam.hpp"
#include "zob/config.hpp"
#include "zob/model.hpp"
#include "zob/result.hpp"

namespace zob {
class ThreadPool;
}

namespace zob::step_detail {

// One copy-back piece: [begin, end) of the flat parameter array, numbered like stock's.
struct Piece {
  std::int64_t begin = 0, end = 0;
  std::int64_t index = 0;         // stock numbering (sub-group order, then offset)
  std::int64_t first_module = 0;  // lowest module the piece covers
};

// Every piece of every sub-group, in stock order.
std::vector<Piece> make_pieces(const ModelLayout& layout, std::int64_t sub_group_size,
                               std::int64_t chunk_elems);

// One copy of a module's gradients to the host: [begin, begin + len) of the flat array.
struct LandingPart {
  std::int64_t begin = 0, len = 0;
};
// The gradients' D2H of each module cut where a piece begins, from its highest offset down: a
// piece's Adam then waits for its own elements, not for the whole module (the head of a
// synthetic h4096 model is 131 M parameters, 10 ms of D2H before the first piece could start).
// Across modules in landing order (M-1 first) the parts' begins descend, ending at 0.
std::vector<std::vector<LandingPart>> landing_parts(const ModelLayout& layout,
                                                    const std::vector<Piece>& pieces);

struct OverlapBuffers {
  float* master = nullptr;       // host fp32 master
  const float* grads = nullptr;  // host fp32 gradients
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
  bf16* host_bf16 = nullptr;      // pinned bf16 params (Adam + cast writes them)
  bf16* device_params = nullptr;  // copy_back: device bf16 params; else null
};

struct OverlapEvents {
  // Per landing part, in landing order: its copy ended (d2h), and where it begins.
  const Events* part_end = nullptr;
  const std::vector<std::int64_t>* part_begin = nullptr;
  const Events* copy_start = nullptr;  // per piece (stock numbering); copy_back only
  const Events* copy_end = nullptr;
  // On compute, per task: module j's backward ends at modules + j. A module's gradients land
  // before its backward has read its weights for the last time (the input gradient follows the
  // weight gradient), so a piece's copy into the device's parameters waits for that end.
  const Events* task_end = nullptr;
};

struct OverlapTimes {
  double grad_wait_s = 0;  // host blocked on gradient events
  double adam_s = 0;       // offload_param: Adam fused with the host cast
  double copy_back_s = 0;  // host time enqueuing copy-backs (blocking when unregistered)
};

class OverlapSchedule {
 public:
  OverlapSchedule(Device& dev, ThreadPool& pool, const ModelLayout& layout,
                  std::vector<Piece> pieces, const OverlapBuffers& buffers,
                  const OverlapEvents& events);
  // The optimizer phase of Adam step t. Returns with copies and casts still in flight: the
  // caller's one wait at the end of the step covers them. Spans go to s, relative to t0.
  OverlapTimes run(int t, std::chrono::steady_clock::time_point t0, StepSample& s);

 private:
  Device& dev_;
  ThreadPool& pool_;
  std::int64_t modules_;
  std::int64_t total_;         // elements of the flat array
  std::vector<Piece> pieces_;  // processing order: descending offset
  OverlapBuffers buf_;
  OverlapEvents ev_;
  AdamHyper hyper_;
};

}  // namespace zob::step_detail
