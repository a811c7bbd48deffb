// Adam fused with the bf16 cast (adam_step_cast) against the separate passes it replaces
// (adam_step, then cast_f32_to_bf16_host) and the scalar definition of the cast, on fresh
// random data, for every ISA this CPU supports: the master and the Adam states must be the
// separate Adam's bit for bit, and every bf16 the round-to-nearest-even cast of the updated
// master. Lengths cover the vector tails, ranges long enough for the streaming stores, and
// destinations at every 2-byte offset within a vector, so the masked lead and tail run too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "adam_test_support.hpp"
#include "optim/adam_kernels.hpp"
#include "zob/adam.hpp"
#include "zob/bf16.hpp"
#include "zob/errors.hpp"
#include "zob/thread_pool.hpp"

namespace {

using zob::detail::AdamIsa;

using zob::adam_test::State;
using zob::adam_test::supported_isas;

// Random state over several decades, never all zeros; a few NaN and infinite gradients so the
// cast's NaN and overflow paths run inside the fused pass too.
State random_state(std::int64_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(-1.0, 1.0), decade(-6.0, 6.0);
  std::uniform_int_distribution<int> pick(0, 199);
  State s;
  const auto size = static_cast<std::size_t>(n);
  s.p.resize(size), s.g.resize(size), s.m.resize(size), s.v.resize(size);
  for (std::size_t i = 0; i < size; ++i) {
    s.p[i] = static_cast<float>(unit(rng) * std::pow(10.0, decade(rng)));
    double g = unit(rng) * std::pow(10.0, decade(rng) / 2);
    const int kind = pick(rng);
    if (kind == 0) g = std::numeric_limits<double>::quiet_NaN();
    if (kind == 1) g = std::numeric_limits<double>::infinity();
    s.g[i] = static_cast<float>(g);
    s.m[i] = static_cast<float>(0.1 * unit(rng));
    s.v[i] = static_cast<float>(0.01 * std::fabs(unit(rng)));
  }
  return s;
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const char* what,
                      const std::string& where) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what << " " << where;
}

// One case: `steps` fused steps against `steps` separate ones from the same start, the bf16
// written at `offset` elements into a buffer whose other elements must stay as they were.
void check_case(AdamIsa isa, std::int64_t n, std::int64_t offset, int threads, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const State start = random_state(n, rng);
  zob::AdamHyper h;
  h.weight_decay = 0.05f;
  h.lr = 1e-2f;
  constexpr std::int64_t kGuard = 40;
  std::vector<std::uint16_t> fill(static_cast<std::size_t>(offset + n + kGuard));
  for (auto& x : fill) x = static_cast<std::uint16_t>(rng() | 1u);  // never zero
  std::vector<std::uint16_t> fused_out = fill, separate_out = fill;
  State fused = start, separate = start;
  zob::ThreadPool pool(threads);
  const std::string where = std::string(zob::detail::to_string(isa)) + " n " + std::to_string(n) +
                            " offset " + std::to_string(offset) + " threads " +
                            std::to_string(threads) + " seed " + std::to_string(seed);
  for (int t = 1; t <= 3; ++t) {
    zob::detail::adam_step_cast_isa(isa, fused.p.data(), fused.g.data(), fused.m.data(),
                                    fused.v.data(), fused_out.data() + offset, n, t, h, pool);
    zob::detail::adam_step_isa(isa, separate.p.data(), separate.g.data(), separate.m.data(),
                               separate.v.data(), n, t, h, pool);
    zob::detail::cast_f32_to_bf16_isa(isa, separate.p.data(), separate_out.data() + offset, n,
                                      pool);
    expect_same_bits(fused.p, separate.p, "p", where);
    expect_same_bits(fused.m, separate.m, "m", where);
    expect_same_bits(fused.v, separate.v, "v", where);
    EXPECT_EQ(fused_out, separate_out) << where << " step " << t;
    // The cast's definition (bf16.hpp), element by element, and nothing outside the range.
    for (std::int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<std::size_t>(i);
      ASSERT_EQ(fused_out[k + static_cast<std::size_t>(offset)], zob::f32_to_bf16(fused.p[k]).bits)
          << where << " element " << i;
    }
    for (std::int64_t i = 0; i < offset; ++i) {
      ASSERT_EQ(fused_out[static_cast<std::size_t>(i)], fill[static_cast<std::size_t>(i)]) << where;
    }
    for (std::size_t i = static_cast<std::size_t>(offset + n); i < fill.size(); ++i) {
      ASSERT_EQ(fused_out[i], fill[i]) << where;
    }
  }
}

