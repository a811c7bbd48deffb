// DeepSpeed 0.19.8's ZeRO-3 fetch / release / gradient-bucket bookkeeping for one steady-state
// step (the trace is complete: DeepSpeed records it in its first two steps, which the warmup
// covers). See deepspeed_plan.hpp for what is reproduced and where it comes from.
#include "step/deepspeed/deepspeed_plan.hpp"

#include <algorithm>
#include <deque>
#include <limits>
#include <set>

namespace zob::step_detail {
namespace {

// The leaf modules with parameters, in forward order: a tensor "layer3.fc1.weight" belongs
// to the leaf "layer3.fc1", as the nn.Linear that owns it in DeepSpeed's model.
struct Leaf {
  std::int64_t module = 0;
  std::vector<int> tensors;  // ascending id: DeepSpeed sorts a module's params by ds_id
  // Uses another leaf's tensor (a tied lm_head): fetched here too, but autograd sums both
  // uses' gradients before the parameter's one hook, which fires at the owner's leaf.
  bool shared = false;
};

std::string leaf_name(const std::string& tensor) {
  const auto dot = tensor.rfind('.');
  return dot == std::string::npos ? tensor : tensor.substr(0, dot);
}

void list_tensors(const ModelLayout& layout, const DeepSpeedKnobs& k, DeepSpeedPlan& plan,
                  std::vector<Leaf>& leaves) {
  std::string last;
  for (std::size_t m = 0; m < layout.modules.size(); ++m) {
    for (const TensorSlice& t : layout.modules[m].tensors) {
      const int id = static_cast<int>(plan.tensors.size());
      plan.tensors.push_back({t.name, t.offset, t.count(), static_cast<std::int64_t>(m),
                              t.count() <= k.persistence_threshold});
      if (plan.tensors.back().persistent) plan.persistent.push_back(id);
      const std::string leaf = leaf_name(t.name);
      if (leaves.empty() || leaf != last) leaves.push_back({static_cast<std::int64_t>(m), {}});
      leaves.back().tensors.push_back(id);
      last = leaf;
    }
    // A shared tensor (a tied lm_head: the embedding table) is its own leaf here too, with the
    // owner's id: ZeRO-3 fetches a shared parameter again in every module that uses it.
    for (const TensorSlice& t : layout.modules[m].shared) {
      for (std::size_t id = 0; id < plan.tensors.size(); ++id) {
        if (plan.tensors[id].offset == t.offset) {
          leaves.push_back({static_cast<std::int64_t>(m), {static_cast<int>(id)}, true});
        }
      }
      last.clear();
    }
  }
}

enum class Status { not_available, inflight, available };

// The parameter coordinator's state over one step (PartitionedParameterCoordinator).
class Coordinator {
 public:
  Coordinator(const DeepSpeedPlan& plan, const std::vector<Leaf>& leaves,
              const std::vector<int>& trace, const std::vector<std::int64_t>& step_ids,
              const DeepSpeedKnobs& k)
      : plan_(plan),
        leaves_(leaves),
        trace_(trace),
        step_ids_(step_ids),
        k_(k),
        status_(plan.tensors.size(), Status::not_available),
        handle_(plan.tensors.size(), -1),
        most_recent_(plan.tensors.size(), std::numeric_limits<std::int64_t>::min()) {
    for (int t : plan.persistent) status_[static_cast<std::size_t>(t)] = Status::available;
    for (std::size_t v = 0; v < trace.size(); ++v) {
      for (int t : leaves[static_cast<std::size_t>(trace[v])].tensors)
        queue_.push_back({t, step_ids[v]});
    }
  }

  DsVisit visit(std::size_t v) {
    const Leaf& leaf = leaves_[static_cast<std::size_t>(trace_[v])];
    const std::int64_t s = step_ids_[v];
    DsVisit out;
    out.module = leaf.module;
    out.tensors = leaf.tensors;
    out.fetch = gather(leaf.tensors);
    out.waits = wait_for(leaf.tensors);
    claim_own_uses(leaf.tensors, s);
    out.prefetch = prefetch();
    out.released = release(leaf.tensors, v, s + 1);
    return out;
  }

 private:
  struct Use {
    int tensor;
    std::int64_t step;
  };
  Status& status(int t) { return status_[static_cast<std::size_t>(t)]; }
  std::int64_t count(int t) const { return plan_.tensors[static_cast<std::size_t>(t)].count; }

