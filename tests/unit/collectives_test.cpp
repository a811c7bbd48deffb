// The shared-memory collectives with 2..4 forked rank processes on fresh random data, against
// a direct sum computed here; and fail-fast when a peer dies or never arrives.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "collectives/shm_collectives.hpp"
#include "zob/bf16.hpp"
#include "zob/collectives.hpp"

namespace zob {
namespace {

std::vector<float> random_floats(std::uint64_t seed, std::size_t n) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-3.0f, 3.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}
std::vector<bf16> random_bf16(std::uint64_t seed, std::size_t n) {
  std::vector<bf16> v;
  for (float f : random_floats(seed, n)) v.push_back(f32_to_bf16(f));
  return v;
}

// Runs body(comm) in `ranks` forked processes; returns each one's exit code (or 128 + signal).
std::vector<int> run_ranks(int ranks, std::size_t slot_bytes, double timeout_s,
                           const std::function<int(ShmCollectives&)>& body,
                           ShmRegion* keep = nullptr) {
  ShmRegion region = ShmRegion::create(ranks, slot_bytes, "unittest");
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      int code = 99;
      try {
        ShmCollectives comm(region, r, timeout_s);
        code = body(comm);
      } catch (const CollectiveError& e) {
        code = 50 + (e.culprit() < 0 ? 0 : e.culprit());
      } catch (...) {
        code = 98;
      }
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes;
  for (pid_t p : pids) {
    int status = 0;
    ::waitpid(p, &status, 0);
    codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  if (keep != nullptr) *keep = std::move(region);
  return codes;
}

TEST(ShmCollectives, AllGatherReduceScatterBroadcastMatchDirectSums) {
  for (int ranks = 2; ranks <= 4; ++ranks) {
    for (std::size_t slot : {std::size_t{64}, std::size_t{1000}, std::size_t{1} << 20}) {
      const std::size_t shard = 301;  // not a multiple of any chunk size
      auto body = [&](ShmCollectives& c) -> int {
        const int me = c.rank();
        // all_gather of bf16 shards
        const auto mine = random_bf16(100 + static_cast<std::uint64_t>(me), shard);
        std::vector<bf16> full(shard * static_cast<std::size_t>(ranks));
        c.all_gather(mine.data(), full.data(), shard * 2);
        for (int r = 0; r < ranks; ++r) {
          const auto want = random_bf16(100 + static_cast<std::uint64_t>(r), shard);
          if (std::memcmp(want.data(), full.data() + static_cast<std::size_t>(r) * shard,
                          shard * 2) != 0)
            return 1;
        }
        // reduce_scatter, bf16 and f32 inputs: sum in rank order, bit for bit
        const auto in16 = random_bf16(200 + static_cast<std::uint64_t>(me), shard * ranks);
        const auto in32 = random_floats(300 + static_cast<std::uint64_t>(me), shard * ranks);
        std::vector<float> out16(shard), out32(shard);
        c.reduce_scatter(in16.data(), ElemType::bf16, out16.data(), shard);
        c.reduce_scatter(in32.data(), ElemType::f32, out32.data(), shard);
        std::vector<float> want16(shard, 0), want32(shard, 0);
        for (int r = 0; r < ranks; ++r) {
          const auto a = random_bf16(200 + static_cast<std::uint64_t>(r), shard * ranks);
          const auto b = random_floats(300 + static_cast<std::uint64_t>(r), shard * ranks);
          for (std::size_t i = 0; i < shard; ++i) {
            const std::size_t k = static_cast<std::size_t>(me) * shard + i;
            want16[i] = r == 0 ? bf16_to_f32(a[k]) : want16[i] + bf16_to_f32(a[k]);
            want32[i] = r == 0 ? b[k] : want32[i] + b[k];
          }
        }
        if (std::memcmp(want16.data(), out16.data(), shard * 4) != 0) return 2;
        if (std::memcmp(want32.data(), out32.data(), shard * 4) != 0) return 3;
        // broadcast from the last rank
        auto data = random_floats(400 + static_cast<std::uint64_t>(me), 777);
        c.broadcast(data.data(), data.size() * 4, ranks - 1);
        const auto want = random_floats(400 + static_cast<std::uint64_t>(ranks - 1), 777);
        if (std::memcmp(want.data(), data.data(), want.size() * 4) != 0) return 4;
        c.barrier();
        return 0;
      };
      const auto codes = run_ranks(ranks, slot, 30, body);
      for (int r = 0; r < ranks; ++r) {
        EXPECT_EQ(codes[static_cast<std::size_t>(r)], 0)
            << "rank " << r << " of " << ranks << ", slot " << slot;
      }
    }
  }
}

TEST(ShmCollectives, DirectSumReallyDependsOnEveryRank) {
  // The reference above would also pass if reduce_scatter returned rank 0's data only when
  // all ranks sent equal data; check a rank's contribution shows up.
  const auto codes = run_ranks(3, 4096, 30, [](ShmCollectives& c) -> int {
    std::vector<float> in(3 * 5, c.rank() == 2 ? 1.5f : 0.0f), out(5);
    c.reduce_scatter(in.data(), ElemType::f32, out.data(), 5);
    for (float v : out) {
      if (v != 1.5f) return 1;
    }
    return 0;
  });
  EXPECT_EQ(codes, (std::vector<int>{0, 0, 0}));
}

TEST(ShmCollectives, PeerThatNeverArrivesTimesOutNamingIt) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto codes = run_ranks(3, 4096, 1.0, [](ShmCollectives& c) -> int {
    if (c.rank() == 1) {
      ::sleep(3);  // never joins in time
      return 0;
    }
    c.barrier();
    return 0;
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(codes[0], 50 + 1);  // CollectiveError naming rank 1
  EXPECT_EQ(codes[2], 50 + 1);
  EXPECT_LT(s, 10.0);
}

TEST(ShmCollectives, AbortByLauncherWakesWaitersAtOnce) {
  ShmRegion region = ShmRegion::create(2, 4096, "unittest");
  const pid_t pid = ::fork();
  if (pid == 0) {
    int code = 99;
    try {
      ShmCollectives comm(region, 0, 60);
      comm.barrier();  // rank 1 never comes; the abort must end this long before 60 s
      code = 0;
    } catch (const CollectiveError& e) {
      code = 50 + e.culprit();
    }
    ::_exit(code);
  }
  ::usleep(200 * 1000);
  const auto t0 = std::chrono::steady_clock::now();
  region.abort(1, "rank 1 (pid 0) killed by SIGKILL");
  int status = 0;
  ::waitpid(pid, &status, 0);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 51);
  EXPECT_LT(s, 5.0);
  EXPECT_EQ(region.culprit(), 1);
  EXPECT_NE(region.reason().find("SIGKILL"), std::string::npos);
}

TEST(ShmCollectives, SegmentNameIsFreshAndAlreadyUnlinked) {
  ShmRegion a = ShmRegion::create(2, 64, "unittest");
  ShmRegion b = ShmRegion::create(2, 64, "unittest");
  EXPECT_NE(a.name(), b.name());
  EXPECT_NE(a.name().find(std::to_string(::getpid())), std::string::npos);
  EXPECT_NE(::access(("/dev/shm" + a.name()).c_str(), F_OK), 0);
}

TEST(SingleRankCollectives, IsTheIdentity) {
  SingleRankCollectives c;
  const auto in = random_bf16(7, 99);
  std::vector<float> out(99);
  c.reduce_scatter(in.data(), ElemType::bf16, out.data(), 99);
  for (std::size_t i = 0; i < 99; ++i) EXPECT_EQ(out[i], bf16_to_f32(in[i]));
  std::vector<bf16> full(99);
  c.all_gather(in.data(), full.data(), 99 * 2);
  EXPECT_EQ(std::memcmp(full.data(), in.data(), 99 * 2), 0);
}

}  // namespace
}  // namespace zob
