// DeepSpeedRunner's device memory as DeepSpeed holds it (deepspeed_memory.hpp): the fetched
// parameters' blocks, the persistent tensors' slots, the reduce bucket and the flush's
// temporaries, every one through the caching pool (mem_).
#include <fmt/format.h>
#include <algorithm>

#include "step/deepspeed/deepspeed_runner.hpp"
#include "zob/errors.hpp"

namespace zob::step_detail {

bf16* DeepSpeedRunner::param_of(int id) const {
  const DsTensor& t = tensor(id);
  if (!param_blocks_) return params_.as<bf16>() + t.offset;
  const auto m = static_cast<std::size_t>(t.module);
  if (resident_block_[m] != nullptr) {
    return static_cast<bf16*>(resident_block_[m]) + (t.offset - layout_.modules[m].offset);
  }
  if (t.persistent) return persistent_slot(id);
  void* b = tensor_block_[static_cast<std::size_t>(id)];
  if (b == nullptr)
    throw std::logic_error("deepspeed: " + t.name + " used while it holds no block");
  return static_cast<bf16*>(b);
}

ModuleWeights DeepSpeedRunner::module_params(std::int64_t j) const {
  const ModuleSlice& m = layout_.modules[static_cast<std::size_t>(j)];
  if (!param_blocks_) return params_.as<bf16>() + m.offset;
  if (resident_block_[static_cast<std::size_t>(j)] != nullptr)
    return static_cast<const bf16*>(resident_block_[static_cast<std::size_t>(j)]);
  // Every tensor the module computes with was fetched into its block; a persistent one is
  // read from its resident slot (DeepSpeed's persistent parameter stays where it is).
  std::vector<std::pair<std::int64_t, const bf16*>> at;
  for (int id : tensors_of_module_[static_cast<std::size_t>(j)]) {
    const DsTensor& t = tensor(id);
    if (!t.persistent && !fetched_[static_cast<std::size_t>(id)]) {
      throw std::logic_error("deepspeed: module " + m.name + " runs without its tensor " + t.name +
                             " fetched");
    }
    at.emplace_back(t.offset - m.offset, param_of(id));
  }
  return ModuleWeights(std::move(at));
}

ModuleGrads DeepSpeedRunner::allocate_grads(std::int64_t j) {
  const ModuleSlice& m = layout_.modules[static_cast<std::size_t>(j)];
  std::vector<std::pair<std::int64_t, bf16*>> at;
  for (int id : tensors_of_module_[static_cast<std::size_t>(j)]) {
    void*& b = grad_block_[static_cast<std::size_t>(id)];
    if (b == nullptr) b = mem_.allocate(2 * static_cast<std::size_t>(tensor(id).count));
    at.emplace_back(tensor(id).offset - m.offset, static_cast<bf16*>(b));
  }
  return ModuleGrads(std::move(at));
}

bf16* DeepSpeedRunner::persistent_slot(int id) const {
  if (!param_blocks_ || residency_.resident(tensor(id).module)) return param_of(id);
  return persistent_.as<bf16>() + persistent_at_[static_cast<std::size_t>(id)];
}

// The persistent slots, each module's shared tensor and persistent tensors, the resident
// modules' blocks, the bucket. Called once, before the first gather of the persistent tensors.
void DeepSpeedRunner::allocate_param_blocks() {
  const auto M = static_cast<std::size_t>(modules());
  param_blocks_ = offload() || sharded();
  resident_block_.assign(M, nullptr);
  tensor_block_.assign(plan_.tensors.size(), nullptr);
  grad_block_.assign(plan_.tensors.size(), nullptr);
  tensors_of_module_.assign(M, {});
  for (std::size_t id = 0; id < plan_.tensors.size(); ++id)  // in offset order
    tensors_of_module_[static_cast<std::size_t>(plan_.tensors[id].module)].push_back(
        static_cast<int>(id));
  shared_id_.assign(M, -1);
  persistent_at_.assign(plan_.tensors.size(), -1);
  std::int64_t slots = 0;
  for (std::size_t id = 0; id < plan_.tensors.size(); ++id) {
    const DsTensor& t = plan_.tensors[id];
    if (!t.persistent) continue;
    if (!residency_.resident(t.module)) {
      persistent_at_[id] = slots;
      slots += t.count;
    }
  }
  for (std::size_t j = 0; j < M; ++j) {
    const ModuleSlice& m = layout_.modules[j];
    if (m.shared.empty()) continue;
    for (std::size_t id = 0; id < plan_.tensors.size(); ++id) {
      if (plan_.tensors[id].offset == m.shared.front().offset) shared_id_[j] = static_cast<int>(id);
    }
  }
  if (param_blocks_) {
    persistent_ = DeviceBuffer(mem_, 2 * static_cast<std::uint64_t>(slots));
    for (std::size_t j = 0; j < M; ++j) {
      if (residency_.resident(static_cast<std::int64_t>(j)))
        resident_block_[j] = mem_.allocate(2 * static_cast<std::size_t>(layout_.modules[j].count));
    }
  }
  bucket_ = DeviceBuffer(mem_, 2 * static_cast<std::uint64_t>(ds_bucket_elems(plan_, knobs_)));
  bucket_at_.assign(plan_.tensors.size(), 0);
  fetched_.assign(plan_.tensors.size(), false);
  bucket_epoch_of_.assign(plan_.tensors.size(), -1);
}

void DeepSpeedRunner::make_live(const std::vector<int>& ids, Queue q) {
  if (!param_blocks_) return;
  for (int id : residency_.make_live(ids)) {
    void*& b = tensor_block_[static_cast<std::size_t>(id)];
    if (b != nullptr) continue;  // released in this module's visits, not yet freed
    // A block of the fetch's queue, as DeepSpeed allocates it on its all-gather stream.
    b = mem_.allocate_on(q, 2 * static_cast<std::size_t>(tensor(id).count));
  }
  for (int id : ids) fetched_[static_cast<std::size_t>(id)] = true;  // the caller copies them
}

void DeepSpeedRunner::free_idle_blocks() {
  for (int id : to_free_) {
    void*& b = tensor_block_[static_cast<std::size_t>(id)];
    if (b == nullptr || residency_.live(id)) continue;
    mem_.deallocate_after(b, Queue::compute);
    b = nullptr;
    fetched_[static_cast<std::size_t>(id)] = false;
  }
  to_free_.clear();
}

// The hook's copy of one gradient into the bucket (the reduce stream, after compute).
void DeepSpeedRunner::add_to_bucket(int id, const bf16* grad) {
  const DsTensor& t = tensor(id);
  bucket_at_[static_cast<std::size_t>(id)] = bucket_fill_;
  bucket_epoch_of_[static_cast<std::size_t>(id)] = bucket_epoch_;
  dev_.copy_on_device(Queue::d2h, bucket_.as<bf16>() + bucket_fill_, grad,
                      2 * static_cast<std::size_t>(t.count));
  bucket_fill_ += t.count;
}

// The plan's bucket is the one the hooks filled: each of its tensors joined since the last
// flush (a stale offset would read another step's bytes).
void DeepSpeedRunner::check_bucket(const DsFlush& f) const {
  for (int id : f.tensors) {
    const auto i = static_cast<std::size_t>(id);
    if (bucket_epoch_of_[i] != bucket_epoch_ || bucket_at_[i] + tensor(id).count > bucket_fill_) {
      throw std::logic_error(fmt::format(
          "deepspeed: flush {} names {}, which did not join this bucket (joined in bucket {}, "
          "at {} of {})",
          bucket_epoch_, tensor(id).name, bucket_epoch_of_[i], bucket_at_[i], bucket_fill_));
    }
  }
}

// partition_grads for one tensor's partition (the whole tensor for N = 1): D2H bf16 into the
// pinned gradient partition, H2D back into a new device tensor, the norm's float64 view
// (_constant_buffered_norm2, in chunks of at most 2.5e8 elements: the tool's stand-in is the
// fp32 cast into that view) and its norm, kept until the step's norm; the fp32 cast and its
// D2H into the optimizer's gradient. For N = 1 grad_f32 is null: the fp32 copy's source is that
// cast, as in DeepSpeed. For N > 1 it is the reduce-scatter's fp32 rank-order sum
// (deepspeed_ranks.cpp says why).
void DeepSpeedRunner::flush_tensor_copies(int id, const bf16* grad_bf16, const float* grad_f32) {
  const DsTensor& t = tensor(id);
  const std::int64_t count = sharded() ? parts_.real(t, id, parts_.rank) : t.count;
  const auto n = static_cast<std::size_t>(count);
  bf16* host_bf16 = grads_bf16_.as<bf16>() + parts_.offset[static_cast<std::size_t>(id)];
  // Blocks of the reduce stream (d2h), which alone uses them, as DeepSpeed's flush allocates.
  auto* back = static_cast<bf16*>(mem_.allocate_on(Queue::d2h, 2 * n));
  copy(flush_copies_, Queue::d2h, "d2h", "grad_bf16:" + t.name, false, host_bf16, grad_bf16, 2 * n);
  copy(flush_copies_, Queue::d2h, "h2d", "grad_back:" + t.name, true, back, host_bf16, 2 * n);
  const std::int64_t view = ds_norm_view_elems(count);
  auto* norm_view =
      static_cast<float*>(mem_.allocate_on(Queue::d2h, 8 * static_cast<std::size_t>(view)));
  for (std::int64_t at = 0; at < count; at += view) {
    dev_.cast_bf16_to_f32(back + at, norm_view, std::min(view, count - at), Queue::d2h);
  }
  norm_scalars_.push_back(mem_.allocate_on(Queue::d2h, 8));
  mem_.deallocate_after(norm_view, Queue::d2h);
  auto* f32 = static_cast<float*>(mem_.allocate_on(Queue::d2h, 4 * n));
  dev_.cast_bf16_to_f32(back, f32, count, Queue::d2h);
  // fp32_partitioned_groups_flat[i].grad.narrow(...).copy_(grad_buffer.float()): to the host
  // for the CPU's sub-groups, a device-to-device copy for the device's (offload_optimizer.ratio).
  const std::int64_t at = parts_.offset[static_cast<std::size_t>(id)];
  const float* src = grad_f32 != nullptr ? grad_f32 : f32;
  if (at < groups_.cpu_begin) {
    dev_.copy_on_device(Queue::d2h, device_grad_at(at), src, 4 * n);
  } else {
    copy(flush_copies_, Queue::d2h, "d2h", "grad_fp32:" + t.name, false,
         grads_.as<float>() + (at - groups_.cpu_begin), src, 4 * n);
  }
  mem_.deallocate_after(f32, Queue::d2h);
  mem_.deallocate_after(back, Queue::d2h);
}

}  // namespace zob::step_detail
