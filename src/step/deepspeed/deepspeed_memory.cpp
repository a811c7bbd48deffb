// Which modules hold fetched parameters, and one step's device allocations walked as the
// runner makes them (deepspeed_memory.hpp).
#include "step/deepspeed/deepspeed_memory.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <unistd.h>

#include <fmt/format.h>

#include "step/caching_pool.hpp"
#include "zob/errors.hpp"

namespace zob::step_detail {

DsResidency::DsResidency(const DeepSpeedPlan& plan, std::int64_t modules)
    : plan_(&plan),
      fetched_(static_cast<std::size_t>(modules), 0),
      tensor_live_(plan.tensors.size(), false) {
  for (const DsTensor& t : plan.tensors) {
    if (!t.persistent) ++fetched_[static_cast<std::size_t>(t.module)];
  }
}

std::vector<int> DsResidency::make_live(const std::vector<int>& ids) {
  std::vector<int> out;
  for (int id : ids) {
    const DsTensor& t = plan_->tensors[static_cast<std::size_t>(id)];
    if (t.persistent || tensor_live_[static_cast<std::size_t>(id)]) continue;
    tensor_live_[static_cast<std::size_t>(id)] = true;
    out.push_back(id);
  }
  return out;
}

bool DsResidency::live(int id) const {
  return plan_->tensors[static_cast<std::size_t>(id)].persistent ||
         tensor_live_[static_cast<std::size_t>(id)];
}

std::vector<int> DsResidency::release(const std::vector<int>& ids) {
  std::vector<int> out;
  for (int id : ids) {
    const DsTensor& t = plan_->tensors[static_cast<std::size_t>(id)];
    if (t.persistent || !tensor_live_[static_cast<std::size_t>(id)]) continue;
    tensor_live_[static_cast<std::size_t>(id)] = false;
    out.push_back(id);
  }
  return out;
}

std::vector<int> DsResidency::release_all() {
  std::vector<int> ids;
  for (std::size_t id = 0; id < tensor_live_.size(); ++id) {
    if (tensor_live_[id]) ids.push_back(static_cast<int>(id));
  }
  return release(ids);
}

std::uint64_t ds_persistent_bytes(const DeepSpeedPlan& plan, const ModelLayout& layout) {
  const DsResidency res(plan, static_cast<std::int64_t>(layout.modules.size()));
  std::uint64_t slots = 0, blocks = 0;
  for (const DsTensor& t : plan.tensors) {
    if (t.persistent && !res.resident(t.module)) slots += 2 * static_cast<std::uint64_t>(t.count);
  }
  for (std::size_t m = 0; m < layout.modules.size(); ++m) {
    if (res.resident(static_cast<std::int64_t>(m))) {
      blocks += CachingPoolDevice::fresh_block_size(
          2 * static_cast<std::uint64_t>(layout.modules[m].count));
    }
  }
  return (slots > 0 ? CachingPoolDevice::fresh_block_size(slots) : 0) + blocks;
}

std::int64_t ds_bucket_elems(const DeepSpeedPlan& plan, const DeepSpeedKnobs& knobs) {
  std::int64_t largest = 0;
  for (const DsTensor& t : plan.tensors) largest = std::max(largest, t.count);
  return std::max(knobs.reduce_bucket, largest);
}

std::int64_t ds_norm_view_elems(std::int64_t n) {
  constexpr std::int64_t kNormBuffer = 250'000'000;  // _constant_buffered_norm2's buffer_size
  return std::min(n, kNormBuffer);
}

const char* ds_step_part_name(DsStepPart p) {
  switch (p) {
    case DsStepPart::parameters: return "fetched parameters";
    case DsStepPart::gradients: return "module gradients";
    case DsStepPart::activations: return "saved activations";
    case DsStepPart::scratch: return "module scratch";
    case DsStepPart::logits: return "logits";
    case DsStepPart::bucket_copy: return "bucket copy";
    case DsStepPart::partition_copies: return "gradient partition copies";
    case DsStepPart::norm_views: return "norm views (fp64)";
    case DsStepPart::norms: return "norms";
    case DsStepPart::fp32_casts: return "fp32 gradient casts";
    case DsStepPart::count: break;
  }
  return "?";
}

namespace {

// ZOB_PLAN_TRACE=FILE: the walk's blocks, one line each, "a|f SIZE ALLOCATED PART" (the pool's
// rounded size, the walk's allocated bytes after it, the part's name), to set beside the run's
// ZOB_POOL_TRACE (bench/pool_trace_compare.py). Appended, as ZOB_POOL_TRACE is: a header starts
// each walk (a dry run plans more than once: the pre-flight, each point, what would fit).
std::FILE* plan_trace() {
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  static const std::unique_ptr<std::FILE, Closer> file =
      []() -> std::unique_ptr<std::FILE, Closer> {
    const char* path = std::getenv("ZOB_PLAN_TRACE");
    if (path == nullptr || *path == '\0') return nullptr;
    std::unique_ptr<std::FILE, Closer> f(std::fopen(path, "a"));
    if (!f) {
      throw UsageError(fmt::format(
          "ZOB_PLAN_TRACE: cannot open {} for appending; give a writable path or unset it", path));
    }
    return f;
  }();
  return file.get();
}

// The pool's allocated bytes, per part, as the runner's blocks come and go; at_peak is the
// split at the first moment the total reached its peak.
struct Walk {
  std::uint64_t now = 0, peak = 0;
  std::array<std::uint64_t, kDsStepParts> parts{}, at_peak{};
  std::FILE* trace = plan_trace();
  Walk() {
    if (trace) std::fprintf(trace, "# walk of process %d\n", static_cast<int>(::getpid()));
  }
  void take(DsStepPart p, std::uint64_t bytes) {
    const std::uint64_t b = CachingPoolDevice::fresh_block_size(bytes);
    now += b;
    parts[static_cast<std::size_t>(p)] += b;
    if (now > peak) {
      peak = now;
      at_peak = parts;
    }
    log('a', b, p);
  }
  void give(DsStepPart p, std::uint64_t bytes) {
    const std::uint64_t b = CachingPoolDevice::fresh_block_size(bytes);
    now -= b;
    parts[static_cast<std::size_t>(p)] -= b;
    log('f', b, p);
  }
  void log(char op, std::uint64_t b, DsStepPart p) const {
    if (trace) {
      std::fprintf(trace, "%c %llu %llu %s\n", op, static_cast<unsigned long long>(b),
                   static_cast<unsigned long long>(now), ds_step_part_name(p));
    }
  }
};

}  // namespace

namespace {

// One step's allocations in the runner's order (ds_step_memory): the visits' fetches and
// releases, each module's math with its decoder blocks and gradients, the flushes.
class StepWalk {
 public:
  StepWalk(const DeepSpeedPlan& plan, const ModelLayout& layout, int ranks,
           const std::vector<std::int64_t>& partition_elems, const DsDecoderBlocks& decoder)
      : plan_(plan),
        ranks_(ranks),
        partition_elems_(partition_elems),
        decoder_(decoder),
        M_(static_cast<std::int64_t>(layout.modules.size())),
        blocks_(plan.offload_param || ranks > 1),
        res_(plan, M_),
        held_(plan.tensors.size(), false),
        tensors_of_(static_cast<std::size_t>(M_)) {
    for (std::size_t id = 0; id < plan.tensors.size(); ++id)
      tensors_of_[static_cast<std::size_t>(plan.tensors[id].module)].push_back(
          static_cast<int>(id));
  }

