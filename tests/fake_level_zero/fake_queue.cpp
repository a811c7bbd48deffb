// The fake driver's command lists and events: asynchronous. Each immediate command list owns
// a worker thread; an append returns at once. As the specification allows (the "Execution
// Barriers" section of the programming guide), commands start in submission order but
// complete in any order unless a barrier or an event orders them: the worker starts a command
// once the events it waits for are signaled, holds up to kInFlight started commands, and
// completes them in an order shuffled by FAKE_ZE_SEED (default 1) and the list's id. A
// barrier first completes everything started before it. A command signals its event with the
// device-clock times it really started and ended; host waits block until the event is
// signaled. Strict where a real device would hang or race silently:
//  - a list destroyed with commands queued drops them (the caller never waited);
//  - a wait on an event that is neither signaled nor the target of a queued signal is an
//    error at append time (nothing will ever signal it);
//  - a worker or the host that waits longer than FAKE_ZE_HANG_SECONDS (default 30) gives up
//    and the context is lost;
//  - signaling an event that is still signaled (no reset since) loses the context: a waiter
//    could not tell the two signals apart;
//  - two commands touching the same bytes without a barrier, an event or a host wait ordering
//    them lose the context (fake_race.cpp), on one list or two, whatever order they ran in;
//    so does freeing memory a queued command may still use.
// A lost context answers ZE_RESULT_ERROR_DEVICE_LOST to every later append and wait.
//
// Switches: FAKE_ZE_SEED=N (the completion order), FAKE_ZE_TICKS_PER_COMMAND=N /
// FAKE_ZE_CLOCK_START=T (a deterministic clock: each command takes N ticks),
// FAKE_ZE_COPY_DELAY_US=N (every copy sleeps N us before moving the bytes, so a host that
// reads a result without waiting reads stale data), FAKE_ZE_STAGING_US=N (a copy from or to
// host memory that is neither allocated through the driver nor imported sleeps N us more, as
// a real driver stages it: registered arms get faster copies, so a verdict can be conclusive),
// FAKE_ZE_HANG_SECONDS,
// FAKE_ZE_COPY_ENGINES=2 (the copy-only group has two queues, so the backend gives
// device-to-host copies their own list), FAKE_ZE_LOSE_DEVICE_AT=WHAT:N (loses_device_at).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <thread>

#include "fake_state.hpp"

