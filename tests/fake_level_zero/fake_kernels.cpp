// Kernels by name: checks the launch as a real device would need it (argument sizes, the
// required work-group size, a grid that covers the problem, every pointer inside device
// memory) and lists the bytes it reads and writes, for the happens-before check. Each entry
// also binds the zob::cpu reference, which runs instead of PoCL only with FAKE_ZE_KERNELS=cpu.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <type_traits>

#include "backends/cpu/cpu_kernels.hpp"
#include "fake_kernel_args.hpp"
#include "fake_state.hpp"

namespace fake_ze {
namespace {

using launch_check::Args;
using launch_check::Bad;
using launch_check::max_plus_one;
using launch_check::Table;
using zob::bf16;

void add_matrix(Table& t) {
  t.insert(
      {{"gemm",
        [](const Args& a) {
          a.need_args(11);
          a.need_group(16, 16);
          const bool ta = a.get<std::int32_t>(0) != 0, tb = a.get<std::int32_t>(1) != 0;
          const auto m = a.get<std::int64_t>(2), n = a.get<std::int64_t>(3),
                     k = a.get<std::int64_t>(4);
          const auto lda = a.get<std::int64_t>(6), ldb = a.get<std::int64_t>(8),
                     ldc = a.get<std::int64_t>(10);
          a.need_cover(0, n, 4);  // a 16x16 group computes a 64x64 block: 4x4 per item
          a.need_cover(1, m, 4);
          const bf16* pa = a.ptr<const bf16>(5, ta ? Args::span(k, m, lda) : Args::span(m, k, lda));
          const bf16* pb = a.ptr<const bf16>(7, tb ? Args::span(n, k, ldb) : Args::span(k, n, ldb));
          bf16* pc = a.ptr<bf16>(9, Args::span(m, n, ldc));
          a.run([=] { zob::cpu::gemm(ta, tb, m, n, k, pa, lda, pb, ldb, pc, ldc, nullptr); });
        }},
       {"embedding_forward",
        [](const Args& a) {
          a.need_args(5);
          const auto tokens = a.get<std::int64_t>(3), hidden = a.get<std::int64_t>(4);
          a.need_group(256, 1);
          a.need_cover(0, hidden);
          a.need_cover(1, tokens);
          const auto* ids = a.ptr<const std::int32_t>(0, tokens);
          const auto* tab = a.ptr<const bf16>(1, max_plus_one(ids, tokens) * hidden);
          auto* out = a.ptr<bf16>(2, tokens * hidden);
          a.run([=] { zob::cpu::embedding_forward(ids, tab, out, tokens, hidden, nullptr); });
        }},
       {"embedding_backward", [](const Args& a) {
          a.need_args(7);
          const auto n_unique = a.get<std::int64_t>(3), hidden = a.get<std::int64_t>(6);
          a.need_group(256, 1);
          a.need_cover(0, hidden);
          a.need_cover(1, n_unique);
          const auto* uid = a.ptr<const std::int32_t>(0, n_unique);
          const auto* off = a.ptr<const std::int32_t>(1, n_unique + 1);
          const auto* pos = a.ptr<const std::int32_t>(2, off[n_unique]);
          const auto* dout = a.ptr<const bf16>(4, max_plus_one(pos, off[n_unique]) * hidden);
          auto* dtable = a.ptr<bf16>(5, max_plus_one(uid, n_unique) * hidden);
          a.run([=] {
            zob::cpu::embedding_backward(uid, off, pos, n_unique, dout, dtable, hidden, nullptr);
          });
        }}});
}

void add_elementwise(Table& t) {
  t.insert({{"bias_add",
             [](const Args& a) {
               a.need_args(4);
               const auto rows = a.get<std::int64_t>(2), cols = a.get<std::int64_t>(3);
               a.need_1d(rows * cols);
               auto* y = a.ptr<bf16>(0, rows * cols);
               const auto* bias = a.ptr<const bf16>(1, cols);
               a.run([=] { zob::cpu::bias_add(y, bias, rows, cols, nullptr); });
             }},
            {"bias_gelu_forward",
             [](const Args& a) {
               a.need_args(5);
               const auto rows = a.get<std::int64_t>(3), cols = a.get<std::int64_t>(4);
               a.need_1d(rows * cols);
               auto* pre = a.ptr<bf16>(0, rows * cols);
               const auto* bias = a.ptr<const bf16>(1, cols);
               auto* act = a.ptr<bf16>(2, rows * cols);
               a.run([=] { zob::cpu::bias_gelu_forward(pre, bias, act, rows, cols, nullptr); });
             }},
            {"gelu_backward",
             [](const Args& a) {
               a.need_args(4);
               const auto n = a.get<std::int64_t>(3);
               a.need_1d(n);
               const auto *dact = a.ptr<const bf16>(0, n), *pre = a.ptr<const bf16>(1, n);
               auto* dpre = a.ptr<bf16>(2, n);
               a.run([=] { zob::cpu::gelu_backward(dact, pre, dpre, n, nullptr); });
             }},
            {"residual_add",
             [](const Args& a) {
               a.need_args(3);
               const auto n = a.get<std::int64_t>(2);
               a.need_1d(n);
               auto* x = a.ptr<bf16>(0, n);
               const auto* y = a.ptr<const bf16>(1, n);
               a.run([=] { zob::cpu::residual_add(x, y, n, nullptr); });
             }},
            {"fill_bf16",
             [](const Args& a) {
               a.need_args(3);
               const auto n = a.get<std::int64_t>(2);
               a.need_1d(n);
               auto* x = a.ptr<bf16>(0, n);
               const float v = a.get<float>(1);
               a.run([=] { zob::cpu::fill(x, v, n, nullptr); });
             }},
            {"cast_f32_to_bf16",
             [](const Args& a) {
               a.need_args(3);
               const auto n = a.get<std::int64_t>(2);
               a.need_1d(n);
               const auto* src = a.ptr<const float>(0, n);
               auto* dst = a.ptr<bf16>(1, n);
               a.run([=] { zob::cpu::cast_f32_to_bf16(src, dst, n, nullptr); });
             }},
            {"cast_bf16_to_f32", [](const Args& a) {
               a.need_args(3);
               const auto n = a.get<std::int64_t>(2);
               a.need_1d(n);
               const auto* src = a.ptr<const bf16>(0, n);
               auto* dst = a.ptr<float>(1, n);
               a.run([=] { zob::cpu::cast_bf16_to_f32(src, dst, n, nullptr); });
             }}});
}

void add_reductions(Table& t) {
  t.insert({{"column_sum",
             [](const Args& a) {
               a.need_args(4);
               const auto rows = a.get<std::int64_t>(2), cols = a.get<std::int64_t>(3);
               a.need_1d(cols, 1);
               const auto* x = a.ptr<const bf16>(0, rows * cols);
               auto* out = a.ptr<bf16>(1, cols);
               a.run([=] { zob::cpu::column_sum(x, out, rows, cols, nullptr); });
             }},
            {"sum_bf16_partial",  // group g sums [g * chunk, (g + 1) * chunk) into partials[g]
             [](const Args& a) {
               a.need_args(4);
               const auto n = a.get<std::int64_t>(1), chunk = a.get<std::int64_t>(2);
               a.need_group(256, 1);
               const std::int64_t groups = a.groups(0);
               if (chunk <= 0 || groups * chunk < n || groups > 512)
                 throw Bad{"the partial sums do not cover n (or more than 512 groups)"};
               const auto* x = a.ptr<const bf16>(0, n);
               auto* partials = a.ptr<float>(3, groups);
               a.run([=] {
                 for (std::int64_t g = 0; g < groups; ++g) {
                   const std::int64_t begin = std::min(n, g * chunk),
                                      len = std::min(n - begin, chunk);
                   zob::cpu::sum(x + begin, len, &partials[g], nullptr);
                 }
               });
             }},
            {"sum_partials",  // one group: the partial sums in order
             [](const Args& a) {
               a.need_args(3);
               const auto count = a.get<std::int64_t>(1);
               a.need_group(256, 1);
               if (a.groups(0) != 1) throw Bad{"sum_partials runs as exactly one work-group"};
               const auto* partials = a.ptr<const float>(0, count);
               auto* out = a.ptr<float>(2, 1);
               a.run([=] {
                 float acc = 0;
                 for (std::int64_t i = 0; i < count; ++i) acc += partials[i];
                 *out = acc;
               });
             }}});
}

const Table& runners() {
  static const Table table = [] {
    Table t;
    add_matrix(t);
    add_elementwise(t);
    add_reductions(t);
    launch_check::add_decoder(t);
    return t;
  }();
  return table;
}

}  // namespace

bool kernel_known(const std::string& name) { return runners().count(name) != 0; }

KernelPlan plan_kernel(const KernelLaunch& launch) {
  KernelPlan plan;
  const auto it = runners().find(launch.name);
  if (it == runners().end()) {
    plan.error = "no launch check for kernel '" + launch.name + "'";
    return plan;
  }
  try {
    it->second(Args(launch, plan));
  } catch (const Bad& bad) {
    plan.error = bad.why;
  } catch (const std::exception& e) {
    plan.error = e.what();
  }
  return plan;
}

}  // namespace fake_ze