  // all_gather_coalesced of the tensors not on the device: one handle, one copy each.
  std::vector<int> gather(const std::vector<int>& tensors) {
    std::vector<int> fetched;
    for (int t : tensors) {
      if (status(t) != Status::not_available) continue;
      status(t) = Status::inflight;
      handle_[static_cast<std::size_t>(t)] = handles_;
      available_ += count(t);
      fetched.push_back(t);
    }
    if (!fetched.empty()) {
      handle_members_.push_back(fetched);
      ++handles_;
    }
    return fetched;
  }

  // handle.wait() synchronises the fetch stream once per handle; it makes all its tensors
  // available.
  int wait_for(const std::vector<int>& tensors) {
    int waits = 0;
    for (int t : tensors) {
      if (status(t) != Status::inflight) continue;
      ++waits;
      for (int u :
           handle_members_[static_cast<std::size_t>(handle_[static_cast<std::size_t>(t)])]) {
        if (status(u) == Status::inflight) status(u) = Status::available;
      }
    }
    return waits;
  }

  // The module's own entries leave the head of the fetch queue, unless a prefetch took them.
  void claim_own_uses(const std::vector<int>& tensors, std::int64_t s) {
    std::size_t own = 0;
    for (int t : tensors) own += most_recent_[static_cast<std::size_t>(t)] < s ? 1 : 0;
    for (std::size_t i = 0; i < own && !queue_.empty(); ++i) {
      most_recent_[static_cast<std::size_t>(queue_.front().tensor)] = queue_.front().step;
      queue_.pop_front();
    }
  }

  std::vector<int> prefetch() {
    const std::int64_t budget = std::min(k_.max_live - available_, k_.prefetch_bucket);
    std::vector<int> chosen;
    std::int64_t numel = 0;
    while (!queue_.empty() && numel < budget) {
      const Use u = queue_.front();
      queue_.pop_front();
      auto& recent = most_recent_[static_cast<std::size_t>(u.tensor)];
      const bool take = status(u.tensor) == Status::not_available &&
                        std::find(chosen.begin(), chosen.end(), u.tensor) == chosen.end();
      recent = std::max(recent, u.step);
      if (take) {
        chosen.push_back(u.tensor);
        numel += count(u.tensor);
      }
    }
    std::sort(chosen.begin(), chosen.end());
    return gather(chosen);
  }

  // __params_to_release: not persistent, no later use claimed by a prefetch, and not used
  // again within max_reuse_distance elements of the rest of the trace.
  std::vector<int> release(const std::vector<int>& tensors, std::size_t v, std::int64_t step_id) {
    std::set<int> candidates;
    for (int t : tensors) {
      const DsTensor& d = plan_.tensors[static_cast<std::size_t>(t)];
      if (!d.persistent && most_recent_[static_cast<std::size_t>(t)] <= step_id)
        candidates.insert(t);
    }
    std::int64_t traversed = 0;
    for (std::size_t w = v + 1; w < trace_.size() && traversed < k_.max_reuse_distance; ++w) {
      for (int t : leaves_[static_cast<std::size_t>(trace_[w])].tensors) {
        candidates.erase(t);
        traversed += count(t);
      }
    }
    std::vector<int> released;
    for (int t : candidates) {
      if (status(t) != Status::available) continue;
      status(t) = Status::not_available;
      available_ -= count(t);
      released.push_back(t);
    }
    return released;
  }

