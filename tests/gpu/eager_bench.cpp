// zob_gpu_eager_bench [MODEL [BATCH [SEQ]]]: the device time of the deepspeed schedule's eager
// decoder (src/step/decoder/eager_decoder.hpp), part by part and kernel by kernel, beside the fused
// kernels that stock and overlap run for the same part, on the model's real shapes (default
// Llama-3.2-3B, batch 4, seq 512). Every part is timed with device events around it, 3 warm-up
// runs then the median of 20; each kernel of a part with an event before and after it (one
// profiled run after the timed ones). Per step: each part times its calls per layer times the
// layers (+ the head's norm). Not a test: it asserts nothing; values are fills, not data.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_device.hpp"
#include "step/decoder/eager_decoder.hpp"
#include "zob/errors.hpp"
#include "zob/forwarding_device.hpp"
#include "zob/model.hpp"

namespace {

using zob::bf16;
using zob::Device;
using zob::Queue;
using zob::step_detail::EagerDecoder;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Records an event before every call that issues work, named by the call (elementwise: its op
// and element count), so that one run of a part gives each kernel's device time.
class KernelTimer final : public zob::ForwardingDevice {
 public:
  explicit KernelTimer(Device& inner) : ForwardingDevice(inner), inner_(&inner) {}
  void start() {
    names_.clear();
    used_ = 0;
    on_ = true;
  }
  // Each kernel's name and seconds since start(); `end` closes the last.
  std::vector<std::pair<std::string, double>> stop() {
    mark("end");
    on_ = false;
    inner_->synchronize();
    std::vector<std::pair<std::string, double>> out;
    for (std::size_t i = 0; i + 1 < used_; ++i)
      out.emplace_back(names_[i], inner_->elapsed_seconds(*events_[i], *events_[i + 1]));
    return out;
  }
  void elementwise(zob::ElementwiseOp op, const zob::TensorView& out, const zob::TensorView& a,
                   const zob::TensorView& b, float scalar) override {
    label_ = "elementwise op " + std::to_string(static_cast<int>(op)) + " n " +
             std::to_string(out.elements());
    ForwardingDevice::elementwise(op, out, a, b, scalar);
  }
  void reduce_last(const zob::TensorView& out, const zob::TensorView& in, float scale) override {
    label_ = "reduce_last outputs " + std::to_string(out.elements()) + " terms " +
             std::to_string(in.size[zob::kViewDims - 1]) + " stride " +
             std::to_string(in.stride[zob::kViewDims - 1]);
    ForwardingDevice::reduce_last(out, in, scale);
  }

 private:
  void before(const char* op) override {
    const std::string name = label_.empty() ? op : label_;
    label_.clear();
    if (on_ && name != "record" && name != "synchronize" && name != "queue_wait") mark(name);
  }
  void mark(const std::string& name) {
    while (events_.size() <= used_) events_.push_back(inner_->create_event());
    inner_->record(*events_[used_++], Queue::compute);
    names_.push_back(name);
  }
  Device* inner_;
  std::vector<std::unique_ptr<zob::DeviceEvent>> events_;
  std::vector<std::string> names_;
  std::size_t used_ = 0;
  std::string label_;
  bool on_ = false;
};

struct Part {
  std::string name;
  double per_step;  // calls per step
  std::function<void()> eager, fused;
};

double time_on(Device& dev, const std::function<void()>& work) {
  auto a = dev.create_event();
  auto b = dev.create_event();
  std::vector<double> t;
  for (int i = 0; i < 23; ++i) {
    dev.record(*a, Queue::compute);
    work();
    dev.record(*b, Queue::compute);
    dev.event_synchronize(*b);
    if (i >= 3) t.push_back(dev.elapsed_seconds(*a, *b));
  }
  return median(t);
}

int run(const std::string& model, std::int64_t batch, std::int64_t seq) {
  zob::RunConfig c;
  c.model = zob::resolve_model(model);
  c.batch = batch;
  c.seq = seq;
  c.schedule = zob::Schedule::deepspeed;
  c.decoder = zob::DecoderKernels::eager;
  const auto& arch = c.model.arch;
  const std::int64_t T = c.tokens(), h = c.model.hidden, F = arch.intermediate;
  const std::int64_t H = arch.heads, K = arch.kv_heads, D = arch.head_dim, L = c.model.layers;
  zob::CudaDevice cuda(0);
  KernelTimer timer(cuda);
  std::vector<void*> owned;
  const auto buf = [&](std::int64_t bytes, float value) {
    void* p = cuda.allocate(static_cast<std::size_t>(bytes));
    owned.push_back(p);
    cuda.fill(static_cast<bf16*>(p), value, bytes / 2);
    return p;
  };
  const auto b16 = [&](std::int64_t n, float v = 0.25f) {
    return static_cast<bf16*>(buf(2 * n, v));
  };
  const auto f32 = [&](std::int64_t n) { return static_cast<float*>(buf(4 * n, 0.5f)); };
  void* scratch = buf(static_cast<std::int64_t>(zob::step_detail::eager_scratch_bytes(c)), 0.0f);
  EagerDecoder eager(timer, c, scratch);
  bf16 *x = b16(T * h), *w = b16(h, 1.0f), *y = b16(T * h), *dy = b16(T * h, 0.01f),
       *dx = b16(T * h), *dw = b16(h);
  const EagerDecoder::NormSaved saved{f32(T * h), f32(T), b16(T * h)};
  bf16 *gate = b16(T * F), *up = b16(T * F), *sg = b16(T * F), *act = b16(T * F),
       *dact = b16(T * F, 0.01f), *dgate = b16(T * F), *dup = b16(T * F);
  bf16 *q = b16(T * H * D), *qh = b16(T * H * D), *k = b16(T * K * D), *kh = b16(T * H * D);
  cuda.synchronize();
  const float eps = static_cast<float>(arch.rms_norm_eps);
  const double norms = 2.0 * static_cast<double>(L) + 1.0, layers = static_cast<double>(L);
  std::vector<Part> parts = {
      {"rmsnorm forward", norms, [&] { eager.rmsnorm_forward(x, w, y, saved, T, h, eps); },
       [&] { timer.rmsnorm_forward(x, w, y, saved.rstd, T, h, eps); }},
      {"rmsnorm backward", norms, [&] { eager.rmsnorm_backward(dy, w, saved, dx, dw, T, h); },
       [&] { timer.rmsnorm_backward(dy, x, w, saved.rstd, dx, dw, T, h); }},
      {"silu and mul forward", layers,
       [&] {
         eager.silu_forward(gate, sg, T * F);
         eager.gated_mul_forward(sg, up, act, T * F);
       },
       [&] { timer.silu_mul_forward(gate, up, act, T * F); }},
      {"silu and mul backward", layers,
       [&] { eager.silu_mul_backward(dact, gate, up, sg, dgate, dup, T * F); },
       [&] { timer.silu_mul_backward(dact, gate, up, dgate, dup, T * F); }},
      {"q: rotary forward", layers, [&] { eager.rotary_forward(q, qh, H); },
       [&] { timer.to_heads(q, qh, c.batch, c.seq, H, D, 1, arch.rope_theta); }},
      {"k: rotary forward + GQA repeat", layers,
       [&] {
         eager.rotary_forward(k, eager.kv_scratch(), K);
         eager.repeat_kv(eager.kv_scratch(), kh, false);
       },
       [&] { timer.to_heads(k, kh, c.batch, c.seq, K, D, H / K, arch.rope_theta); }},
      {"v: GQA repeat", layers, [&] { eager.repeat_kv(k, kh, true); },
       [&] { timer.to_heads(k, kh, c.batch, c.seq, K, D, H / K, 0.0); }},
      {"q: rotary backward", layers, [&] { eager.rotary_backward(qh, q, H); },
       [&] { timer.from_heads(qh, q, c.batch, c.seq, H, D, 1, arch.rope_theta); }},
      {"k: GQA sum + rotary backward", layers,
       [&] {
         eager.sum_repeats(kh, eager.kv_scratch(), false);
         eager.rotary_backward(eager.kv_scratch(), k, K);
       },
       [&] { timer.from_heads(kh, k, c.batch, c.seq, K, D, H / K, arch.rope_theta); }},
      {"v: GQA sum", layers, [&] { eager.sum_repeats(kh, k, true); },
       [&] { timer.from_heads(kh, k, c.batch, c.seq, K, D, H / K, 0.0); }},
  };
  std::printf(
      "model %s, batch %lld, seq %lld: tokens %lld, hidden %lld, intermediate %lld, "
      "heads %lld / %lld, head_dim %lld, layers %lld; device %s\n",
      model.c_str(), static_cast<long long>(batch), static_cast<long long>(seq),
      static_cast<long long>(T), static_cast<long long>(h), static_cast<long long>(F),
      static_cast<long long>(H), static_cast<long long>(K), static_cast<long long>(D),
      static_cast<long long>(L), cuda.info().name.c_str());
  std::printf("%-32s %12s %12s %10s %14s %14s\n", "part", "eager us", "fused us", "calls/step",
              "eager ms/step", "fused ms/step");
  double eager_step = 0, fused_step = 0;
  std::vector<std::vector<std::pair<std::string, double>>> kernels;
  for (Part& p : parts) {
    const double e = time_on(cuda, p.eager), f = time_on(cuda, p.fused);
    eager_step += e * p.per_step;
    fused_step += f * p.per_step;
    std::printf("%-32s %12.1f %12.1f %10.0f %14.2f %14.2f\n", p.name.c_str(), e * 1e6, f * 1e6,
                p.per_step, e * p.per_step * 1e3, f * p.per_step * 1e3);
    timer.start();
    p.eager();
    kernels.push_back(timer.stop());
  }
  std::printf("%-32s %12s %12s %10s %14.2f %14.2f\n", "sum per step", "", "", "", eager_step * 1e3,
              fused_step * 1e3);
  std::printf("\nthe eager parts kernel by kernel (one profiled run, us):\n");
  for (std::size_t i = 0; i < parts.size(); ++i) {
    std::printf("%s\n", parts[i].name.c_str());
    for (const auto& [name, s] : kernels[i]) std::printf("  %-56s %10.1f\n", name.c_str(), s * 1e6);
  }
  for (void* p : owned) cuda.deallocate(p);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string model = argc > 1 ? argv[1] : "Llama-3.2-3B";
    const std::int64_t batch = argc > 2 ? std::atoll(argv[2]) : 4;
    const std::int64_t seq = argc > 3 ? std::atoll(argv[3]) : 512;
    return run(model, batch, seq);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zob_gpu_eager_bench: %s\n", e.what());
    return 3;
  }
}
