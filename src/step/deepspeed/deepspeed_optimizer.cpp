// DeepSpeedRunner's optimizer step (stage3.py step(): per sub-group unscale, the optimizer, the
// fp32 -> bf16 reassign) and, for offload_optimizer.ratio < 1 (issue 38), the sub-groups
// DeepSpeed keeps on the device: sub-group i < int((1 - ratio) * sub-groups) has its fp32
// master, fp32 gradient and both Adam states in device memory (_create_fp32_partitions,
// initialize_optimizer_states, torch's lazy state init) and is updated by torch.optim.AdamW
// (DeepSpeed's backup_optimizer, foreach: device_adam.hpp); its flushed gradients are copied on
// the device instead of to the host; its reassign is a blocking copy_ that PyTorch runs, for a
// CPU bf16 destination, as a D2H of the fp32 into a fresh pageable temporary and a CPU cast
// (copy_requires_temporaries converts on the CPU for blocking copies), and in the copy_back
// loop as a device cast into the resident bf16 parameters.
#include <fmt/format.h>
#include <algorithm>
#include <string>

#include "step/deepspeed/deepspeed_runner.hpp"
#include "step/device_adam.hpp"
#include "zob/adam.hpp"
#include "zob/errors.hpp"

namespace zob::step_detail {

std::size_t ds_device_sub_groups(std::size_t groups, double ratio) {
  // Python's int() of a double: truncation toward zero, computed in doubles as stage3.py does.
  const double kept = (1.0 - ratio) * static_cast<double>(groups);
  return std::min(groups, static_cast<std::size_t>(kept));
}

DsSubGroups ds_sub_groups(const DeepSpeedPlan& plan, const DsPartitions& parts,
                          const RunConfig& c) {
  check_step_config(c, "run_arm");
  DsSubGroups s;
  // _create_fp16_sub_groups: tensors in order, a sub-group closed once it holds at least
  // sub_group_size elements (partition_numel: this rank's part, padding included) or at the
  // last tensor; one sub-group when sub_group_size covers every element.
  std::int64_t begin = 0, at = 0;
  for (std::size_t id = 0; id < plan.tensors.size(); ++id) {
    at = parts.offset[id] + parts.part[id];
    const bool last = id + 1 == plan.tensors.size();
    if ((c.sub_group_size < parts.total && at - begin >= c.sub_group_size) || last) {
      s.groups.push_back({begin, at, 0});
      begin = at;
    }
  }
  if (s.groups.empty() || s.groups.back().end != parts.total) {
    throw std::logic_error("deepspeed: the sub-groups do not cover this rank's partitions");
  }
  s.on_device = ds_device_sub_groups(s.groups.size(), c.offload_ratio);
  s.cpu_begin = s.on_device == 0 ? 0 : s.groups[s.on_device - 1].end;
  for (std::size_t g = s.on_device; g < s.groups.size(); ++g) {
    SubGroup& sg = s.groups[g];
    sg.first_piece = s.pieces++;  // the copy_back loop copies a sub-group whole (one copy_)
  }
  return s;
}

// The device sub-groups' fp32 master, gradient and Adam states, one pool block each as
// DeepSpeed's tensors are (the states: zeros, torch's lazy init on the first step), the master
// made from the initial parameters as the host's is.
void DeepSpeedRunner::allocate_device_optimizer() {
  device_opt_.clear();
  for (std::size_t g = 0; g < groups_.on_device; ++g) {
    const SubGroup& sg = groups_.groups[g];
    const auto bytes = static_cast<std::size_t>(sg.end - sg.begin) * 4;
    DeviceSubGroup d{DeviceBuffer(mem_, bytes), DeviceBuffer(mem_, bytes),
                     DeviceBuffer(mem_, bytes), DeviceBuffer(mem_, bytes)};
    dev_.fill_zero(Queue::compute, d.grad.as<void>(), bytes);
    dev_.fill_zero(Queue::compute, d.exp_avg.as<void>(), bytes);
    dev_.fill_zero(Queue::compute, d.exp_avg_sq.as<void>(), bytes);
    device_opt_.push_back(std::move(d));
  }
}

// Initial fp32 parameters of [lo, hi) of this rank's arrays into dst (dst[0] is element lo):
// one rank, the flat range; N ranks, each tensor's partition (padding zero).
void DeepSpeedRunner::initial_rank_range(std::int64_t lo, std::int64_t hi, float* dst) const {
  if (!sharded()) {
    initial_parameters_range(layout_, cfg_.seed, lo, hi, dst, pool_.get());
    return;
  }
  std::fill(dst, dst + (hi - lo), 0.0f);
  for (std::size_t id = 0; id < plan_.tensors.size(); ++id) {
    const std::int64_t at = parts_.offset[id];
    if (at < lo || at >= hi) continue;  // sub-groups end at tensor boundaries
    const DsTensor& t = plan_.tensors[id];
    const std::int64_t from = t.offset + parts_.rank * parts_.part[id];
    const std::int64_t n = parts_.real(t, static_cast<int>(id), parts_.rank);
    initial_parameters_range(layout_, cfg_.seed, from, from + n, dst + (at - lo), pool_.get());
  }
}

// The device part's start: its masters from the initial parameters and, under offload_param,
// their bf16 copies in the pinned host buffers the fetches read.
void DeepSpeedRunner::init_device_masters() {
  for (std::size_t g = 0; g < groups_.on_device; ++g) {
    const SubGroup& sg = groups_.groups[g];
    const std::int64_t n = sg.end - sg.begin;
    HostBuffer init(static_cast<std::size_t>(n) * 4, HostMemoryMode::pageable, nullptr,
                    "initial fp32 master (device sub-group)", pool_.get());
    initial_rank_range(sg.begin, sg.end, init.as<float>());
    dev_.copy_to_device(Queue::compute, device_opt_[g].master.as<void>(), init.data(),
                        static_cast<std::size_t>(n) * 4);
    if (offload()) {
      cast_f32_to_bf16_host(init.as<float>(), partitions_.as<bf16>() + sg.begin, n, *pool_);
      cast_f32_to_bf16_host(init.as<float>(), pbf16_.as<bf16>() + sg.begin, n, *pool_);
    } else {
      dev_.cast_f32_to_bf16(device_opt_[g].master.as<float>(), device_params() + sg.begin, n);
    }
    dev_.synchronize();  // init goes out of scope
  }
}

float* DeepSpeedRunner::device_grad_at(std::int64_t at) {
  for (std::size_t g = 0; g < groups_.on_device; ++g) {
    const SubGroup& sg = groups_.groups[g];
    if (at >= sg.begin && at < sg.end) return device_opt_[g].grad.as<float>() + (at - sg.begin);
  }
  throw std::logic_error("deepspeed: a device gradient outside the device sub-groups");
}

const float* DeepSpeedRunner::master() {
  if (groups_.on_device == 0) return master_.as<float>();
  full_master_.assign(static_cast<std::size_t>(parts_.total), 0.0f);
  for (std::size_t g = 0; g < groups_.on_device; ++g) {
    const SubGroup& sg = groups_.groups[g];
    dev_.copy_to_host(Queue::compute, full_master_.data() + sg.begin,
                      device_opt_[g].master.as<void>(),
                      static_cast<std::size_t>(sg.end - sg.begin) * 4);
  }
  dev_.synchronize();
  if (cpu_elems() > 0) {
    std::copy(master_.as<float>(), master_.as<float>() + cpu_elems(),
              full_master_.begin() + groups_.cpu_begin);
  }
  return full_master_.data();
}

void DeepSpeedRunner::optimizer(int t, StepSample& s, Clock::time_point t0) {
  for (std::size_t gi = 0; gi < groups_.groups.size(); ++gi) {
    if (gi < groups_.on_device) {
      device_optimizer(gi, t, s, t0);
    } else {
      host_optimizer(gi, t, s, t0);
    }
  }
}

void DeepSpeedRunner::host_optimizer(std::size_t gi, int t, StepSample& s, Clock::time_point t0) {
  const AdamHyper hyper;
  const SubGroup& sg = groups_.groups[gi];
  const std::int64_t n = sg.end - sg.begin, at = sg.begin - groups_.cpu_begin;
  phase_ = Phase::grad_scale;
  const auto ts = Clock::now();
  scale_host(grads_.as<float>() + at, n, 1.0f, *pool_);  // 1 / loss_scale, bf16: 1
  phase_ = Phase::adam;
  const auto ta = Clock::now();
  adam_step(master_.as<float>() + at, grads_.as<float>() + at, exp_avg_.as<float>() + at,
            exp_avg_sq_.as<float>() + at, n, t, hyper, *pool_);
  phase_ = offload() ? Phase::host_cast : Phase::copy_back;
  const auto tc = Clock::now();
  if (offload()) {
    cast_f32_to_bf16_host(master_.as<float>() + at, pbf16_.as<bf16>() + sg.begin, n, *pool_);
  } else {
    copy_back_sub_group(sg);
  }
  const auto te = Clock::now();
  host_.scale += seconds_between(ts, ta);
  host_.adam += seconds_between(ta, tc);
  (offload() ? host_.cast : host_.copy_back) += seconds_between(tc, te);
  const std::string tag = fmt::format("[{}]", gi);
  s.spans.push_back(
      {"cpu_adam", "grad_scale" + tag, seconds_between(t0, ts), seconds_between(ts, ta)});
  s.spans.push_back({"cpu_adam", "adam" + tag, seconds_between(t0, ta), seconds_between(ta, tc)});
  if (offload())
    s.spans.push_back(
        {"cpu_adam", "host_cast" + tag, seconds_between(t0, tc), seconds_between(tc, te)});
}

// A sub-group kept on the device: grad.mul_(1 / scale), torch's AdamW (its sqrt temporary from
// the pool, as the caching allocator gives it), then the reassign (see the top of the file).
void DeepSpeedRunner::device_optimizer(std::size_t gi, int t, StepSample& s, Clock::time_point t0) {
  const SubGroup& sg = groups_.groups[gi];
  DeviceSubGroup& d = device_opt_[gi];
  const std::int64_t n = sg.end - sg.begin;
  const auto bytes = static_cast<std::size_t>(n) * 4;
  phase_ = Phase::device_adam;
  const auto ta = Clock::now();
  dev_.record(device_adam_start_[gi], Queue::compute);
  device_scale(dev_, d.grad.as<float>(), n, 1.0f);
  auto* temp = static_cast<float*>(mem_.allocate(bytes));
  device_adamw_step(dev_, d.master.as<float>(), d.grad.as<float>(), d.exp_avg.as<float>(),
                    d.exp_avg_sq.as<float>(), temp, n, t, AdamHyper{});
  mem_.deallocate_after(temp, Queue::compute);
  dev_.record(device_adam_end_[gi], Queue::compute);
  phase_ = offload() ? Phase::host_cast : Phase::copy_back;
  const auto tc = Clock::now();
  if (offload()) {  // fp16_partitioned_groups_flat[i].data.copy_(fp32 on the device)
    // at::empty_like on the CPU: fresh memory of PyTorch's allocator, faulted in by the copy.
    HostBuffer staged(bytes, HostMemoryMode::pageable, nullptr, "fp32 reassign temporary", nullptr,
                      HostPages::as_pytorch_cpu_allocator);
    dev_.copy_to_host(Queue::compute, staged.data(), d.master.as<void>(), bytes);
    dev_.record(reassign_done_[gi], Queue::compute);
    dev_.event_synchronize(reassign_done_[gi]);  // a blocking copy_: the host waits for it
    cast_f32_to_bf16_host(staged.as<float>(), pbf16_.as<bf16>() + sg.begin, n, *pool_);
  } else {
    dev_.cast_f32_to_bf16(d.master.as<float>(), device_params() + sg.begin, n);
  }
  const auto te = Clock::now();
  host_.device_adam += seconds_between(ta, tc);
  (offload() ? host_.cast : host_.copy_back) += seconds_between(tc, te);
  const std::string tag = fmt::format("[{}]", gi);
  s.spans.push_back(
      {"cpu_adam", "device_adam" + tag, seconds_between(t0, ta), seconds_between(ta, tc)});
  s.spans.push_back({"cpu_adam", (offload() ? "reassign_d2h" : "reassign_cast") + tag,
                     seconds_between(t0, tc), seconds_between(tc, te)});
}

}  // namespace zob::step_detail