  const DeepSpeedPlan& plan_;
  const std::vector<Leaf>& leaves_;
  const std::vector<int>& trace_;
  const std::vector<std::int64_t>& step_ids_;
  const DeepSpeedKnobs& k_;
  std::vector<Status> status_;
  std::vector<int> handle_;
  std::vector<std::vector<int>> handle_members_;
  int handles_ = 0;
  std::vector<std::int64_t> most_recent_;
  std::deque<Use> queue_;
  std::int64_t available_ = 0;
};

// Gradient hooks of one backward visit: a Linear's weight, then its bias.
void add_gradients(DeepSpeedPlan& plan, DsVisit& visit, const Leaf& leaf, const DeepSpeedKnobs& k,
                   DsFlush& bucket, std::int64_t& elements) {
  if (leaf.shared) return;
  for (int t : leaf.tensors) {
    const std::int64_t n = plan.tensors[static_cast<std::size_t>(t)].count;
    const bool flush = elements > 0 && elements + n > k.reduce_bucket;
    if (flush) {
      // partition_grads walks the bucket in ds_id order (the profile: block 0 first, head last)
      std::sort(bucket.tensors.begin(), bucket.tensors.end());
      plan.flushes.push_back(std::move(bucket));
      bucket = {};
      elements = 0;
    }
    visit.grads.push_back(t);
    visit.flush_before.push_back(flush);
    bucket.tensors.push_back(t);
    elements += n;
  }
}

}  // namespace

DeepSpeedPlan build_deepspeed_plan(const ModelLayout& layout, Loop loop, const DeepSpeedKnobs& k) {
  DeepSpeedPlan plan;
  plan.offload_param = loop == Loop::offload_param;
  std::vector<Leaf> leaves;
  list_tensors(layout, k, plan, leaves);

  // The trace: leaves forward, then backward. DeepSpeed's trace also holds the modules without
  // parameters; the root's backward hook sits between the head's two uses, hence the gap.
  const int L = static_cast<int>(leaves.size());
  std::vector<int> trace;
  std::vector<std::int64_t> step_ids;
  for (int i = 0; i < L; ++i) {
    trace.push_back(i);
    step_ids.push_back(i);
  }
  for (int i = L - 1; i >= 0; --i) {
    trace.push_back(i);
    step_ids.push_back(L + 1 + (L - 1 - i));
  }

  Coordinator coordinator(plan, leaves, trace, step_ids, k);
  DsFlush bucket;
  std::int64_t elements = 0;
  for (std::size_t v = 0; v < trace.size(); ++v) {
    DsVisit visit = coordinator.visit(v);
    visit.forward = v < static_cast<std::size_t>(L);
    if (!visit.forward)
      add_gradients(plan, visit, leaves[static_cast<std::size_t>(trace[v])], k, bucket, elements);
    plan.visits.push_back(std::move(visit));
  }
  if (!bucket.tensors.empty()) {
    std::sort(bucket.tensors.begin(), bucket.tensors.end());
    plan.flushes.push_back(std::move(bucket));
  }
  return plan;
}

DeepSpeedPlan::Count DeepSpeedPlan::h2d() const {
  Count c;
  const auto add = [&](int t) {
    ++c.copies;
    c.bytes += 2 * static_cast<std::uint64_t>(tensors[static_cast<std::size_t>(t)].count);
  };
  if (offload_param) {
    for (const DsVisit& v : visits) {
      for (int t : v.fetch) add(t);
      for (int t : v.prefetch) add(t);
    }
    for (int t : persistent) add(t);
  }
  for (const DsFlush& f : flushes) {
    for (int t : f.tensors) add(t);  // the bf16 gradient back to the device
  }
  c.copies += kNormWrites;  // the global norm's scalar writes
  c.bytes += 4 * kNormWrites;
  return c;
}

DeepSpeedPlan::Count DeepSpeedPlan::d2h() const {
  Count c;
  for (const DsFlush& f : flushes) {
    for (int t : f.tensors) {
      c.copies += 2;  // bf16 into the gradient partition, fp32 into the optimizer's gradient
      c.bytes += 6 * static_cast<std::uint64_t>(tensors[static_cast<std::size_t>(t)].count);
    }
  }
  c.copies += kNormReads;  // the global norm's scalar reads: 8 B, then 4 B each
  c.bytes += 8 + 4 * (kNormReads - 1);
  return c;
}

std::vector<DsModuleCopies> DeepSpeedPlan::module_copies(std::int64_t modules) const {
  std::vector<DsModuleCopies> out(static_cast<std::size_t>(modules));
  const auto flushed = [&](DsModuleCopies& m, const DsFlush& f) {
    const auto n = static_cast<std::int64_t>(f.tensors.size());
    m.grad_d2h += 2 * n;
    m.grad_h2d += n;
  };
  std::size_t next_flush = 0;
  for (const DsVisit& v : visits) {
    DsModuleCopies& m = out[static_cast<std::size_t>(v.module)];
    if (offload_param) {
      const auto n = static_cast<std::int64_t>(v.fetch.size() + v.prefetch.size());
      (v.forward ? m.fetch_forward : m.fetch_backward) += n;
    }
    for (const bool flush : v.flush_before) {
      if (flush) flushed(m, flushes[next_flush++]);
    }
  }
  for (; next_flush < flushes.size(); ++next_flush)
    flushed(out[static_cast<std::size_t>(epilogue_module())], flushes[next_flush]);
  return out;
}

int DeepSpeedPlan::host_waits() const {
  int w = 0;
  for (const DsVisit& v : visits) w += v.waits;
  return w;
}

std::int64_t DeepSpeedPlan::fetched_elements() const {
  std::int64_t n = 0;
  if (!offload_param) return 0;
  for (const DsVisit& v : visits) {
    for (int t : v.fetch) n += tensors[static_cast<std::size_t>(t)].count;
    for (int t : v.prefetch) n += tensors[static_cast<std::size_t>(t)].count;
  }
  for (int t : persistent) n += tensors[static_cast<std::size_t>(t)].count;
  return n;
}

}  // namespace zob::step_detail
