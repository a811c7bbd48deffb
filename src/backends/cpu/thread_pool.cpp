// A small fork-join pool: workers sleep on a condition variable between jobs; a job is one
// call of parallel_for split into one contiguous range per thread. Persistent threads matter:
// CPU Adam runs once per sub-group per step and thread start-up would show in the timings.
#include "zob/thread_pool.hpp"

#include <sched.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace zob {

struct ThreadPool::Impl {
  int threads = 1;
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

ThreadPool::ThreadPool(int threads) : impl_(std::make_unique<Impl>()) {
  if (threads < 1) throw std::invalid_argument("ThreadPool needs at least one thread");
  impl_->threads = threads;
  impl_->ranges.resize(static_cast<std::size_t>(threads));
  for (int i = 1; i < threads; ++i) {
    impl_->workers.emplace_back([this, i] { impl_->worker_loop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->work_ready.notify_all();
  for (auto& t : impl_->workers) t.join();
}

int ThreadPool::size() const { return impl_->threads; }

void ThreadPool::parallel_for(std::int64_t n,
                              const std::function<void(std::int64_t, std::int64_t)>& fn,
                              std::int64_t align) {
  if (n <= 0) return;
  align = std::max<std::int64_t>(align, 1);
  const std::int64_t blocks = (n + align - 1) / align;
  const int parts = static_cast<int>(std::min<std::int64_t>(impl_->threads, blocks));
  if (parts <= 1) {
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
    impl_->pending = impl_->threads - 1;
    ++impl_->generation;
  }
  impl_->work_ready.notify_all();
  impl_->run_range(0);
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
