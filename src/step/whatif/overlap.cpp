// The optimizer phase of --schedule overlap (see overlap.hpp for the order and why it is
// bitwise equal to stock).
#include "step/whatif/overlap.hpp"

#include <algorithm>
#include <string>

#include "step/copy_back.hpp"
#include "step/step_internal.hpp"
#include "zob/clock.hpp"
#include "zob/errors.hpp"
#include "zob/thread_pool.hpp"

namespace zob::step_detail {

std::vector<Piece> make_pieces(const ModelLayout& layout, std::int64_t sub_group_size,
                               std::int64_t chunk_elems) {
  if (sub_group_size <= 0 || chunk_elems <= 0) {
    throw UsageError("make_pieces: sub_group_size and chunk_elems must be > 0");
  }
  std::vector<Piece> out;
  const std::int64_t P = layout.total;
  std::size_t module = 0;
  for (std::int64_t sg = 0; sg < P; sg += sub_group_size) {
    const std::int64_t sg_end = std::min(P, sg + sub_group_size);
    for (std::int64_t off = sg; off < sg_end; off += chunk_elems) {
      Piece p{off, std::min(sg_end, off + chunk_elems), static_cast<std::int64_t>(out.size()), 0};
      while (module + 1 < layout.modules.size() &&
             layout.modules[module].offset + layout.modules[module].count <= off) {
        ++module;
      }
      p.first_module = static_cast<std::int64_t>(module);
      out.push_back(p);
    }
  }
  return out;
}

std::vector<std::vector<LandingPart>> landing_parts(const ModelLayout& layout,
                                                    const std::vector<Piece>& pieces) {
  std::vector<std::vector<LandingPart>> out(layout.modules.size());
  std::size_t p = pieces.size();  // pieces in stock order: ascending begins
  for (std::size_t j = layout.modules.size(); j-- > 0;) {
    const ModuleSlice& m = layout.modules[j];
    std::int64_t end = m.offset + m.count;
    while (end > m.offset) {
      while (p > 0 && pieces[p - 1].begin >= end) --p;
      // The piece holding end - 1 begins at pieces[p - 1].begin: cut there or at the module.
      const std::int64_t begin = p > 0 ? std::max(m.offset, pieces[p - 1].begin) : m.offset;
      out[j].push_back({begin, end - begin});
      end = begin;
    }
  }
  return out;
}

OverlapSchedule::OverlapSchedule(Device& dev, ThreadPool& pool, const ModelLayout& layout,
                                 std::vector<Piece> pieces, const OverlapBuffers& buffers,
                                 const OverlapEvents& events)
    : dev_(dev),
      pool_(pool),
      modules_(static_cast<std::int64_t>(layout.modules.size())),
      total_(layout.total),
      pieces_(std::move(pieces)),
      buf_(buffers),
      ev_(events) {
  // Gradients land head first (the highest offsets), the embedding last.
  std::reverse(pieces_.begin(), pieces_.end());
}

OverlapTimes OverlapSchedule::run(int t, Clock::time_point t0, StepSample& s) {
  OverlapTimes out;
  const bool copy_back = buf_.device_params != nullptr;
  std::int64_t landed = total_;  // elements >= landed are known to be on the host
  std::size_t next_part = 0;
  for (const Piece& p : pieces_) {
    const std::int64_t len = p.end - p.begin;
    std::string tag = "[";
    tag += std::to_string(p.index);
    tag += ']';
    // The d2h queue copies the parts in landing order; each wait is usually on a finished or
    // nearly finished copy.
    const auto tw = Clock::now();
    while (landed > p.begin) {
      dev_.event_synchronize((*ev_.part_end)[static_cast<std::int64_t>(next_part)]);
      landed = (*ev_.part_begin)[next_part++];
    }
    const auto ta = Clock::now();
    out.grad_wait_s += seconds_between(tw, ta);

    // Adam fused with the piece's cast to the host bf16 parameters: one pass (adam_cast).
    adam_step_cast(buf_.master + p.begin, buf_.grads + p.begin, buf_.exp_avg + p.begin,
                   buf_.exp_avg_sq + p.begin, buf_.host_bf16 + p.begin, len, t, hyper_, pool_);
    const auto tc = Clock::now();
    out.adam_s += seconds_between(ta, tc);
    s.spans.push_back(
        {"cpu_adam", "adam_cast" + tag, seconds_between(t0, ta), seconds_between(ta, tc)});
    if (copy_back) {
      // The lowest module of the piece is the last of its modules whose backward ends, and
      // its backward still reads the weights after its gradients left (OverlapEvents).
      dev_.queue_wait(Queue::h2d, (*ev_.task_end)[modules_ + p.first_module]);
      enqueue_bf16_copy_back_piece(dev_, buf_.host_bf16, buf_.device_params, p.begin, len, p.index,
                                   *ev_.copy_start, *ev_.copy_end);
      out.copy_back_s += seconds_between(tc, Clock::now());
    }
  }
  return out;
}

}  // namespace zob::step_detail
