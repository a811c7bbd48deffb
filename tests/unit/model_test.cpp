// The synthetic model: size formula, flat layout, initial values, token ids, checksum.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "zob/model.hpp"
#include "zob/thread_pool.hpp"

namespace zob {
namespace {

TEST(Model, ParameterCountDefaultShape) { EXPECT_EQ(parameter_count(ModelShape{}), 533848064); }

TEST(Model, ParameterCountMatchesTensorShapes) {
  for (ModelShape s : {ModelShape{97, 16, 2}, ModelShape{61, 8, 3}, ModelShape{5, 3, 0},
                       ModelShape{32000, 4096, 8}}) {
    const std::int64_t V = s.vocab, h = s.hidden, n = s.layers;
    // embedding + head, and per layer fc1 (4h x h + 4h) and fc2 (h x 4h + h)
    const std::int64_t by_hand = V * h + V * h + n * ((4 * h * h + 4 * h) + (h * 4 * h + h));
    EXPECT_EQ(parameter_count(s), by_hand);
    EXPECT_EQ(ModelLayout::build(s).total, by_hand);
  }
}

TEST(Model, LayoutIsContiguousAndOrdered) {
  const ModelShape s{97, 16, 2};
  const ModelLayout L = ModelLayout::build(s);
  ASSERT_EQ(L.modules.size(), 4u);
  EXPECT_EQ(L.modules.front().name, "embedding");
  EXPECT_EQ(L.modules[1].name, "layer0");
  EXPECT_EQ(L.modules[2].name, "layer1");
  EXPECT_EQ(L.modules.back().name, "head");
  std::int64_t next = 0;
  for (const auto& m : L.modules) {
    EXPECT_EQ(m.offset, next) << m.name;
    std::int64_t t_next = m.offset;
    for (const auto& t : m.tensors) {
      EXPECT_EQ(t.offset, t_next) << t.name;
      EXPECT_GT(t.count(), 0);
      t_next += t.count();
    }
    EXPECT_EQ(t_next - m.offset, m.count) << m.name;
    next += m.count;
  }
  EXPECT_EQ(next, L.total);
  const auto& l1 = L.modules[2].tensors;
  ASSERT_EQ(l1.size(), 4u);
  EXPECT_EQ(l1[0].name, "layer1.fc1.weight");
  EXPECT_EQ(l1[0].rows, 64);
  EXPECT_EQ(l1[0].cols, 16);
  EXPECT_EQ(l1[1].name, "layer1.fc1.bias");
  EXPECT_EQ(l1[1].count(), 64);
  EXPECT_EQ(l1[2].name, "layer1.fc2.weight");
  EXPECT_EQ(l1[2].rows, 16);
  EXPECT_EQ(l1[2].cols, 64);
  EXPECT_EQ(l1[3].count(), 16);
  EXPECT_EQ(L.modules.back().tensors[0].rows, 97);
  EXPECT_EQ(L.modules.back().tensors[0].cols, 16);
}

TEST(Model, InitialParametersDeterministicBoundedAndSeeded) {
  const ModelLayout L = ModelLayout::build({97, 16, 2});
  std::vector<float> a(static_cast<std::size_t>(L.total)), b(a.size()), c(a.size());
  initial_parameters(L, 7, a.data());
  initial_parameters(L, 7, b.data());
  initial_parameters(L, 8, c.data());
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  std::size_t same = 0;
  for (std::size_t i = 0; i < a.size(); ++i) same += (a[i] == c[i]);
  EXPECT_LT(same, a.size() / 100);
  for (const auto& m : L.modules) {
    for (const auto& t : m.tensors) {
      const double fan_in =
          t.name.ends_with("fc2.bias") || t.name.ends_with("fc2.weight") ? 64 : 16;
      const double bound = 1 / std::sqrt(fan_in);
      double lo = 1, hi = -1, sum = 0;
      for (std::int64_t i = t.offset; i < t.offset + t.count(); ++i) {
        const double v = a[static_cast<std::size_t>(i)];
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        sum += v;
      }
      EXPECT_GE(lo, -bound) << t.name;
      EXPECT_LE(hi, bound) << t.name;
      if (t.count() >= 64) {  // uniform: the extremes come close to the bound, mean near 0
        EXPECT_LT(lo, -0.8 * bound) << t.name;
        EXPECT_GT(hi, 0.8 * bound) << t.name;
        EXPECT_LT(std::abs(sum / t.count()), 0.2 * bound) << t.name;
      }
    }
  }
}

TEST(Model, InitialParametersDependOnIndexOnly) {
  // A big layout (filled by a thread pool) and one with fewer layers share a prefix: the
  // embedding and layer0 must be the same bits, whatever the split of the work.
  const ModelLayout big = ModelLayout::build({4096, 256, 2});
  const ModelLayout small = ModelLayout::build({4096, 256, 0});
  std::vector<float> a(static_cast<std::size_t>(big.total)),
      b(static_cast<std::size_t>(small.total));
  initial_parameters(big, 3, a.data());
  initial_parameters(small, 3, b.data());
  const auto emb = static_cast<std::size_t>(big.modules[0].count);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), emb * sizeof(float)));
}

