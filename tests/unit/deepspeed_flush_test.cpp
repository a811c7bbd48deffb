// The gradient flush of the deepspeed schedule (src/step/deepspeed/deepspeed_blocks.cpp,
// flush_tensor_copies), operation by operation, as DeepSpeed 0.19.8's partition_grads issues
// them for every flushed tensor on the reduce stream: the bf16 gradient D2H, its H2D back, the
// norm's fp32 cast of it (in views), the fp32 cast of it, and that fp32 D2H. Removing any one
// of them leaves the arithmetic intact for some of them, so the results alone cannot pin them:
// a recording device does.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.hpp"
#include "small_model_config.hpp"
#include "zob/forwarding_device.hpp"
#include "zob/model.hpp"
#include "zob/step.hpp"

namespace zob {
namespace {

// Every copy and fp32 cast, in the order issued, with its queue and pointers.
struct Op {
  std::string what;  // "d2h", "h2d", "cast"
  Queue queue = Queue::compute;
  const void* src = nullptr;
  const void* dst = nullptr;
  std::size_t size = 0;  // bytes for a copy, elements for a cast
};

class RecordingDevice final : public ForwardingDevice {
 public:
  explicit RecordingDevice(Device& inner) : ForwardingDevice(inner) {}
  void copy_to_device(Queue q, void* device, const void* host, std::size_t bytes) override {
    ops.push_back({"h2d", q, host, device, bytes});
    ForwardingDevice::copy_to_device(q, device, host, bytes);
  }
  void copy_to_host(Queue q, void* host, const void* device, std::size_t bytes) override {
    ops.push_back({"d2h", q, device, host, bytes});
    ForwardingDevice::copy_to_host(q, host, device, bytes);
  }
  void cast_bf16_to_f32(const bf16* src, float* dst, std::int64_t n, Queue q) override {
    ops.push_back({"cast", q, src, dst, static_cast<std::size_t>(n)});
    ForwardingDevice::cast_bf16_to_f32(src, dst, n, q);
  }
  std::vector<Op> ops;

 private:
  void before(const char*) override {}
};

// One flushed tensor's operations on the reduce (d2h) queue, from its bf16 D2H to its fp32 D2H.
struct Flushed {
  std::size_t elems = 0;
  std::size_t norm_cast_elems = 0;  // cast from the bf16 copy back, into anything but the fp32
  bool full_cast = false;           // one cast of every element of the copy back
  bool fp32_copied = false;         // the full cast's output, D2H, 4 B per element
};

std::vector<Flushed> flushed_tensors(const std::vector<Op>& ops) {
  std::vector<Op> d2h;
  for (const Op& op : ops) {
    if (op.queue == Queue::d2h) d2h.push_back(op);
  }
  std::vector<Flushed> out;
  for (std::size_t i = 0; i + 1 < d2h.size(); ++i) {
    // The bf16 gradient to the host, then straight back from that host buffer.
    const Op& down = d2h[i];
    const Op& back = d2h[i + 1];
    if (down.what != "d2h" || back.what != "h2d" || back.src != down.dst ||
        back.size != down.size) {
      continue;
    }
    Flushed f;
    f.elems = back.size / 2;
    const auto* begin = static_cast<const bf16*>(back.dst);
    const void* fp32 = nullptr;
    for (std::size_t j = i + 2; j < d2h.size(); ++j) {
      const Op& op = d2h[j];
      if (op.what == "h2d") break;  // the next tensor's copy back
      const auto* src = static_cast<const bf16*>(op.src);
      if (op.what == "cast" && src >= begin && src < begin + f.elems) {
        if (src == begin && op.size == f.elems && fp32 == nullptr && f.norm_cast_elems > 0) {
          f.full_cast = true;
          fp32 = op.dst;
        } else {
          f.norm_cast_elems += op.size;
        }
      }
      if (op.what == "d2h" && fp32 != nullptr && op.src == fp32) {
        f.fp32_copied = op.size == 4 * f.elems;
        break;
      }
    }
    out.push_back(f);
  }
  return out;
}

TEST(DeepSpeedFlush, EveryTensorIsCopiedDownAndBackThenCastTwiceAndCopiedAsFp32) {
  RunConfig c = test::small_model_config(1, 0, 2, 7);
  c.schedule = Schedule::deepspeed;
  CpuDevice cpu(2);
  RecordingDevice dev(cpu);
  const ArmResult r = run_arm(c, Arm::pageable, dev);
  ASSERT_TRUE(r.ok) << r.error;
  std::size_t tensors = 0;
  for (const ModuleSlice& m : ModelLayout::build(c.model).modules) tensors += m.tensors.size();
  const std::vector<Flushed> flushed = flushed_tensors(dev.ops);
  // One step: every parameter tensor's gradient is flushed once.
  ASSERT_EQ(flushed.size(), tensors);
  for (std::size_t k = 0; k < flushed.size(); ++k) {
    const Flushed& f = flushed[k];
    SCOPED_TRACE("flushed tensor " + std::to_string(k) + " of " + std::to_string(f.elems));
    EXPECT_EQ(f.norm_cast_elems, f.elems) << "the norm's fp32 cast does not cover the tensor";
    EXPECT_TRUE(f.full_cast) << "no fp32 cast of the copy back after the norm's";
    EXPECT_TRUE(f.fp32_copied) << "the fp32 cast's output is not what goes to the host";
  }
}

}  // namespace
}  // namespace zob