  DsStepMemory run() {
    std::size_t v = 0;
    while (v < plan_.visits.size()) {
      const std::int64_t j = plan_.visits[v].module;
      const bool forward = plan_.visits[v].forward;
      std::vector<int> idle;
      std::vector<const DsVisit*> group;
      for (; v < plan_.visits.size() && plan_.visits[v].module == j &&
             plan_.visits[v].forward == forward;
           ++v) {
        const DsVisit& visit = plan_.visits[v];
        group.push_back(&visit);
        if (!blocks_) continue;
        make_live(visit.fetch);
        make_live(visit.prefetch);
        for (int id : res_.release(visit.released)) idle.push_back(id);
      }
      if (forward) {
        forward_math(j);
      } else {
        backward_math(j, group);
      }
      free_idle(idle);
    }
    while (next_flush_ < plan_.flushes.size()) flush();
    if (blocks_) free_idle(res_.release_all());
    return {w_.peak, w_.at_peak};
  }

 private:
  using P = DsStepPart;
  // Modules 1..M-2 are the decoder's layers (0: the embedding, M-1: the head).
  const std::vector<std::uint64_t>& layer_fields_of(std::int64_t j) const {
    return j > 0 && j < M_ - 1 ? decoder_.layer_fields : none_;
  }
  const std::vector<std::uint64_t>& scratch_of(std::int64_t j) const {  // the layers', the head's
    return j > 0 ? decoder_.scratch_fields : none_;
  }
  std::uint64_t logits_of(std::int64_t j) const { return j == M_ - 1 ? decoder_.logits : 0; }
  std::uint64_t tensor_bytes(int id) const {
    return 2 * static_cast<std::uint64_t>(plan_.tensors[static_cast<std::size_t>(id)].count);
  }
  // A block of `bytes` (none when 0) taken and given back around a module's math.
  void take(P p, std::uint64_t bytes) {
    if (bytes > 0) w_.take(p, bytes);
  }
  void give(P p, std::uint64_t bytes) {
    if (bytes > 0) w_.give(p, bytes);
  }
  // A block per saved tensor or temporary, as autograd and PyTorch's ops allocate them.
  void take_all(P p, const std::vector<std::uint64_t>& fields) {
    for (std::uint64_t bytes : fields) w_.take(p, bytes);
  }
  void give_all(P p, const std::vector<std::uint64_t>& fields) {
    for (std::uint64_t bytes : fields) w_.give(p, bytes);
  }

