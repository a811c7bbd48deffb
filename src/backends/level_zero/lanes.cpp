// LevelZeroDevice: copies, events and kernel launches on the three queues (lanes).
#include <algorithm>
#include <cstdio>
#include <limits>

#include "level_zero_device.hpp"
#include "shared.hpp"
#include "ze_support.hpp"

namespace zob {
namespace l0 {

constexpr KernelInfo kKernels[] = {
    {"gemm", "gemm", {kGemmWg, kGemmWg}},
    {"embedding_forward", "embedding", {kWg, 1}},
    {"embedding_backward", "embedding", {kWg, 1}},
    {"bias_add", "elementwise", {kWg, 1}},
    {"bias_gelu_forward", "elementwise", {kWg, 1}},
    {"gelu_backward", "elementwise", {kWg, 1}},
    {"residual_add", "elementwise", {kWg, 1}},
    {"fill_bf16", "elementwise", {kWg, 1}},
    {"cast_f32_to_bf16", "elementwise", {kWg, 1}},
    {"cast_bf16_to_f32", "elementwise", {kWg, 1}},
    {"column_sum", "reduce", {kWg, 1}},
    {"sum_bf16_partial", "reduce", {kWg, 1}},
    {"sum_partials", "reduce", {kWg, 1}},
    {"gemm_batched", "gemm", {kGemmWg, kGemmWg}},
    {"rmsnorm_forward", "decoder", {kWg, 1}},
    {"rmsnorm_backward", "decoder", {kWg, 1}},
    {"to_heads", "decoder", {kWg, 1}},
    {"to_heads_rope", "decoder", {kWg, 1}},
    {"from_heads", "decoder", {kWg, 1}},
    {"from_heads_rope", "decoder", {kWg, 1}},
    {"causal_softmax_forward", "decoder", {kWg, 1}},
    {"causal_softmax_backward", "decoder", {kWg, 1}},
    {"silu_mul_forward", "decoder", {kWg, 1}},
    {"silu_mul_backward", "decoder", {kWg, 1}},
    {"tensor_elementwise", "tensor", {kWg, 1}},
    {"tensor_reduce_last", "tensor", {kWg, 1}},
};
static_assert(std::size(kKernels) == static_cast<std::size_t>(KernelId::count));

std::uint32_t groups_for(std::int64_t items, std::uint32_t per_group, const char* what) {
  const auto g = (items + per_group - 1) / per_group;
  if (g > std::numeric_limits<std::uint32_t>::max())
    throw DeviceError(DeviceErrorKind::runtime, std::string("xpu: ") + what + ": " +
                                                    std::to_string(items) +
                                                    " items exceed one launch's group count");
  return static_cast<std::uint32_t>(g);
}

const KernelInfo& kernel_info(KernelId id) { return kKernels[static_cast<int>(id)]; }

Shared::~Shared() {
  for (auto* e : all_) zeEventDestroy(e);
  for (auto* p : pools_) zeEventPoolDestroy(p);
  if (context != nullptr) zeContextDestroy(context);
}

ze_event_handle_t Shared::acquire_event() {
  std::lock_guard lock(mutex_);
  if (free_.empty()) {
    ze_event_pool_desc_t desc{ZE_STRUCTURE_TYPE_EVENT_POOL_DESC, nullptr,
                              ZE_EVENT_POOL_FLAG_HOST_VISIBLE | ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP,
                              kPoolSize};
    ze_event_pool_handle_t pool = nullptr;
    ZE_CHECK(zeEventPoolCreate(context, &desc, 1, &device, &pool));
    pools_.push_back(pool);
    for (std::uint32_t i = 0; i < kPoolSize; ++i) {
      ze_event_desc_t edesc{ZE_STRUCTURE_TYPE_EVENT_DESC, nullptr, i, ZE_EVENT_SCOPE_FLAG_HOST,
                            ZE_EVENT_SCOPE_FLAG_HOST};
      ze_event_handle_t e = nullptr;
      ZE_CHECK(zeEventCreate(pool, &edesc, &e));
      all_.push_back(e);
      free_.push_back(e);
    }
  }
  auto* e = free_.back();
  free_.pop_back();
  return e;
}

void Shared::retire_event(ze_event_handle_t e) noexcept {
  std::lock_guard lock(mutex_);
  retired_.push_back(e);
}

void Shared::reclaim_retired() noexcept {
  std::vector<ze_event_handle_t> done;
  {
    std::lock_guard lock(mutex_);
    done.swap(retired_);
  }
  for (auto* e : done) release_event(e);
}

void Shared::release_event(ze_event_handle_t e) noexcept {
  if (ze_result_t r = zeEventHostReset(e); r != ZE_RESULT_SUCCESS)
    std::fprintf(stderr, "xpu: zeEventHostReset failed: %s\n", result_name(r));
  std::lock_guard lock(mutex_);
  free_.push_back(e);
}

}  // namespace l0

using l0::KernelId;

namespace {
l0::LevelZeroEvent& native(DeviceEvent& e) {
  auto* p = dynamic_cast<l0::LevelZeroEvent*>(&e);
  if (p == nullptr) throw DeviceError(DeviceErrorKind::runtime, "xpu: event from another device");
  return *p;
}
}  // namespace

ze_event_handle_t LevelZeroDevice::internal_event() {
  auto* e = shared_->acquire_event();
  internal_in_flight_.push_back(e);
  return e;
}

// The list for the next command of queue q, which the caller appends next. When q moves
// between its copy list and its kernel list, the new list waits for everything already on
// the old one. On one list, a barrier comes first when q appended there since the list's last
// barrier: commands on a list may complete out of order (sum's two launches, the rotary
// table's upload and the kernel reading it, a copy on the compute queue and the kernel after).
ze_command_list_handle_t LevelZeroDevice::enter(Queue q, bool kernel) {
  Lane& lane = lanes_[static_cast<int>(q)];
  auto* target = kernel ? lane.kernel_list : lane.copy_list;
  if (lane.current != nullptr && lane.current != target) {
    auto* e = internal_event();
    ZE_CHECK(zeCommandListAppendBarrier(lane.current, e, 0, nullptr));
    barrier_appended(lane.current);
    ZE_CHECK(zeCommandListAppendWaitOnEvents(target, 1, &e));
  }
  lane.current = target;
  const unsigned queue_bit = 1u << static_cast<int>(q);
  if ((unordered_[target] & queue_bit) != 0) {
    ZE_CHECK(zeCommandListAppendBarrier(target, nullptr, 0, nullptr));
    barrier_appended(target);
  }
  unordered_[target] |= queue_bit;
  return target;
}

void LevelZeroDevice::copy_to_device(Queue q, void* device, const void* host, std::size_t bytes) {
  if (bytes == 0) return;
  std::lock_guard lock(mutex_);
  ZE_CHECK_D(
      zeCommandListAppendMemoryCopy(enter(q, false), device, host, bytes, nullptr, 0, nullptr),
      std::string("host->device ") + std::to_string(bytes) + " bytes on " + to_string(q));
}

void LevelZeroDevice::copy_to_host(Queue q, void* host, const void* device, std::size_t bytes) {
  if (bytes == 0) return;
  std::lock_guard lock(mutex_);
  ZE_CHECK_D(
      zeCommandListAppendMemoryCopy(enter(q, false), host, device, bytes, nullptr, 0, nullptr),
      std::string("device->host ") + std::to_string(bytes) + " bytes on " + to_string(q));
}

void LevelZeroDevice::copy_on_device(Queue q, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  std::lock_guard lock(mutex_);
  ZE_CHECK_D(zeCommandListAppendMemoryCopy(enter(q, false), dst, src, bytes, nullptr, 0, nullptr),
             std::string("device->device ") + std::to_string(bytes) + " bytes on " + to_string(q));
}

void LevelZeroDevice::fill_zero(Queue q, void* device, std::size_t bytes) {
  if (bytes == 0) return;
  const std::uint8_t zero = 0;
  std::lock_guard lock(mutex_);
  ZE_CHECK_D(
      zeCommandListAppendMemoryFill(enter(q, false), device, &zero, 1, bytes, nullptr, 0, nullptr),
      std::to_string(bytes) + " bytes on " + to_string(q));
}

std::unique_ptr<DeviceEvent> LevelZeroDevice::create_event() {
  return std::make_unique<l0::LevelZeroEvent>(shared_);
}

void LevelZeroDevice::record(DeviceEvent& event, Queue q) {
  auto& e = native(event);
  std::lock_guard lock(mutex_);
  Lane& lane = lanes_[static_cast<int>(q)];
  auto* list = lane.current != nullptr ? lane.current : lane.copy_list;
  lane.current = list;
  if (e.recorded) e.renew();
  ZE_CHECK_D(zeCommandListAppendBarrier(list, e.handle(), 0, nullptr), to_string(q));
  barrier_appended(list);
  e.recorded = true;
}

void LevelZeroDevice::queue_wait(Queue q, DeviceEvent& event) {
  auto& e = native(event);
  if (!e.recorded) return;
  std::lock_guard lock(mutex_);
  Lane& lane = lanes_[static_cast<int>(q)];
  auto* list = lane.current != nullptr ? lane.current : lane.copy_list;
  lane.current = list;
  ze_event_handle_t h = e.handle();
  ZE_CHECK_D(zeCommandListAppendWaitOnEvents(list, 1, &h), to_string(q));
}

void LevelZeroDevice::event_synchronize(DeviceEvent& event) {
  auto& e = native(event);
  if (!e.recorded) return;
  ZE_CHECK(zeEventHostSynchronize(e.handle(), std::numeric_limits<std::uint64_t>::max()));
}

// Device time from the completion of `start` to the completion of `end`, on the global
// (wall-clock) timestamps so two queues compare. Ticks wrap at kernelTimestampValidBits.
double LevelZeroDevice::elapsed_seconds(DeviceEvent& start, DeviceEvent& end) {
  auto& s = native(start);
  auto& e = native(end);
  if (!s.recorded || !e.recorded)
    throw DeviceError(DeviceErrorKind::runtime, "xpu: elapsed_seconds on an event never recorded");
  ze_kernel_timestamp_result_t ts{}, te{};
  ZE_CHECK(zeEventQueryKernelTimestamp(s.handle(), &ts));
  ZE_CHECK(zeEventQueryKernelTimestamp(e.handle(), &te));
  const std::uint64_t ticks =
      ((te.global.kernelEnd & timestamp_mask_) - (ts.global.kernelEnd & timestamp_mask_)) &
      timestamp_mask_;
  return static_cast<double>(ticks) / static_cast<double>(timer_hz_);
}

void LevelZeroDevice::synchronize() {
  std::lock_guard lock(mutex_);
  std::vector<ze_event_handle_t> done;
  for (auto* list : lists_) {
    auto* e = internal_event();
    ZE_CHECK(zeCommandListAppendBarrier(list, e, 0, nullptr));
    barrier_appended(list);
    done.push_back(e);
  }
  for (auto* e : done)
    ZE_CHECK(zeEventHostSynchronize(e, std::numeric_limits<std::uint64_t>::max()));
  // Everything is complete: the ordering events and retired user events can be reused.
  for (auto* e : internal_in_flight_) shared_->release_event(e);
  internal_in_flight_.clear();
  shared_->reclaim_retired();
}

// ---------------------------------------------------------------- kernels
void LevelZeroDevice::launch(Queue q, KernelId id, std::array<std::uint32_t, 3> groups,
                             const std::vector<std::pair<std::size_t, const void*>>& args) {
  const auto& ki = l0::kernel_info(id);
  std::lock_guard lock(mutex_);
  auto* kernel = kernels_[static_cast<std::size_t>(id)];
  for (std::size_t i = 0; i < args.size(); ++i)
    ZE_CHECK_D(zeKernelSetArgumentValue(kernel, static_cast<std::uint32_t>(i), args[i].first,
                                        args[i].second),
               std::string(ki.name) + " argument " + std::to_string(i));
  const ze_group_count_t count{groups[0], groups[1], groups[2]};
  // Immediate lists take the arguments at append time, so the kernel object is free after.
  ZE_CHECK_D(zeCommandListAppendLaunchKernel(enter(q, true), kernel, &count, nullptr, 0, nullptr),
             std::string(ki.name) + " on " + to_string(q));
}

// One work-item per `per_item` elements, in work-groups of kWg.
void LevelZeroDevice::launch_1d(Queue q, KernelId id, std::int64_t n, std::int64_t per_item,
                                const std::vector<std::pair<std::size_t, const void*>>& args) {
  if (n <= 0) return;
  const std::int64_t items = (n + per_item - 1) / per_item;
  launch(q, id, {l0::groups_for(items, l0::kWg, l0::kernel_info(id).name), 1, 1}, args);
}

#define ZOB_ARG(x) \
  std::pair<std::size_t, const void*> { sizeof(x), &(x) }

void LevelZeroDevice::gemm(const GemmArgs& a) {
  if (a.m <= 0 || a.n <= 0) return;
  const std::int32_t ta = a.trans_a ? 1 : 0, tb = a.trans_b ? 1 : 0;
  launch(
      Queue::compute, KernelId::gemm,
      {l0::groups_for(a.n, l0::kGemmBlock, "gemm"), l0::groups_for(a.m, l0::kGemmBlock, "gemm"), 1},
      {ZOB_ARG(ta), ZOB_ARG(tb), ZOB_ARG(a.m), ZOB_ARG(a.n), ZOB_ARG(a.k), ZOB_ARG(a.a),
       ZOB_ARG(a.lda), ZOB_ARG(a.b), ZOB_ARG(a.ldb), ZOB_ARG(a.c), ZOB_ARG(a.ldc)});
}

void LevelZeroDevice::embedding_forward(const std::int32_t* ids, const bf16* table, bf16* out,
                                        std::int64_t tokens, std::int64_t hidden) {
  if (tokens <= 0 || hidden <= 0) return;
  launch(Queue::compute, KernelId::embedding_forward,
         {l0::groups_for(hidden, l0::kWg, "embedding_forward"),
          l0::groups_for(tokens, 1, "embedding_forward"), 1},
         {ZOB_ARG(ids), ZOB_ARG(table), ZOB_ARG(out), ZOB_ARG(tokens), ZOB_ARG(hidden)});
}

void LevelZeroDevice::embedding_backward(const EmbeddingGradIndex& index, const bf16* dout,
                                         bf16* dtable, std::int64_t hidden) {
  if (index.n_unique <= 0 || hidden <= 0) return;
  launch(Queue::compute, KernelId::embedding_backward,
         {l0::groups_for(hidden, l0::kWg, "embedding_backward"),
          l0::groups_for(index.n_unique, 1, "embedding_backward"), 1},
         {ZOB_ARG(index.unique_ids), ZOB_ARG(index.offsets), ZOB_ARG(index.positions),
          ZOB_ARG(index.n_unique), ZOB_ARG(dout), ZOB_ARG(dtable), ZOB_ARG(hidden)});
}

void LevelZeroDevice::bias_add(bf16* y, const bf16* bias, std::int64_t rows, std::int64_t cols) {
  launch_1d(Queue::compute, KernelId::bias_add, rows * cols, l0::kVec,
            {ZOB_ARG(y), ZOB_ARG(bias), ZOB_ARG(rows), ZOB_ARG(cols)});
}

void LevelZeroDevice::bias_gelu_forward(bf16* pre, const bf16* bias, bf16* act, std::int64_t rows,
                                        std::int64_t cols) {
  launch_1d(Queue::compute, KernelId::bias_gelu_forward, rows * cols, l0::kVec,
            {ZOB_ARG(pre), ZOB_ARG(bias), ZOB_ARG(act), ZOB_ARG(rows), ZOB_ARG(cols)});
}

void LevelZeroDevice::gelu_backward(const bf16* dact, const bf16* pre, bf16* dpre, std::int64_t n) {
  launch_1d(Queue::compute, KernelId::gelu_backward, n, l0::kVec,
            {ZOB_ARG(dact), ZOB_ARG(pre), ZOB_ARG(dpre), ZOB_ARG(n)});
}

void LevelZeroDevice::column_sum(const bf16* x, bf16* out, std::int64_t rows, std::int64_t cols) {
  launch_1d(Queue::compute, KernelId::column_sum, cols, 1,
            {ZOB_ARG(x), ZOB_ARG(out), ZOB_ARG(rows), ZOB_ARG(cols)});
}

void LevelZeroDevice::residual_add(bf16* x, const bf16* y, std::int64_t n) {
  launch_1d(Queue::compute, KernelId::residual_add, n, l0::kVec,
            {ZOB_ARG(x), ZOB_ARG(y), ZOB_ARG(n)});
}

void LevelZeroDevice::fill(bf16* x, float value, std::int64_t n) {
  launch_1d(Queue::compute, KernelId::fill_bf16, n, l0::kVec,
            {ZOB_ARG(x), ZOB_ARG(value), ZOB_ARG(n)});
}

// Two launches on the compute queue, a barrier between them (enter()): up to kSumGroups
// work-groups write partial sums of contiguous chunks to the device's scratch buffer, one
// work-group adds them. The group count and chunk depend only on n, so the summation order
// is fixed.
void LevelZeroDevice::sum(const bf16* x, std::int64_t n, float* result) {
  const std::int64_t groups =
      std::clamp<std::int64_t>((n + l0::kSumMinChunk - 1) / l0::kSumMinChunk, 1, l0::kSumGroups);
  const std::int64_t chunk = std::max<std::int64_t>((n + groups - 1) / groups, 1);
  float* partials = sum_partials_;
  launch(Queue::compute, KernelId::sum_bf16_partial, {static_cast<std::uint32_t>(groups), 1, 1},
         {ZOB_ARG(x), ZOB_ARG(n), ZOB_ARG(chunk), ZOB_ARG(partials)});
  launch(Queue::compute, KernelId::sum_partials, {1, 1, 1},
         {ZOB_ARG(partials), ZOB_ARG(groups), ZOB_ARG(result)});
}

void LevelZeroDevice::cast_f32_to_bf16(const float* src, bf16* dst, std::int64_t n, Queue q) {
  launch_1d(q, KernelId::cast_f32_to_bf16, n, l0::kVec, {ZOB_ARG(src), ZOB_ARG(dst), ZOB_ARG(n)});
}

void LevelZeroDevice::cast_bf16_to_f32(const bf16* src, float* dst, std::int64_t n, Queue q) {
  launch_1d(q, KernelId::cast_bf16_to_f32, n, l0::kVec, {ZOB_ARG(src), ZOB_ARG(dst), ZOB_ARG(n)});
}

#undef ZOB_ARG

}  // namespace zob