namespace fake_ze {

std::mutex g_mutex;
std::condition_variable g_cv;

namespace {

// Runs on the worker without g_mutex: command `seq` of `list`, knowing `now` complete.
using Body = std::function<std::string(int list, std::uint64_t seq, const Clock& now)>;
struct Command {
  std::string what;
  std::vector<Event*> waits;
  Event* signal = nullptr;
  Event* reset = nullptr;    // zeCommandListAppendEventReset
  bool barrier = false;      // zeCommandListAppendBarrier: completes what was appended before it
  bool timed = true;         // advances the deterministic clock
  std::uint64_t seq = 0;     // its number on its list, from 1 in append order
  std::uint64_t number = 0;  // its number among all commands (race_appended)
  Clock host;                // what the host had seen complete when it was appended
  Clock now;                 // what it knows complete when it starts
  Body body;                 // "" or why it failed
};

// Started commands held back at most: the window in which a list completes out of order.
constexpr std::size_t kInFlight = 4;
// How long a worker with started commands waits for more appends before completing them.
constexpr auto kGatherWindow = std::chrono::microseconds(200);

struct CommandList {
  Context* ctx = nullptr;
  bool copy_only = false;
  int id = 0;
  std::deque<Command> queue;     // appended, not started
  std::vector<Command> started;  // started, not complete
  std::uint64_t appended = 0;
  Clock gate;             // what every command starting from now on knows complete
  std::mt19937_64 order;  // the completion order of the started commands
  bool stop = false;
  std::thread worker;
};

int g_next_list = 1;
bool g_hold = false;  // a test holds every list's commands back (hold_lists)
std::uint64_t g_virtual_clock = 0;
bool g_clock_started = false;

std::chrono::steady_clock::time_point hang_deadline() {
  return std::chrono::steady_clock::now() +
         std::chrono::seconds(env_num("FAKE_ZE_HANG_SECONDS", 30));
}

std::uint64_t device_now() {
  if (env_num("FAKE_ZE_TICKS_PER_COMMAND", 0) <= 0) {
    const auto ns = std::chrono::steady_clock::now().time_since_epoch().count();
    return static_cast<std::uint64_t>(static_cast<double>(ns) * (kTimerHz / 1e9));
  }
  if (!g_clock_started) {
    g_virtual_clock = static_cast<std::uint64_t>(env_num("FAKE_ZE_CLOCK_START", 0));
    g_clock_started = true;
  }
  return g_virtual_clock;
}

void lose(Context* ctx, const std::string& why) { lose_context(ctx, why); }

bool all_signaled(const Command& c) {
  return std::all_of(c.waits.begin(), c.waits.end(), [](const Event* e) { return e->signaled; });
}

// On the worker, holding g_mutex: blocks until every wait event is signaled.
std::string wait_events(std::unique_lock<std::mutex>& lock, CommandList* cl, const Command& c) {
  const auto deadline = hang_deadline();
  for (Event* e : c.waits) {
    while (!e->signaled && cl->ctx->lost.empty()) {
      if (g_cv.wait_until(lock, deadline) == std::cv_status::timeout && !e->signaled)
        return "waited " + std::to_string(env_num("FAKE_ZE_HANG_SECONDS", 30)) +
               " s for an event that nothing signaled: a real device would hang";
    }
  }
  return {};
}

// On the worker, holding g_mutex: the command is done. Its event tells a waiter what the
// command knew and the command itself (a barrier: everything before it on its list).
std::string finish(Command& c, int list, std::uint64_t start) {
  if (c.timed && env_num("FAKE_ZE_TICKS_PER_COMMAND", 0) > 0)
    g_virtual_clock += static_cast<std::uint64_t>(env_num("FAKE_ZE_TICKS_PER_COMMAND", 0));
  if (c.reset != nullptr) c.reset->signaled = false;
  if (c.signal == nullptr) return {};
  if (c.signal->signaled)
    return "signals an event that is still signaled (no reset since its last signal): its "
           "waiters cannot tell the two apart";
  c.signal->signaled = true;
  c.signal->clock = c.now;
  if (!c.barrier) c.signal->clock.singles.insert({list, c.seq});
  c.signal->start = start & kTimestampMask;
  c.signal->end = device_now() & kTimestampMask;
  return {};
}

// On the worker, holding g_mutex: runs a started command and retires it.
void complete(std::unique_lock<std::mutex>& lock, CommandList* cl, Command& c) {
  std::string err;
  if (cl->ctx->lost.empty()) {
    const std::uint64_t start = device_now();
    if (c.body) {
      lock.unlock();
      err = c.body(cl->id, c.seq, c.now);
      lock.lock();
    }
    if (err.empty()) err = finish(c, cl->id, start);
  }
  if (!err.empty()) lose(cl->ctx, "list " + std::to_string(cl->id) + ": " + c.what + ": " + err);
  if (c.signal != nullptr) --c.signal->pending_signals;
  --cl->ctx->pending;
  race_retired(c.number);
  drain_quarantine(cl->ctx);
  g_cv.notify_all();
}

// Completes every started command, in the seeded shuffled order.
void complete_started(std::unique_lock<std::mutex>& lock, CommandList* cl) {
  std::vector<Command> batch;
  batch.swap(cl->started);
  std::shuffle(batch.begin(), batch.end(), cl->order);
  for (Command& c : batch) complete(lock, cl, c);
}

// Starts the next command: after the events it waits for (so every later command starts
// after them too), and for a barrier after everything before it completed.
void start(std::unique_lock<std::mutex>& lock, CommandList* cl, Command c) {
  // A waited-for event may be one a started command signals: a real device would complete
  // that command meanwhile.
  if (c.barrier || !all_signaled(c)) complete_started(lock, cl);
  if (std::string err = wait_events(lock, cl, c); !err.empty())
    lose(cl->ctx, "list " + std::to_string(cl->id) + ": " + c.what + ": " + err);
  for (Event* e : c.waits) join(cl->gate, e->clock);
  join(cl->gate, c.host);
  if (c.barrier) cl->gate.prefix[cl->id] = c.seq;
  c.now = cl->gate;
  if (c.barrier) return complete(lock, cl, c);
  cl->started.push_back(std::move(c));
  if (cl->started.size() >= kInFlight) complete_started(lock, cl);
}

void worker(CommandList* cl) {
  std::unique_lock lock(g_mutex);
  for (;;) {
    if (cl->queue.empty() && !cl->started.empty() &&
        !g_cv.wait_for(lock, kGatherWindow, [&] { return cl->stop || !cl->queue.empty(); }))
      complete_started(lock, cl);
    g_cv.wait(lock, [&] {
      return cl->stop || (!g_hold && (!cl->queue.empty() || !cl->started.empty()));
    });
    if (cl->queue.empty()) {
      if (!cl->stop) continue;
      complete_started(lock, cl);  // started before the list was destroyed: they run
      return;
    }
    Command c = std::move(cl->queue.front());
    cl->queue.pop_front();
    start(lock, cl, std::move(c));
  }
}

// FAKE_ZE_LOSE_DEVICE_AT=WHAT:N, where the fault switches apply (FAKE_ZE_FAULT_CMDLINE):
// the N-th append in this process of the kernel named WHAT (or of any copy, WHAT "copy")
// loses the device, as a device that fails in the middle of a run: that append answers
// ZE_RESULT_ERROR_DEVICE_LOST, and so does every later append and wait of the context. A
// kernel the step launches once per step (embedding_forward, embedding_backward) makes N the
// step. Caller holds g_mutex.
bool loses_device_at(const std::string& what) {
  static const std::string spec = [] {
    const char* v = std::getenv("FAKE_ZE_LOSE_DEVICE_AT");
    return v != nullptr && faults_apply() ? std::string(v) : std::string();
  }();
  static long long seen = 0;
  if (spec.empty()) return false;
  const std::size_t colon = spec.rfind(':');
  const std::string name = spec.substr(0, colon);
  const long long at = colon == std::string::npos ? 1 : std::atoll(spec.c_str() + colon + 1);
  const bool match = name == "copy" ? what.rfind("copy of ", 0) == 0 : what == "kernel " + name;
  return match && ++seen == at;
}

// Queues a command on `cl` (caller holds g_mutex): checks what can be checked now.
ze_result_t enqueue(ze_command_list_handle_t h, Command c, std::uint32_t n,
                    ze_event_handle_t* waits) {
  if (h == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  auto* cl = reinterpret_cast<CommandList*>(h);
  if (!cl->ctx->lost.empty()) return ZE_RESULT_ERROR_DEVICE_LOST;
  if (loses_device_at(c.what)) {
    lose(cl->ctx, "FAKE_ZE_LOSE_DEVICE_AT: the device was lost at the append of " + c.what);
    return ZE_RESULT_ERROR_DEVICE_LOST;
  }
  if (n > 0 && waits == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_POINTER;
  for (std::uint32_t i = 0; i < n; ++i) {
    auto* e = reinterpret_cast<Event*>(waits[i]);
    if (e == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
    if (!e->signaled && e->pending_signals == 0)
      return complain(
          ZE_RESULT_ERROR_INVALID_ARGUMENT,
          c.what + " waits on an event that nothing will signal: a real device would hang");
    c.waits.push_back(e);
  }
  if (c.signal != nullptr) ++c.signal->pending_signals;
  c.seq = ++cl->appended;
  c.number = race_appended();
  c.host = cl->ctx->host;
  ++cl->ctx->pending;
  cl->queue.push_back(std::move(c));
  g_cv.notify_all();
  return ZE_RESULT_SUCCESS;
}

Event* as_event(ze_event_handle_t e) { return reinterpret_cast<Event*>(e); }

Command make(std::string what, ze_event_handle_t signal = nullptr, Body body = {}) {
  Command c;
  c.what = std::move(what);
  c.signal = as_event(signal);
  c.body = std::move(body);
  return c;
}

// A copy touching device memory must stay inside the allocation; host pointers are free.
bool copy_side_ok(const void* p, std::size_t bytes) {
  return is_device_range(p, bytes) || !is_device_range(p, 1);
}

void copy_delay() {
  if (const long long us = env_num("FAKE_ZE_COPY_DELAY_US", 0); us > 0)
    std::this_thread::sleep_for(std::chrono::microseconds(us));
}

// ---------------------------------------------------------------- command lists
ze_result_t ZE_APICALL CommandListCreateImmediate(ze_context_handle_t ctx, ze_device_handle_t,
                                                  const ze_command_queue_desc_t* desc,
                                                  ze_command_list_handle_t* out) {
  const std::uint32_t groups = env_flag("FAKE_ZE_NO_COPY_ENGINE") ? 1 : 2;
  if (desc->ordinal >= groups) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (desc->index >= (desc->ordinal == 0 ? 4u : copy_engine_count()))
    return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  std::lock_guard lock(g_mutex);
  auto* cl = new CommandList;
  cl->ctx = reinterpret_cast<Context*>(ctx);
  cl->copy_only = desc->ordinal == 1;
  cl->id = g_next_list++;
  cl->order.seed(static_cast<std::uint64_t>(env_num("FAKE_ZE_SEED", 1)) * 1'000'003u +
                 static_cast<std::uint64_t>(cl->id));
  cl->worker = std::thread(worker, cl);
  *out = reinterpret_cast<ze_command_list_handle_t>(cl);
  ++g_live.command_lists;
  if (cl->copy_only) ++g_live.copy_only_lists;
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL CommandListDestroy(ze_command_list_handle_t h) {
  auto* cl = reinterpret_cast<CommandList*>(h);
  {
    std::lock_guard lock(g_mutex);
    // Commands not started are dropped, as work on a destroyed list is undefined: a caller
    // that destroys without waiting loses its results here instead of getting them by luck.
    if (!cl->queue.empty() && cl->ctx->lost.empty())
      complain(ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE,
               "zeCommandListDestroy with " + std::to_string(cl->queue.size()) +
                   " commands not started: the host never waited for them; dropped");
    for (auto& c : cl->queue) {
      if (c.signal != nullptr) --c.signal->pending_signals;
      --cl->ctx->pending;
      race_retired(c.number);
    }
    cl->queue.clear();
    drain_quarantine(cl->ctx);
    cl->stop = true;
    g_cv.notify_all();
  }
  cl->worker.join();
  std::lock_guard lock(g_mutex);
  race_forget_list(cl->id);
  if (cl->copy_only) --g_live.copy_only_lists;
  delete cl;
  --g_live.command_lists;
  return ZE_RESULT_SUCCESS;
}

ze_result_t ZE_APICALL AppendBarrier(ze_command_list_handle_t cl, ze_event_handle_t signal,
                                     std::uint32_t n, ze_event_handle_t* waits) {
  std::lock_guard lock(g_mutex);
  Command c = make("barrier", signal);
  c.barrier = true;
  return enqueue(cl, std::move(c), n, waits);
}

ze_result_t ZE_APICALL AppendMemoryCopy(ze_command_list_handle_t cl, void* dst, const void* src,
                                        std::size_t size, ze_event_handle_t signal, std::uint32_t n,
                                        ze_event_handle_t* waits) {
  std::lock_guard lock(g_mutex);
  if (!copy_side_ok(dst, size) || !copy_side_ok(src, size))
    return complain(ZE_RESULT_ERROR_INVALID_ARGUMENT, "copy outside a device allocation");
  const std::string what = "copy of " + std::to_string(size) + " bytes";
  const long long staging_us = env_num("FAKE_ZE_STAGING_US", 0);
  const bool staged = staging_us > 0 && (is_staged_host(dst) || is_staged_host(src));
  Body body = [=](int list, std::uint64_t seq, const Clock& now) {
    const auto d = reinterpret_cast<std::uintptr_t>(dst), s = reinterpret_cast<std::uintptr_t>(src);
    {
      std::lock_guard inner(g_mutex);
      if (auto r = race_check({{s, s + size, false}, {d, d + size, true}}, list, seq, now, what);
          !r.empty())
        return r;
    }
    if (staged) std::this_thread::sleep_for(std::chrono::microseconds(staging_us));
    copy_delay();
    std::memcpy(dst, src, size);
    return std::string();
  };
  return enqueue(cl, make(what, signal, body), n, waits);
}

ze_result_t ZE_APICALL AppendMemoryFill(ze_command_list_handle_t cl, void* dst, const void* pattern,
                                        std::size_t pattern_size, std::size_t size,
                                        ze_event_handle_t signal, std::uint32_t n,
                                        ze_event_handle_t* waits) {
  std::lock_guard lock(g_mutex);
  if (!copy_side_ok(dst, size) || pattern_size == 0 || size % pattern_size != 0)
    return complain(ZE_RESULT_ERROR_INVALID_ARGUMENT, "bad fill");
  // The pattern is read now: the caller may free it when the append returns.
  const auto* p = static_cast<const std::uint8_t*>(pattern);
  std::vector<std::uint8_t> bytes(p, p + pattern_size);
  const std::string what = "fill of " + std::to_string(size) + " bytes";
  Body body = [=](int list, std::uint64_t seq, const Clock& now) {
    const auto d = reinterpret_cast<std::uintptr_t>(dst);
    {
      std::lock_guard inner(g_mutex);
      if (auto r = race_check({{d, d + size, true}}, list, seq, now, what); !r.empty()) return r;
    }
    auto* out = static_cast<unsigned char*>(dst);
    for (std::size_t i = 0; i < size; i += bytes.size())
      std::memcpy(out + i, bytes.data(), bytes.size());
    return std::string();
  };
  return enqueue(cl, make(what, signal, body), n, waits);
}

ze_result_t ZE_APICALL AppendSignalEvent(ze_command_list_handle_t cl, ze_event_handle_t e) {
  std::lock_guard lock(g_mutex);
  return enqueue(cl, make("signal", e), 0, nullptr);
}
ze_result_t ZE_APICALL AppendWaitOnEvents(ze_command_list_handle_t cl, std::uint32_t n,
                                          ze_event_handle_t* w) {
  std::lock_guard lock(g_mutex);
  return enqueue(cl, make("wait on events"), n, w);
}
ze_result_t ZE_APICALL AppendEventReset(ze_command_list_handle_t cl, ze_event_handle_t e) {
  if (e == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  std::lock_guard lock(g_mutex);
  Command c = make("event reset");
  c.reset = as_event(e);
  c.timed = false;  // as a real device's reset: no timestamped work
  return enqueue(cl, std::move(c), 0, nullptr);
}

ze_result_t ZE_APICALL AppendLaunchKernel(ze_command_list_handle_t h, ze_kernel_handle_t k,
                                          const ze_group_count_t* groups, ze_event_handle_t signal,
                                          std::uint32_t n, ze_event_handle_t* waits) {
  std::lock_guard lock(g_mutex);
  if (h != nullptr && reinterpret_cast<CommandList*>(h)->copy_only)
    return complain(ZE_RESULT_ERROR_INVALID_COMMAND_LIST_TYPE,
                    "kernel launched on a copy-only list");
  if (k == nullptr || groups == nullptr) return ZE_RESULT_ERROR_INVALID_NULL_HANDLE;
  // Immediate lists take the arguments at append time: the launch is copied now.
  KernelLaunch launch = *reinterpret_cast<const KernelLaunch*>(k);
  launch.groups = *groups;
  const std::string what = "kernel " + launch.name;
  Body body = [launch, what](int list, std::uint64_t seq, const Clock& now) {
    KernelPlan plan;
    {
      std::lock_guard inner(g_mutex);
      plan = plan_kernel(launch);  // may read device data (embedding ids): on the worker
      if (!plan.error.empty()) return "refused: " + plan.error;
      if (auto r = race_check(plan.accesses, list, seq, now, what); !r.empty()) return r;
    }
    if (std::strcmp(kernel_executor(), "cpu") == 0) {
      plan.cpu();
      return std::string();
    }
    return pocl_run(launch.program, launch, plan);
  };
  return enqueue(h, make(what, signal, body), n, waits);
}

// ---------------------------------------------------------------- events
ze_result_t ZE_APICALL EventPoolCreate(ze_context_handle_t ctx, const ze_event_pool_desc_t* desc,
                                       std::uint32_t, ze_device_handle_t*,
                                       ze_event_pool_handle_t* out) {
  *out = reinterpret_cast<ze_event_pool_handle_t>(
      new EventPool{reinterpret_cast<Context*>(ctx),
                    (desc->flags & ZE_EVENT_POOL_FLAG_KERNEL_TIMESTAMP) != 0, desc->count});
  ++g_live.event_pools;
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL EventPoolDestroy(ze_event_pool_handle_t p) {
  delete reinterpret_cast<EventPool*>(p);
  --g_live.event_pools;
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL EventCreate(ze_event_pool_handle_t p, const ze_event_desc_t* desc,
                                   ze_event_handle_t* out) {
  auto* pool = reinterpret_cast<EventPool*>(p);
  if (desc->index >= pool->count) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  auto* e = new Event;
  e->pool = pool;
  *out = reinterpret_cast<ze_event_handle_t>(e);
  ++g_live.events;
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL EventDestroy(ze_event_handle_t e) {
  std::lock_guard lock(g_mutex);
  if (as_event(e)->pending_signals > 0)  // kept (a leak the report shows): a worker will touch it
    return complain(ZE_RESULT_ERROR_HANDLE_OBJECT_IN_USE,
                    "zeEventDestroy of an event a queued command will signal");
  delete as_event(e);
  --g_live.events;
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL EventHostSignal(ze_event_handle_t e) {
  std::lock_guard lock(g_mutex);
  as_event(e)->signaled = true;
  g_cv.notify_all();
  return ZE_RESULT_SUCCESS;
}

// The host saw `e` complete: everything before it is known complete on the host.
void host_observed(Event* e) {
  Context* ctx = e->pool->ctx;
  join(ctx->host, e->clock);
  race_forget(ctx->host);
}

ze_result_t ZE_APICALL EventHostSynchronize(ze_event_handle_t h, std::uint64_t timeout_ns) {
  std::unique_lock lock(g_mutex);
  Event* e = as_event(h);
  Context* ctx = e->pool->ctx;
  if (!e->signaled && e->pending_signals == 0 && ctx->lost.empty())
    return complain(ZE_RESULT_NOT_READY, "host waits for an event nothing will signal");
  const auto limit = timeout_ns == UINT64_MAX
                         ? hang_deadline()
                         : std::min(hang_deadline(), std::chrono::steady_clock::now() +
                                                         std::chrono::nanoseconds(timeout_ns));
  while (!e->signaled && ctx->lost.empty())
    if (g_cv.wait_until(lock, limit) == std::cv_status::timeout) break;
  if (!ctx->lost.empty()) return ZE_RESULT_ERROR_DEVICE_LOST;
  if (!e->signaled) {
    if (timeout_ns != UINT64_MAX) return ZE_RESULT_NOT_READY;
    lose(ctx, "the host waited " + std::to_string(env_num("FAKE_ZE_HANG_SECONDS", 30)) +
                  " s for an event: a real device would hang");
    return ZE_RESULT_ERROR_DEVICE_LOST;
  }
  host_observed(e);
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL EventQueryStatus(ze_event_handle_t h) {
  std::lock_guard lock(g_mutex);
  if (!as_event(h)->pool->ctx->lost.empty()) return ZE_RESULT_ERROR_DEVICE_LOST;
  if (!as_event(h)->signaled) return ZE_RESULT_NOT_READY;
  host_observed(as_event(h));
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL EventHostReset(ze_event_handle_t h) {
  std::lock_guard lock(g_mutex);
  Event* e = as_event(h);
  if (e->pending_signals > 0 && e->pool->ctx->lost.empty())
    lose(e->pool->ctx, "zeEventHostReset of an event a queued command will still signal");
  e->signaled = false;
  return ZE_RESULT_SUCCESS;
}
ze_result_t ZE_APICALL EventQueryKernelTimestamp(ze_event_handle_t h,
                                                 ze_kernel_timestamp_result_t* out) {
  std::lock_guard lock(g_mutex);
  Event* e = as_event(h);
  if (!e->pool->timestamps) return ZE_RESULT_ERROR_INVALID_ARGUMENT;
  if (!e->signaled) return ZE_RESULT_NOT_READY;
  out->global.kernelStart = out->context.kernelStart = e->start;
  out->global.kernelEnd = out->context.kernelEnd = e->end;
  return ZE_RESULT_SUCCESS;
}

}  // namespace

void hold_lists(int on) {
  std::lock_guard lock(g_mutex);
  g_hold = on != 0;
  g_cv.notify_all();
}

void lose_context(Context* ctx, const std::string& why) {
  if (ctx->lost.empty()) {
    ctx->lost = why;
    complain(ZE_RESULT_ERROR_DEVICE_LOST, why);
  }
  g_cv.notify_all();
}

void fake_fill(ze_command_list_dditable_t* t) {
  t->pfnCreateImmediate = CommandListCreateImmediate;
  t->pfnDestroy = CommandListDestroy;
  t->pfnAppendBarrier = AppendBarrier;
  t->pfnAppendMemoryCopy = AppendMemoryCopy;
  t->pfnAppendMemoryFill = AppendMemoryFill;
  t->pfnAppendSignalEvent = AppendSignalEvent;
  t->pfnAppendWaitOnEvents = AppendWaitOnEvents;
  t->pfnAppendEventReset = AppendEventReset;
  t->pfnAppendLaunchKernel = AppendLaunchKernel;
}
void fake_fill(ze_event_pool_dditable_t* t) {
  t->pfnCreate = EventPoolCreate;
  t->pfnDestroy = EventPoolDestroy;
}
void fake_fill(ze_event_dditable_t* t) {
  t->pfnCreate = EventCreate;
  t->pfnDestroy = EventDestroy;
  t->pfnHostSignal = EventHostSignal;
  t->pfnHostSynchronize = EventHostSynchronize;
  t->pfnQueryStatus = EventQueryStatus;
  t->pfnHostReset = EventHostReset;
  t->pfnQueryKernelTimestamp = EventQueryKernelTimestamp;
}

}  // namespace fake_ze