TEST(Model, InitialParameterRangesAreSlicesOfTheWholeArray) {
  // What a rank makes of its part: any range, across tensor and module borders, small or
  // filled by a pool, equals that slice of the whole array. Ranges drawn fresh each run.
  const ModelLayout L = ModelLayout::build({4096, 256, 2});
  std::vector<float> whole(static_cast<std::size_t>(L.total));
  initial_parameters(L, 11, whole.data());
  std::random_device rd;
  const unsigned seed = rd();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> at(0, L.total);
  ThreadPool pool(2);
  for (int k = 0; k < 20; ++k) {
    std::int64_t a = at(rng), b = at(rng);
    if (k == 0) std::tie(a, b) = std::make_tuple(std::int64_t{0}, L.total);
    if (a > b) std::swap(a, b);
    std::vector<float> part(static_cast<std::size_t>(b - a) + 1, -7.0f);  // one guard element
    initial_parameters_range(L, 11, a, b, part.data(), k % 2 == 0 ? &pool : nullptr);
    ASSERT_EQ(0, std::memcmp(part.data(), whole.data() + a, static_cast<std::size_t>(b - a) * 4))
        << "[" << a << ", " << b << ")";
    EXPECT_EQ(part.back(), -7.0f) << "wrote past the range";
  }
}

TEST(Model, TokenIdsInRangeDeterministicSeeded) {
  const auto a = token_ids(1000, 97, 5);
  const auto b = token_ids(1000, 97, 5);
  const auto c = token_ids(1000, 97, 6);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::set<std::int32_t> seen;
  for (auto id : a) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, 97);
    seen.insert(id);
  }
  EXPECT_GT(seen.size(), 90u);  // 1000 draws from 97 values cover nearly all
  const auto prefix = token_ids(10, 97, 5);
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), a.begin()));
}

TEST(Model, ChecksumSeesEveryBitAndTheOrder) {
  const ModelLayout L = ModelLayout::build({4096, 256, 1});  // > 1M elements: the parallel path
  std::vector<float> v(static_cast<std::size_t>(L.total));
  initial_parameters(L, 11, v.data());
  const std::string base = checksum_hex(v.data(), L.total);
  EXPECT_EQ(base.size(), 16u);
  EXPECT_EQ(base, checksum_hex(v.data(), L.total));
  for (std::size_t pos :
       {std::size_t{0}, std::size_t{65535}, std::size_t{65536}, v.size() / 2, v.size() - 1}) {
    auto w = v;
    std::uint32_t bits;
    std::memcpy(&bits, &w[pos], 4);
    bits ^= 1u;  // the lowest mantissa bit
    std::memcpy(&w[pos], &bits, 4);
    EXPECT_NE(base, checksum_hex(w.data(), L.total)) << pos;
  }
  auto swapped = v;  // two whole blocks swapped: same multiset of block hashes, other order
  std::swap_ranges(swapped.begin(), swapped.begin() + 65536, swapped.begin() + 65536);
  EXPECT_NE(base, checksum_hex(swapped.data(), L.total));
  EXPECT_NE(base, checksum_hex(v.data(), L.total - 1));
  // Small arrays take the serial path: still content-sensitive.
  std::vector<float> small(v.begin(), v.begin() + 100);
  const std::string s1 = checksum_hex(small.data(), 100);
  small[42] = -small[42];
  EXPECT_NE(s1, checksum_hex(small.data(), 100));
}

}  // namespace
}  // namespace zob