  void make_live(const std::vector<int>& ids) {
    for (int id : res_.make_live(ids)) {
      if (!held_[static_cast<std::size_t>(id)]) w_.take(P::parameters, tensor_bytes(id));
      held_[static_cast<std::size_t>(id)] = true;
    }
  }
  void free_idle(const std::vector<int>& idle) {
    for (int id : idle) {
      if (!held_[static_cast<std::size_t>(id)] || res_.live(id)) continue;
      held_[static_cast<std::size_t>(id)] = false;
      w_.give(P::parameters, tensor_bytes(id));
    }
  }

  void forward_math(std::int64_t j) {
    take_all(P::activations, layer_fields_of(j));  // what autograd saves
    take_all(P::scratch, scratch_of(j));  // DecoderMath::forward's scratch, then the logits
    take(P::logits, logits_of(j));
    give_all(P::scratch, scratch_of(j));
  }

  void backward_math(std::int64_t j, const std::vector<const DsVisit*>& group) {
    for (int id : tensors_of_[static_cast<std::size_t>(j)])  // autograd's, a block per tensor
      w_.take(P::gradients, tensor_bytes(id));
    take_all(P::scratch, scratch_of(j));  // dead, with the logits, before the module's hooks
    give_all(P::scratch, scratch_of(j));
    give(P::logits, logits_of(j));
    for (const DsVisit* visit : group) {  // each hook: the flush first, then its copy
      for (std::size_t i = 0; i < visit->grads.size(); ++i) {
        if (visit->flush_before[i]) flush();
        w_.give(P::gradients, tensor_bytes(visit->grads[i]));
      }
    }
    give_all(P::activations, layer_fields_of(j));
  }

  void flush() {
    const DsFlush& f = plan_.flushes[next_flush_++];
    std::uint64_t cat = 0;  // one rank: the coalesced copy of the bucket's tensors
    for (int id : f.tensors) cat += tensor_bytes(id);
    if (ranks_ == 1) w_.take(P::bucket_copy, cat);
    for (int id : f.tensors) {
      const std::int64_t n = partition_elems_[static_cast<std::size_t>(id)];
      const auto u = static_cast<std::uint64_t>(n);
      const auto view = 8 * static_cast<std::uint64_t>(ds_norm_view_elems(n));
      w_.take(P::partition_copies, 2 * u);
      w_.take(P::norm_views, view);
      w_.take(P::norms, 8);  // the tensor's norm, freed at the step's norm (after the peak)
      w_.give(P::norm_views, view);
      w_.take(P::fp32_casts, 4 * u);
      w_.give(P::fp32_casts, 4 * u);
      w_.give(P::partition_copies, 2 * u);
    }
    if (ranks_ == 1) w_.give(P::bucket_copy, cat);
  }

  const DeepSpeedPlan& plan_;
  const int ranks_;
  const std::vector<std::int64_t>& partition_elems_;
  const DsDecoderBlocks& decoder_;
  const std::vector<std::uint64_t> none_;
  const std::int64_t M_;
  const bool blocks_;
  Walk w_;
  DsResidency res_;
  std::vector<bool> held_;  // a tensor's block on the device
  std::vector<std::vector<int>> tensors_of_;
  std::size_t next_flush_ = 0;
};

}  // namespace

DsStepMemory ds_step_memory(const DeepSpeedPlan& plan, const ModelLayout& layout, int ranks,
                            const std::vector<std::int64_t>& partition_elems,
                            const DsDecoderBlocks& decoder) {
  return StepWalk(plan, layout, ranks, partition_elems, decoder).run();
}

}  // namespace zob::step_detail
