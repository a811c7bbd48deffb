// --schedule deepspeed with --gpus N > 1: what DeepSpeed 0.19.8's ZeRO-3 adds to the one-rank
// schedule (deepspeed_step.cpp) when it has N ranks, on the same queues:
//  - partitions per tensor (partition_parameters.py): rank r holds elements
//    [r * part, (r + 1) * part) of every tensor, part = ceil(count / N);
//  - a fetch handle is all_gather_coalesced (_all_gather_dtype): each tensor's partition is
//    copied into this rank's slot of one flat buffer (torch.cat; an H2D copy under
//    offload_param, where the partition lives in pinned host memory), one all-gather of the
//    flat buffer, then the handle's wait() rebuilds every tensor from its N pieces (torch.cat
//    per tensor). The tool runs the wait's copies right behind the all-gather on the same
//    queue (DeepSpeed runs them on that stream when the module needs the handle, behind any
//    prefetches issued since), so one flat buffer serves every handle; a single-tensor handle
//    takes the coalesced path too (DeepSpeed all-gathers it straight into the parameter);
//  - a bucket flush is __avg_scatter_grads -> reduce_scatter_coalesced: the bucket's
//    gradients interleaved rank by rank into one flat buffer (torch.cat), one reduce-scatter,
//    then partition_grads per tensor on this rank's partition (deepspeed_step.cpp's
//    flush_tensor_copies);
//  - the persistent tensors are all-gathered at the start and after every optimizer step
//    (_post_step), in both loops.
// Where the tool differs, on purpose, so that every schedule computes the same bits: DeepSpeed
// reduces in bf16 and averages (div_ by N before the reduce-scatter); the tool sums in fp32 in
// rank order (the Collectives contract; docs/multi-gpu.md) and skips the division, so the
// optimizer's fp32 gradient is that sum and the D2H bf16 copy carries this rank's own bf16
// piece of the bucket (same bytes, same memory; its values only feed the norm's casts).
#include <fmt/format.h>
#include <algorithm>
#include <string>
#include <vector>

#include "step/deepspeed/deepspeed_runner.hpp"
#include "step/ranks/partitioned_step.hpp"

