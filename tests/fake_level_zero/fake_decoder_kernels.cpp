// The fake driver's launch checks of the decoder-transformer kernels (kernels/decoder.cl and
// gemm.cl's gemm_batched), each bound to the CPU reference (cpu_decoder_kernels.hpp) that runs
// with FAKE_ZE_KERNELS=cpu. The rotary kernels get their cos / sin from the backend's table,
// not theta, so their CPU run applies the table with the reference's fp32 expressions.
#include "backends/cpu/cpu_decoder_kernels.hpp"
#include "backends/cpu/cpu_tensor_ops.hpp"
#include "fake_kernel_args.hpp"
#include "zob/device.hpp"

namespace fake_ze::launch_check {
namespace {

using zob::bf16;

float f(bf16 v) { return zob::bf16_to_f32(v); }

// One work-group per unit (row) of a reduction kernel: exactly `count` groups of ZOB_WG.
void need_groups(const Args& a, std::int64_t count, const char* unit) {
  a.need_group(256, 1);
  if (a.groups(0) != count || a.groups(1) != 1 || a.groups(2) != 1)
    throw Bad{"needs exactly one work-group per " + std::string(unit) + " (" +
              std::to_string(count) + ")"};
}

struct Heads {
  std::int64_t batch, seq, heads, head_dim, repeat;
  std::int64_t elements() const { return batch * seq * heads * head_dim; }
};

Heads heads_args(const Args& a, std::size_t first) {
  const Heads h{a.get<std::int64_t>(first), a.get<std::int64_t>(first + 1),
                a.get<std::int64_t>(first + 2), a.get<std::int64_t>(first + 3),
                a.get<std::int64_t>(first + 4)};
  if (h.batch <= 0 || h.seq <= 0 || h.heads <= 0 || h.head_dim <= 0 || h.repeat <= 0)
    throw Bad{"a head permute of an empty shape (the backend launches none)"};
  return h;
}

// forward: token-major x -> head-major out; else the adjoint, head-major x -> token-major out.
void rope_cpu(const Heads& h, const bf16* x, bf16* out, const float* table, bool forward) {
  const std::int64_t half = h.head_dim / 2;
  for (std::int64_t b = 0; b < h.batch; ++b)
    for (std::int64_t s = 0; s < h.seq; ++s)
      for (std::int64_t hd = 0; hd < h.heads; ++hd) {
        const std::int64_t tok = ((b * h.seq + s) * h.heads + hd) * h.head_dim;
        const std::int64_t head = ((b * h.heads + hd) * h.repeat * h.seq + s) * h.head_dim;
        const std::int64_t stride = h.seq * h.head_dim;
        for (std::int64_t d = 0; d < half; ++d) {
          const float c = table[s * half + d], sn = table[(h.seq + s) * half + d];
          if (forward) {
            const float x0 = f(x[tok + d]), x1 = f(x[tok + d + half]);
            const bf16 y0 = zob::f32_to_bf16(x0 * c - x1 * sn);
            const bf16 y1 = zob::f32_to_bf16(x1 * c + x0 * sn);
            for (std::int64_t k = 0; k < h.repeat; ++k) {
              out[head + k * stride + d] = y0;
              out[head + k * stride + d + half] = y1;
            }
          } else {
            float a0 = 0, a1 = 0;
            for (std::int64_t k = 0; k < h.repeat; ++k) {
              a0 += f(x[head + k * stride + d]);
              a1 += f(x[head + k * stride + d + half]);
            }
            out[tok + d] = zob::f32_to_bf16(a0 * c + a1 * sn);
            out[tok + d + half] = zob::f32_to_bf16(a1 * c - a0 * sn);
          }
        }
      }
}

void add_gemm_batched(Table& t) {
  t.insert({"gemm_batched", [](const Args& a) {
              a.need_args(14);
              a.need_group(16, 16);
              const bool ta = a.get<std::int32_t>(0) != 0, tb = a.get<std::int32_t>(1) != 0;
              const auto m = a.get<std::int64_t>(2), n = a.get<std::int64_t>(3),
                         k = a.get<std::int64_t>(4);
              const auto lda = a.get<std::int64_t>(6), ldb = a.get<std::int64_t>(8),
                         ldc = a.get<std::int64_t>(10);
              const auto sa = a.get<std::int64_t>(11), sb = a.get<std::int64_t>(12),
                         sc = a.get<std::int64_t>(13);
              a.need_cover(0, n, 4);  // 64x64 blocks of C, as gemm
              a.need_cover(1, m, 4);
              const std::int64_t count = a.groups(2);  // group z is the batch entry
              if (count > 1 && sc <= 0) throw Bad{"batch entries would write the same C"};
              const auto* pa = a.ptr<const bf16>(
                  5, (count - 1) * sa + (ta ? Args::span(k, m, lda) : Args::span(m, k, lda)));
              const auto* pb = a.ptr<const bf16>(
                  7, (count - 1) * sb + (tb ? Args::span(n, k, ldb) : Args::span(k, n, ldb)));
              auto* pc = a.ptr<bf16>(9, (count - 1) * sc + Args::span(m, n, ldc));
              a.run([=] {
                const zob::GemmArgs g{ta, tb, m, n, k, pa, lda, pb, ldb, pc, ldc};
                zob::cpu::gemm_strided_batched(g, count, sa, sb, sc, nullptr);
              });
            }});
}

void add_rmsnorm(Table& t) {
  t.insert({"rmsnorm_forward", [](const Args& a) {
              a.need_args(7);
              const auto rows = a.get<std::int64_t>(4), cols = a.get<std::int64_t>(5);
              const float eps = a.get<float>(6);
              need_groups(a, rows, "row");
              const auto *x = a.ptr<const bf16>(0, rows * cols), *w = a.ptr<const bf16>(1, cols);
              auto* y = a.ptr<bf16>(2, rows * cols);
              auto* rstd = a.ptr<float>(3, rows);
              a.run([=] { zob::cpu::rmsnorm_forward(x, w, y, rstd, rows, cols, eps, nullptr); });
            }});
  t.insert({"rmsnorm_backward", [](const Args& a) {
              a.need_args(8);
              const auto rows = a.get<std::int64_t>(6), cols = a.get<std::int64_t>(7);
              need_groups(a, rows + (cols + 255) / 256, "row of dx and 256 columns of dweight");
              const auto *dy = a.ptr<const bf16>(0, rows * cols),
                         *x = a.ptr<const bf16>(1, rows * cols), *w = a.ptr<const bf16>(2, cols);
              const auto* rstd = a.ptr<const float>(3, rows);
              auto* dx = a.ptr<bf16>(4, rows * cols);
              auto* dw = a.ptr<bf16>(5, cols);
              a.run(
                  [=] { zob::cpu::rmsnorm_backward(dy, x, w, rstd, dx, dw, rows, cols, nullptr); });
            }});
}

void add_heads(Table& t) {
  t.insert({"to_heads", [](const Args& a) {
              a.need_args(7);
              const Heads h = heads_args(a, 2);
              a.need_1d(h.elements(), 1);
              const auto* x = a.ptr<const bf16>(0, h.elements());
              auto* out = a.ptr<bf16>(1, h.elements() * h.repeat);
              a.run([=] {
                zob::cpu::to_heads(x, out, h.batch, h.seq, h.heads, h.head_dim, h.repeat, 0.0,
                                   nullptr);
              });
            }});
  t.insert({"from_heads", [](const Args& a) {
              a.need_args(7);
              const Heads h = heads_args(a, 2);
              a.need_1d(h.elements(), 1);
              const auto* g = a.ptr<const bf16>(0, h.elements() * h.repeat);
              auto* out = a.ptr<bf16>(1, h.elements());
              a.run([=] {
                zob::cpu::from_heads(g, out, h.batch, h.seq, h.heads, h.head_dim, h.repeat, 0.0,
                                     nullptr);
              });
            }});
  for (const bool forward : {true, false}) {
    t.insert({forward ? "to_heads_rope" : "from_heads_rope", [forward](const Args& a) {
                a.need_args(8);
                const Heads h = heads_args(a, 3);
                if (h.head_dim % 2 != 0) throw Bad{"rotary embedding needs an even head_dim"};
                a.need_1d(h.elements() / 2, 1);
                const auto* x =
                    a.ptr<const bf16>(0, forward ? h.elements() : h.elements() * h.repeat);
                auto* out = a.ptr<bf16>(1, forward ? h.elements() * h.repeat : h.elements());
                const auto* table = a.ptr<const float>(2, h.seq * h.head_dim);
                a.run([=] { rope_cpu(h, x, out, table, forward); });
              }});
  }
}

void add_softmax_silu(Table& t) {
  t.insert({"causal_softmax_forward", [](const Args& a) {
              a.need_args(5);
              const auto n = a.get<std::int64_t>(2), seq = a.get<std::int64_t>(3);
              const float scale = a.get<float>(4);
              need_groups(a, n * seq, "row");
              const auto* s = a.ptr<const bf16>(0, n * seq * seq);
              auto* p = a.ptr<bf16>(1, n * seq * seq);
              a.run([=] { zob::cpu::causal_softmax_forward(s, p, n, seq, scale, nullptr); });
            }});
  t.insert({"causal_softmax_backward", [](const Args& a) {
              a.need_args(6);
              const auto n = a.get<std::int64_t>(3), seq = a.get<std::int64_t>(4);
              const float scale = a.get<float>(5);
              need_groups(a, n * seq, "row");
              const auto *p = a.ptr<const bf16>(0, n * seq * seq),
                         *dp = a.ptr<const bf16>(1, n * seq * seq);
              auto* ds = a.ptr<bf16>(2, n * seq * seq);
              a.run([=] { zob::cpu::causal_softmax_backward(p, dp, ds, n, seq, scale, nullptr); });
            }});
  t.insert({"silu_mul_forward", [](const Args& a) {
              a.need_args(4);
              const auto n = a.get<std::int64_t>(3);
              a.need_1d(n);
              const auto *gate = a.ptr<const bf16>(0, n), *up = a.ptr<const bf16>(1, n);
              auto* out = a.ptr<bf16>(2, n);
              a.run([=] { zob::cpu::silu_mul_forward(gate, up, out, n, nullptr); });
            }});
  t.insert({"silu_mul_backward", [](const Args& a) {
              a.need_args(6);
              const auto n = a.get<std::int64_t>(5);
              a.need_1d(n);
              const auto *dout = a.ptr<const bf16>(0, n), *gate = a.ptr<const bf16>(1, n),
                         *up = a.ptr<const bf16>(2, n);
              auto *dgate = a.ptr<bf16>(3, n), *dup = a.ptr<bf16>(4, n);
              a.run([=] { zob::cpu::silu_mul_backward(dout, gate, up, dgate, dup, n, nullptr); });
            }});
}

// tensor.cl's view arguments: data, dtype (0 bf16, 1 fp32), strides as long8; sizes shared.
struct Long8 {
  std::int64_t v[8];
};

// The view at arguments (data, f32, stride) with `size`, its data checked to cover every
// element it addresses (the largest offset + 1).
template <typename T>
zob::TensorView view_arg(const Args& a, std::size_t data, const Long8& size) {
  zob::TensorView v;
  const auto f32 = a.get<std::int32_t>(data + 1);
  if (f32 != 0 && f32 != 1) throw Bad{"a dtype flag other than 0 (bf16) or 1 (fp32)"};
  v.dtype = f32 != 0 ? zob::DType::f32 : zob::DType::bf16;
  const auto stride = a.get<Long8>(data + 2);
  std::int64_t last = 0;
  for (int d = 0; d < zob::kViewDims; ++d) {
    v.size[d] = size.v[d];
    v.stride[d] = stride.v[d];
    if (v.size[d] <= 0 || v.stride[d] < 0) throw Bad{"a view with an empty or negative dimension"};
    last += (v.size[d] - 1) * v.stride[d];
  }
  const std::int64_t bytes = (last + 1) * (f32 != 0 ? 4 : 2);
  v.data = a.ptr<T>(data, bytes);
  return v;
}

void add_tensor_ops(Table& t) {
  t.insert({"tensor_elementwise", [](const Args& a) {
              a.need_args(13);
              const auto op = static_cast<zob::ElementwiseOp>(a.get<std::int32_t>(0));
              const float scalar = a.get<float>(1);
              const auto n = a.get<std::int64_t>(2);
              const auto size = a.get<Long8>(3);
              a.need_1d(n, 1);
              // cat_last: a's last size in lane 6 of its strides, b's the rest of out's.
              Long8 a_size = size, b_size = size;
              if (op == zob::ElementwiseOp::cat_last) {
                a_size.v[5] = a.get<Long8>(9).v[6];
                b_size.v[5] = size.v[5] - a_size.v[5];
              }
              const zob::TensorView out = view_arg<unsigned char>(a, 4, size);
              const zob::TensorView x = view_arg<const unsigned char>(a, 7, a_size);
              const zob::TensorView y = view_arg<const unsigned char>(a, 10, b_size);
              if (out.elements() != n) throw Bad{"n is not the product of the sizes"};
              a.run([=] { zob::cpu::elementwise(op, out, x, y, scalar, nullptr); });
            }});
  t.insert({"tensor_reduce_last", [](const Args& a) {
              a.need_args(9);
              const float scale = a.get<float>(0);
              const auto outputs = a.get<std::int64_t>(1);
              const auto size = a.get<Long8>(2);
              a.need_1d(outputs, 1);
              Long8 out_size = size;
              out_size.v[zob::kViewDims - 1] = 1;
              const zob::TensorView out = view_arg<unsigned char>(a, 3, out_size);
              const zob::TensorView in = view_arg<const unsigned char>(a, 6, size);
              if (out.elements() != outputs) throw Bad{"outputs is not the product of the sizes"};
              a.run([=] { zob::cpu::reduce_last(out, in, scale, nullptr); });
            }});
}

}  // namespace

void add_decoder(Table& t) {
  add_tensor_ops(t);
  add_gemm_batched(t);
  add_rmsnorm(t);
  add_heads(t);
  add_softmax_silu(t);
}

}  // namespace fake_ze::launch_check