TEST(AdamCast, EveryIsaEqualsTheSeparatePassesBitForBit) {
  const std::uint64_t seed = std::random_device{}();
  // Tails of every length below a vector, a few whole vectors plus tails, and ranges past the
  // streaming threshold (1 << 14 elements per thread's range) with a ragged end.
  const std::int64_t lengths[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 64 * 37 + 11, 40'009, 70'001};
  for (AdamIsa isa : supported_isas()) {
    for (std::int64_t n : lengths) {
      for (std::int64_t offset : {0, 1, 5, 13}) {  // 2-byte steps through a 32-byte vector
        check_case(isa, n, offset, n > 10'000 ? 2 : 1, seed + static_cast<std::uint64_t>(n));
      }
    }
  }
}

TEST(AdamCast, ResultsAreBitwiseIndependentOfTheThreadCount) {
  const std::uint64_t seed = std::random_device{}();
  for (AdamIsa isa : supported_isas()) {
    for (int threads : {1, 3, 4}) check_case(isa, 3 * (1 << 14) + 77, 3, threads, seed);
  }
}

// adam_step_cast runs the kernel of the selected ISA (ZOB_ADAM_ISA or the best one).
TEST(AdamCast, PublicEntryPointUsesTheSelectedIsa) {
  std::mt19937_64 rng(std::random_device{}());
  const std::int64_t n = 1001;
  const State start = random_state(n, rng);
  zob::ThreadPool pool(2);
  const zob::AdamHyper h;
  State a = start, b = start;
  std::vector<std::uint16_t> out_a(n, 0x1234), out_b(n, 0x4321);
  zob::adam_step_cast(a.p.data(), a.g.data(), a.m.data(), a.v.data(), out_a.data(), n, 2, h, pool);
  zob::detail::adam_step_cast_isa(zob::detail::selected_isa(), b.p.data(), b.g.data(), b.m.data(),
                                  b.v.data(), out_b.data(), n, 2, h, pool);
  expect_same_bits(a.p, b.p, "p", "public");
  EXPECT_EQ(out_a, out_b);
}

TEST(AdamCast, RejectsBadArguments) {
  zob::ThreadPool pool(1);
  float x = 1.0f, g = 1.0f, m = 0.0f, v = 0.0f;
  std::uint16_t out = 7;
  EXPECT_THROW(zob::adam_step_cast(&x, &g, &m, &v, &out, 1, 0, {}, pool), zob::UsageError);
  EXPECT_THROW(zob::adam_step_cast(&x, &g, &m, &v, &out, -1, 1, {}, pool), zob::UsageError);
  zob::adam_step_cast(&x, &g, &m, &v, &out, 0, 1, {}, pool);  // n == 0 is a no-op
  EXPECT_EQ(x, 1.0f);
  EXPECT_EQ(out, 7);
}

// The memory probe runs between the steps of a live arm (the bound's ArmMemoryProbe), so it
// must leave the master, the gradients and the Adam states bitwise as they were: on fresh
// random data with infinities, NaNs and signed zeros in every array, every ISA's kernel with
// probe_mask() and the public pass on two threads; a nonzero mask does change the arrays (the
// kernels really store what they compute, so the check can fail).
TEST(MemoryProbe, LeavesEveryArrayBitwiseAsItWas) {
  std::mt19937 rng(static_cast<std::uint32_t>(std::random_device{}()));
  std::uniform_real_distribution<float> d(-3.0f, 3.0f);
  const std::int64_t n = 3 * 1024 + 13;  // a ragged tail for the scalar remainder
  zob::adam_test::State s;
  for (auto* x : {&s.p, &s.g, &s.m, &s.v}) {
    x->resize(static_cast<std::size_t>(n));
    for (float& e : *x) e = d(rng);
    (*x)[5] = std::numeric_limits<float>::infinity();
    (*x)[77] = std::numeric_limits<float>::quiet_NaN();
    (*x)[n - 2] = -0.0f;
  }
  const zob::adam_test::State before = s;
  const auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
    return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  for (AdamIsa isa : supported_isas()) {
    SCOPED_TRACE(zob::detail::to_string(isa));
    const zob::detail::ProbeRangeFn probe = zob::detail::probe_kernel(isa);
    probe(s.p.data(), s.g.data(), s.m.data(), s.v.data(), n, zob::detail::probe_mask());
    EXPECT_TRUE(same(s.p, before.p) && same(s.m, before.m) && same(s.v, before.v));
    probe(s.p.data(), s.g.data(), s.m.data(), s.v.data(), n, 0x80000000u);  // flips signs
    EXPECT_FALSE(same(s.p, before.p));
    EXPECT_EQ(std::signbit(s.m[3]), !std::signbit(before.m[3]) != !std::signbit(s.g[3]));
    probe(s.p.data(), s.g.data(), s.m.data(), s.v.data(), n, 0x80000000u);  // and back
    EXPECT_TRUE(same(s.p, before.p) && same(s.m, before.m) && same(s.v, before.v));
  }
  zob::ThreadPool pool(2);
  EXPECT_GT(zob::memory_probe_pass_s(s.p.data(), s.g.data(), s.m.data(), s.v.data(), n, pool), 0);
  EXPECT_GT(zob::memory_probe_gb_per_s(s.p.data(), s.g.data(), s.m.data(), s.v.data(), n, pool, 3),
            0);
  EXPECT_TRUE(same(s.p, before.p) && same(s.g, before.g) && same(s.m, before.m) &&
              same(s.v, before.v));
  EXPECT_THROW(zob::memory_probe_pass_s(s.p.data(), s.g.data(), s.m.data(), s.v.data(), 0, pool),
               zob::UsageError);
}

}  // namespace
