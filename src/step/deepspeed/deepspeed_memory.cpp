// Which modules hold fetched parameters, and one step's device allocations walked as the
// runner makes them (deepspeed_memory.hpp).
#include "step/deepspeed/deepspeed_memory.hpp"

#include <algorithm>

#include "step/caching_pool.hpp"

namespace zob::step_detail {

DsResidency::DsResidency(const DeepSpeedPlan& plan, std::int64_t modules)
    : plan_(&plan),
      fetched_(static_cast<std::size_t>(modules), 0),
      live_(static_cast<std::size_t>(modules), 0),
      tensor_live_(plan.tensors.size(), false) {
  for (const DsTensor& t : plan.tensors) {
    if (!t.persistent) ++fetched_[static_cast<std::size_t>(t.module)];
  }
}

std::vector<std::int64_t> DsResidency::make_live(const std::vector<int>& ids) {
  std::vector<std::int64_t> out;
  for (int id : ids) {
    const DsTensor& t = plan_->tensors[static_cast<std::size_t>(id)];
    if (t.persistent || tensor_live_[static_cast<std::size_t>(id)]) continue;
    tensor_live_[static_cast<std::size_t>(id)] = true;
    if (live_[static_cast<std::size_t>(t.module)]++ == 0) out.push_back(t.module);
  }
  return out;
}

bool DsResidency::live(int id) const {
  return plan_->tensors[static_cast<std::size_t>(id)].persistent ||
         tensor_live_[static_cast<std::size_t>(id)];
}

std::vector<std::int64_t> DsResidency::release(const std::vector<int>& ids) {
  std::vector<std::int64_t> out;
  for (int id : ids) {
    const DsTensor& t = plan_->tensors[static_cast<std::size_t>(id)];
    if (t.persistent || !tensor_live_[static_cast<std::size_t>(id)]) continue;
    tensor_live_[static_cast<std::size_t>(id)] = false;
    if (--live_[static_cast<std::size_t>(t.module)] == 0) out.push_back(t.module);
  }
  return out;
}

std::vector<std::int64_t> DsResidency::release_all() {
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

namespace {

struct Walk {
  std::uint64_t now = 0, peak = 0;
  void take(std::uint64_t bytes) {
    now += CachingPoolDevice::fresh_block_size(bytes);
    peak = std::max(peak, now);
  }
  void give(std::uint64_t bytes) { now -= CachingPoolDevice::fresh_block_size(bytes); }
};

}  // namespace

DsStepMemory ds_step_memory(const DeepSpeedPlan& plan, const ModelLayout& layout, int ranks,
                            const std::vector<std::int64_t>& partition_elems,
                            const DsDecoderBlocks& decoder) {
  const auto M = static_cast<std::int64_t>(layout.modules.size());
  // Modules 1..M-2 are the decoder's layers (0: the embedding, M-1: the head).
  const auto layer_block_of = [&](std::int64_t j) {
    return j > 0 && j < M - 1 ? decoder.layer_block : std::uint64_t{0};
  };
  const auto scratch_of = [&](std::int64_t j) {  // the layers' and the head's
    return j > 0 ? decoder.module_scratch : std::uint64_t{0};
  };
  const auto logits_of = [&](std::int64_t j) {
    return j == M - 1 ? decoder.logits : std::uint64_t{0};
  };

  const auto module_bytes = [&](std::int64_t j) {
    return 2 * static_cast<std::uint64_t>(layout.modules[static_cast<std::size_t>(j)].count);
  };
  const bool blocks = plan.offload_param || ranks > 1;
  Walk w;
  // A block of `bytes` (none when 0) taken and given back around a module's math.
  const auto take = [&w](std::uint64_t bytes) {
    if (bytes > 0) w.take(bytes);
  };
  const auto give = [&w](std::uint64_t bytes) {
    if (bytes > 0) w.give(bytes);
  };
  DsResidency res(plan, M);
  std::vector<bool> held(static_cast<std::size_t>(M), false);  // a block on the device
  const auto free_idle = [&](const std::vector<std::int64_t>& idle) {
    for (std::int64_t m : idle) {
      if (!held[static_cast<std::size_t>(m)] || res.live_count(m) > 0) continue;
      held[static_cast<std::size_t>(m)] = false;
      w.give(module_bytes(m));
    }
  };
  std::size_t next_flush = 0;
  const auto flush = [&] {
    const DsFlush& f = plan.flushes[next_flush++];
    std::uint64_t cat = 0;  // one rank: the coalesced copy of the bucket's tensors
    for (int id : f.tensors) {
      cat += 2 * static_cast<std::uint64_t>(plan.tensors[static_cast<std::size_t>(id)].count);
    }
    if (ranks == 1) w.take(cat);
    for (int id : f.tensors) {
      const std::int64_t n = partition_elems[static_cast<std::size_t>(id)];
      const auto u = static_cast<std::uint64_t>(n);
      w.take(2 * u);
      w.take(8 * static_cast<std::uint64_t>(ds_norm_view_elems(n)));
      w.take(8);  // the tensor's norm, freed at the step's norm (after the walk's peak)
      w.give(8 * static_cast<std::uint64_t>(ds_norm_view_elems(n)));
      w.take(4 * u);
      w.give(4 * u);
      w.give(2 * u);
    }
    if (ranks == 1) w.give(cat);
  };
  std::size_t v = 0;
  while (v < plan.visits.size()) {
    const std::int64_t j = plan.visits[v].module;
    const bool forward = plan.visits[v].forward;
    std::vector<std::int64_t> idle;
    std::vector<const DsVisit*> group;
    const auto make_live = [&](const std::vector<int>& ids) {
      for (std::int64_t m : res.make_live(ids)) {
        if (!held[static_cast<std::size_t>(m)]) w.take(module_bytes(m));
        held[static_cast<std::size_t>(m)] = true;
      }
    };
    for (;
         v < plan.visits.size() && plan.visits[v].module == j && plan.visits[v].forward == forward;
         ++v) {
      const DsVisit& visit = plan.visits[v];
      group.push_back(&visit);
      if (blocks) {
        make_live(visit.fetch);
        make_live(visit.prefetch);
        for (std::int64_t m : res.release(visit.released)) idle.push_back(m);
      }
    }
    if (forward) {
      take(layer_block_of(j));  // what autograd saves
      take(scratch_of(j));      // DecoderMath::forward's scratch, then the head's logits
      take(logits_of(j));
      give(scratch_of(j));
    } else {
      w.take(module_bytes(j));  // autograd's gradients of the module
      take(scratch_of(j));      // dead, with the logits, before the module's hooks run
      give(scratch_of(j));
      give(logits_of(j));
      for (const DsVisit* visit : group) {
        for (bool flush_first : visit->flush_before) {
          if (flush_first) flush();
        }
      }
      w.give(module_bytes(j));
      if (layer_block_of(j) > 0) w.give(layer_block_of(j));
    }
    free_idle(idle);
  }
  while (next_flush < plan.flushes.size()) flush();
  if (blocks) free_idle(res.release_all());
  return {w.peak};
}

}  // namespace zob::step_detail