namespace zob::step_detail {

DsPartitions DsPartitions::build(const DeepSpeedPlan& plan, int ranks, int rank) {
  DsPartitions p;
  p.ranks = ranks;
  p.rank = rank;
  for (const DsTensor& t : plan.tensors) {
    const std::int64_t part = (t.count + ranks - 1) / ranks;
    p.part.push_back(part);
    // One rank: the flat array itself, so N = 1 is the one-GPU schedule bit for bit.
    p.offset.push_back(ranks == 1 ? t.offset : p.total);
    p.total = ranks == 1 ? std::max(p.total, t.offset + t.count) : p.total + part;
  }
  return p;
}

std::int64_t DsPartitions::real(const DsTensor& t, int id, int r) const {
  const std::int64_t part_elems = part[static_cast<std::size_t>(id)];
  return std::clamp<std::int64_t>(t.count - r * part_elems, 0, part_elems);
}

std::int64_t DsPartitions::handle_elems(const std::vector<int>& ids) const {
  std::int64_t n = 0;
  for (int id : ids) n += part[static_cast<std::size_t>(id)];
  return n;
}

std::vector<std::int64_t> DsPartitions::rank_elems(const DeepSpeedPlan& plan) const {
  std::vector<std::int64_t> out;
  for (std::size_t id = 0; id < plan.tensors.size(); ++id) {
    out.push_back(real(plan.tensors[id], static_cast<int>(id), rank));
  }
  return out;
}

DsRankBuffers ds_rank_buffers(const DeepSpeedPlan& plan, const DsPartitions& parts) {
  const auto N = static_cast<std::uint64_t>(parts.ranks);
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  DsRankBuffers b;
  std::int64_t handle = parts.handle_elems(plan.persistent), bucket = 0;
  b.handles = plan.persistent.empty() ? 0 : 1;
  for (const DsVisit& v : plan.visits) {
    for (const auto* ids : {&v.fetch, &v.prefetch}) {
      handle = std::max(handle, parts.handle_elems(*ids));
      if (!ids->empty()) ++b.handles;
    }
  }
  for (const DsFlush& f : plan.flushes) bucket = std::max(bucket, parts.handle_elems(f.tensors));
  b.gathers = b.handles - (plan.persistent.empty() ? 0 : 1) + plan.persistent.size();
  if (!plan.offload_param) b.partitions = 2 * u(parts.total);
  b.gather_flat = 2 * N * u(handle);
  b.bucket_in = 2 * N * u(bucket);
  b.bucket_out = 4 * u(bucket);
  return b;
}

// The flat buffers of the largest handle and bucket, and the collectives' events.
void DeepSpeedRunner::allocate_rank_buffers() {
  const DsRankBuffers b = ds_rank_buffers(plan_, parts_);
  if (b.partitions > 0) part_dev_ = DeviceBuffer(mem_, b.partitions);
  gather_flat_ = DeviceBuffer(mem_, b.gather_flat);
  bucket_in_ = DeviceBuffer(mem_, b.bucket_in);
  bucket_out_ = DeviceBuffer(mem_, b.bucket_out);
  // The padding of the interleaved buckets is summed and dropped; start it finite.
  dev_.fill_zero(Queue::d2h, bucket_in_.as<void>(), b.bucket_in);
  gathers_.start = make_events(dev_, b.gathers);
  gathers_.end = make_events(dev_, b.gathers);
  handle_done_ = make_events(dev_, b.handles);
  scatters_.start = make_events(dev_, plan_.flushes.size());
  scatters_.end = make_events(dev_, plan_.flushes.size());
}

// all_gather_coalesced(ids) and the handle's wait, on queue q; last_fetch_ = its end.
void DeepSpeedRunner::gather_handle(const std::vector<int>& ids, Queue q, const char* what) {
  std::vector<int> sorted = ids;  // DeepSpeed sorts a handle's parameters by ds_id
  std::sort(sorted.begin(), sorted.end());
  const int N = ranks(), me = parts_.rank;
  const std::int64_t psz = parts_.handle_elems(sorted);
  make_live(sorted, q);
  bf16* flat = gather_flat_.as<bf16>();
  std::int64_t at = 0;
  for (int id : sorted) {
    const auto i = static_cast<std::size_t>(id);
    const auto bytes = static_cast<std::size_t>(parts_.part[i]) * 2;
    bf16* slot = flat + me * psz + at;
    if (offload()) {  // ds_tensor.to(device): the pinned host partition
      copy(fetches_, q, "h2d", what + tensor(id).name, true, slot,
           pbf16_.as<bf16>() + parts_.offset[i], bytes);
    } else {
      dev_.copy_on_device(q, slot, part_dev_.as<bf16>() + parts_.offset[i], bytes);
    }
    at += parts_.part[i];
  }
  const std::size_t k = gathers_.used++;
  dev_.record(gathers_.start[k], q);
  data_->enqueue_all_gather(dev_, q, flat + me * psz, flat, static_cast<std::size_t>(psz) * 2);
  dev_.record(gathers_.end[k], q);
  gathers_.names.push_back(fmt::format("all_gather[{} tensors]", sorted.size()));
  gathers_.tracks.push_back(q == Queue::compute ? "compute" : "h2d");
  gather_bytes_ += 2 * static_cast<std::uint64_t>(psz) * static_cast<std::uint64_t>(N - 1);
  at = 0;
  for (int id : sorted) {  // the wait: each tensor from its N pieces
    const auto i = static_cast<std::size_t>(id);
    const DsTensor& t = tensor(id);
    for (int r = 0; r < N; ++r) {
      const std::int64_t n = parts_.real(t, id, r);
      dev_.copy_on_device(q, param_of(id) + r * parts_.part[i], flat + r * psz + at,
                          static_cast<std::size_t>(n) * 2);
    }
    at += parts_.part[i];
  }
  const std::size_t h = handles_used_++;
  dev_.record(handle_done_[h], q);
  last_fetch_ = &handle_done_[h];
}

// _post_step's gather of the persistent tensors (_allgather_params_coalesced, not the
// coalesced handle of a fetch): per tensor its partition to the device (ds_tensor.to) and one
// all-gather of it alone, on the compute queue; the caller waits once at the end. DeepSpeed
// then uses a view of the gathered buffer; the tool copies it to the parameter's place.
void DeepSpeedRunner::gather_persistent_ranks() {
  const int N = ranks(), me = parts_.rank;
  bf16* region = gather_flat_.as<bf16>();
  for (int id : plan_.persistent) {
    const auto i = static_cast<std::size_t>(id);
    const DsTensor& t = tensor(id);
    const std::int64_t p = parts_.part[i];
    const bf16* src =
        offload() ? pbf16_.as<bf16>() + parts_.offset[i] : part_dev_.as<bf16>() + parts_.offset[i];
    if (offload()) {
      copy(fetches_, Queue::compute, "h2d", "gather:" + t.name, true, region + me * p, src,
           static_cast<std::size_t>(p) * 2);
    } else {
      dev_.copy_on_device(Queue::compute, region + me * p, src, static_cast<std::size_t>(p) * 2);
    }
    const std::size_t k = gathers_.used++;
    dev_.record(gathers_.start[k], Queue::compute);
    data_->enqueue_all_gather(dev_, Queue::compute, region + me * p, region,
                              static_cast<std::size_t>(p) * 2);
    dev_.record(gathers_.end[k], Queue::compute);
    gathers_.names.push_back("all_gather[" + t.name + "]");
    gathers_.tracks.push_back("compute");
    gather_bytes_ += 2 * static_cast<std::uint64_t>(p) * static_cast<std::uint64_t>(N - 1);
    // The N pieces back to back are the tensor, its padding last.
    dev_.copy_on_device(Queue::compute, persistent_slot(id), region,
                        static_cast<std::size_t>(t.count) * 2);
    region += N * p;
  }
  const std::size_t h = handles_used_++;
  dev_.record(handle_done_[h], Queue::compute);
  last_fetch_ = &handle_done_[h];
}

// One bucket on the reduce stream: interleave, reduce-scatter, partition_grads per tensor.
void DeepSpeedRunner::flush_ranks(const DsFlush& f) {
  const int N = ranks(), me = parts_.rank;
  const std::int64_t psz = parts_.handle_elems(f.tensors);
  bf16* in = bucket_in_.as<bf16>();
  for (int r = 0; r < N; ++r) {
    std::int64_t at = 0;
    for (int id : f.tensors) {
      const auto i = static_cast<std::size_t>(id);
      const DsTensor& t = tensor(id);
      dev_.copy_on_device(Queue::d2h, in + r * psz + at, bucket_of(id) + r * parts_.part[i],
                          static_cast<std::size_t>(parts_.real(t, id, r)) * 2);
      at += parts_.part[i];
    }
  }
  const std::size_t k = scatters_.used++;
  dev_.record(scatters_.start[k], Queue::d2h);
  data_->enqueue_reduce_scatter(dev_, Queue::d2h, in, ElemType::bf16, bucket_out_.as<float>(),
                                static_cast<std::size_t>(psz));
  dev_.record(scatters_.end[k], Queue::d2h);
  scatters_.names.push_back(fmt::format("reduce_scatter[{} tensors]", f.tensors.size()));
  scatters_.tracks.push_back("d2h");
  scatter_bytes_ += 2 * static_cast<std::uint64_t>(psz) * static_cast<std::uint64_t>(N - 1);
  std::int64_t at = 0;
  for (int id : f.tensors) {
    flush_tensor_copies(id, in + me * psz + at, bucket_out_.as<float>() + at);
    at += parts_.part[static_cast<std::size_t>(id)];
  }
}

// The collectives' device time and bytes (N - 1 of every N pieces cross the wire); their host
// time is in the phases that issue them (param_fetch / grad_offload), except the copy_back
// loop's waits for the gathers, which only the gathers explain.
void DeepSpeedRunner::report_collectives(StepSample& s) {
  const auto total = [&](TimedCopies& c) {
    double d = 0;
    for (std::size_t i = 0; i < c.used; ++i) {
      const double span = dev_.elapsed_seconds(c.start[i], c.end[i]);
      d += span;
      s.spans.push_back(
          {c.tracks[i], c.names[i], dev_.elapsed_seconds(*origin_, c.start[i]), span});
    }
    return d;
  };
  const double gather_host = offload() ? 0.0 : host_.fetch_wait + host_.gather;
  const auto gathered =
      static_cast<std::int64_t>(gather_bytes_ / 2 / static_cast<std::uint64_t>(ranks() - 1));
  s.set_phase(Phase::all_gather, gather_host, total(gathers_), gather_bytes_, gathered);
  s.set_phase(Phase::reduce_scatter, 0, total(scatters_), scatter_bytes_, parts_.total);
}

std::int64_t DeepSpeedRunner::fetched_partition_elements() const {
  if (!sharded()) return plan_.fetched_elements();
  std::int64_t n = parts_.handle_elems(plan_.persistent);
  for (const DsVisit& v : plan_.visits)
    n += parts_.handle_elems(v.fetch) + parts_.handle_elems(v.prefetch);
  return n;
}

std::vector<float> DeepSpeedRunner::module_shard_of_master() {
  const float* master = this->master();  // the device sub-groups' part read back
  if (!sharded()) return {master, master + parts_.total};
  // Tensor by tensor (at most one tensor gathered at a time): every rank's partitions of it,
  // back to back, are the tensor (its padding last); this rank keeps what falls in its
  // ShardLayout shard of the tensor's module (padding zero, as the stock schedule's).
  const int N = ranks();
  const ShardLayout shards = ShardLayout::build(layout_, N);
  std::vector<float> shard(static_cast<std::size_t>(shards.total), 0.0f), tensor_all;
  for (std::size_t id = 0; id < plan_.tensors.size(); ++id) {
    const DsTensor& t = plan_.tensors[id];
    const std::int64_t p = parts_.part[id];
    tensor_all.resize(static_cast<std::size_t>(N * p));
    comm_->all_gather(master + parts_.offset[id], tensor_all.data(),
                      static_cast<std::size_t>(p) * 4);
    const auto m = static_cast<std::size_t>(t.module);
    const ModuleSlice& mod = layout_.modules[m];
    const std::int64_t lo = mod.offset + std::min(mod.count, parts_.rank * shards.shard[m]);
    const std::int64_t hi = mod.offset + std::min(mod.count, (parts_.rank + 1) * shards.shard[m]);
    const std::int64_t a = std::max(lo, t.offset), b = std::min(hi, t.offset + t.count);
    if (a < b) {
      std::copy(tensor_all.begin() + (a - t.offset), tensor_all.begin() + (b - t.offset),
                shard.begin() + shards.offset[m] + (a - lo));
    }
  }
  return shard;
}

}  // namespace zob::step_detail
