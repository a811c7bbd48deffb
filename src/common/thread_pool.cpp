// A small fork-join pool: workers sleep on a condition variable between jobs; a job is one
// call of parallel_for split into one contiguous range per thread. Persistent threads matter:
// CPU Adam runs once per sub-group per step and thread start-up would show in the timings.
#include "zob/thread_pool.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace zob {

struct ThreadPool::Impl {
  int threads = 1;
  // Unpinned pools: the caller runs range 0 and threads-1 workers the rest. Pinned pools:
  // every range runs on a pinned worker and the caller only waits (see thread_pool.hpp).
  bool caller_works = true;
  std::vector<std::thread> workers;
  std::mutex mutex;
  std::condition_variable work_ready;
  std::condition_variable work_done;
  std::uint64_t generation = 0;  // bumped per job; workers run each generation once
  int pending = 0;               // workers still running the current job
  bool stopping = false;
  const std::function<void(std::int64_t, std::int64_t)>* fn = nullptr;
  std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
  std::exception_ptr error;

  void run_range(int index) {
    const auto [begin, end] = ranges[static_cast<std::size_t>(index)];
    if (begin >= end) return;
    try {
      (*fn)(begin, end);
    } catch (...) {
      std::lock_guard lock(mutex);
      if (!error) error = std::current_exception();
    }
  }

  void worker_loop(int index) {
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mutex);
        work_ready.wait(lock, [&] { return stopping || generation != seen; });
        if (stopping) return;
        seen = generation;
      }
      run_range(index);
      {
        std::lock_guard lock(mutex);
        if (--pending == 0) work_done.notify_one();
      }
    }
  }
};

ThreadPool::ThreadPool(int threads) : ThreadPool(threads, std::vector<int>{}) {}

ThreadPool::ThreadPool(int threads, const std::vector<int>& cpus)
    : impl_(std::make_unique<Impl>()) {
  if (threads < 1) throw std::invalid_argument("ThreadPool needs at least one thread");
  if (!cpus.empty() && cpus.size() < static_cast<std::size_t>(threads)) {
    throw std::invalid_argument("ThreadPool: " + std::to_string(threads) + " threads but only " +
                                std::to_string(cpus.size()) + " CPUs to pin them to");
  }
  impl_->threads = threads;
  impl_->caller_works = cpus.empty();
  impl_->ranges.resize(static_cast<std::size_t>(threads));
  try {
    for (int i = impl_->caller_works ? 1 : 0; i < threads; ++i) {
      impl_->workers.emplace_back([this, i] { impl_->worker_loop(i); });
      if (cpus.empty()) continue;
      // Pinned before its first job: the worker sleeps until parallel_for bumps generation,
      // and a mask change takes effect at its next scheduling point anyway.
      const int cpu = cpus[static_cast<std::size_t>(i)];
      cpu_set_t set;
      CPU_ZERO(&set);
      if (cpu < 0 || cpu >= CPU_SETSIZE) {
        throw std::system_error(EINVAL, std::generic_category(),
                                "ThreadPool: CPU " + std::to_string(cpu) + " out of range");
      }
      CPU_SET(cpu, &set);
      const int rc =
          pthread_setaffinity_np(impl_->workers.back().native_handle(), sizeof set, &set);
      if (rc != 0) {
        throw std::system_error(rc, std::generic_category(),
                                "pthread_setaffinity_np(worker " + std::to_string(i) + ", CPU " +
                                    std::to_string(cpu) + ")");
      }
    }
  } catch (...) {
    stop();
    throw;
  }
}

ThreadPool::~ThreadPool() { stop(); }

void ThreadPool::stop() noexcept {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->work_ready.notify_all();
  for (auto& t : impl_->workers) {
    if (t.joinable()) t.join();
  }
  impl_->workers.clear();
}

int ThreadPool::size() const { return impl_->threads; }

void ThreadPool::parallel_for(std::int64_t n,
                              const std::function<void(std::int64_t, std::int64_t)>& fn,
                              std::int64_t align) {
  if (n <= 0) return;
  align = std::max<std::int64_t>(align, 1);
  const std::int64_t blocks = (n + align - 1) / align;
  const int parts = static_cast<int>(std::min<std::int64_t>(impl_->threads, blocks));
  if (parts <= 1 && impl_->caller_works) {
    fn(0, n);
    return;
  }
  // Contiguous ranges of whole `align` blocks, the remainder spread over the first ranges.
  const std::int64_t per = blocks / parts, extra = blocks % parts;
  std::int64_t block = 0;
  for (int i = 0; i < impl_->threads; ++i) {
    const std::int64_t count = i < parts ? per + (i < extra ? 1 : 0) : 0;
    const std::int64_t begin = std::min(block * align, n);
    block += count;
    impl_->ranges[static_cast<std::size_t>(i)] = {begin, std::min(block * align, n)};
  }
  {
    std::lock_guard lock(impl_->mutex);
    impl_->fn = &fn;
    impl_->error = nullptr;
    impl_->pending = static_cast<int>(impl_->workers.size());
    ++impl_->generation;
  }
  impl_->work_ready.notify_all();
  if (impl_->caller_works) impl_->run_range(0);
  std::unique_lock lock(impl_->mutex);
  impl_->work_done.wait(lock, [&] { return impl_->pending == 0; });
  impl_->fn = nullptr;
  if (impl_->error) std::rethrow_exception(impl_->error);
}

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int count = CPU_COUNT(&set);
    if (count > 0) return count;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

}  // namespace zob
