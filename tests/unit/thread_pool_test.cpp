#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "zob/thread_pool.hpp"

TEST(ThreadPool, CoversEveryIndexExactlyOnceInAlignedRanges) {
  for (int threads : {1, 2, 3, 7}) {
    zob::ThreadPool pool(threads);
    for (std::int64_t n : {0, 1, 63, 64, 65, 1000, 4097}) {
      std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
      pool.parallel_for(n, [&](std::int64_t b, std::int64_t e) {
        EXPECT_EQ(b % 64, 0);
        for (std::int64_t i = b; i < e; ++i) hits[static_cast<std::size_t>(i)]++;
      });
      for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<std::size_t>(i)].load(), 1);
    }
  }
}

TEST(ThreadPool, RethrowsAWorkerException) {
  zob::ThreadPool pool(4);
  EXPECT_THROW(pool.parallel_for(4096,
                                 [](std::int64_t b, std::int64_t) {
                                   if (b > 0) throw std::runtime_error("boom");
                                 }),
               std::runtime_error);
  // The pool is still usable afterwards.
  std::atomic<std::int64_t> sum{0};
  pool.parallel_for(1000, [&](std::int64_t b, std::int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 1000);
}

// available_cpus counts the calling thread's affinity mask, not the machine's CPUs: a thread
// pinned to one CPU sees 1, and an unpinned one as many as sched_getaffinity lists.
TEST(ThreadPool, AvailableCpusFollowsTheAffinityMask) {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  EXPECT_EQ(zob::available_cpus(), CPU_COUNT(&mine));
  int first = 0;
  while (!CPU_ISSET(first, &mine)) ++first;
  int seen = -1;
  std::thread pinned([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0) seen = zob::available_cpus();
  });
  pinned.join();
  EXPECT_EQ(seen, 1);
}
