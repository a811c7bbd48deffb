// A fixed pool of worker threads for the CPU-side hot loops (Adam, host casts, CPU kernels).
// Work is split into contiguous ranges so each thread streams its own memory (no false sharing).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace zob {

class ThreadPool {
 public:
  // threads >= 1. The calling thread takes part, so threads-1 workers are started.
  explicit ThreadPool(int threads);
  // Pinned pool: `threads` workers, worker i pinned to cpus[i] (pthread_setaffinity_np;
  // cpus.size() >= threads, else std::invalid_argument; a refused pin throws
  // std::system_error). The calling thread does not take part and only waits, so its own
  // affinity mask (and that of threads it creates later, e.g. a device runtime's) is never
  // changed. An empty `cpus` is the unpinned pool above.
  ThreadPool(int threads, const std::vector<int>& cpus);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;

  // Calls fn(begin, end) over [0, n) split into at most size() contiguous ranges, each a
  // multiple of `align` elements (except the last); returns when all ranges are done.
  // Exceptions thrown by fn are rethrown here (the first one).
  void parallel_for(std::int64_t n, const std::function<void(std::int64_t, std::int64_t)>& fn,
                    std::int64_t align = 64);

 private:
  void stop() noexcept;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Number of CPUs this process may run on (sched_getaffinity), at least 1.
int available_cpus();

}  // namespace zob
