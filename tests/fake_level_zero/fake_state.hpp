// The fake Level Zero driver's internals shared by its files. The driver is a test fixture: a
// shared library the real loader loads through ZE_ENABLE_ALT_DRIVERS. It behaves like an
// asynchronous device: every immediate command list executes its commands on its own worker
// thread; commands start in submission order but complete in any order the specification
// allows (a seeded shuffle of the commands between barriers, fake_queue.cpp); events are
// signaled when the work is done and host waits block until then. Kernels run the module's SPIR-V
// on PoCL (fake_pocl.cpp), or, when asked with FAKE_ZE_KERNELS=cpu, the zob::cpu reference. A
// happens-before checker (fake_race.cpp) turns any two commands that touch the same bytes without a
// barrier, an event or a host wait ordering them into an error, on one list as on two.
#pragma once
#include <level_zero/ze_ddi.h>
#include <level_zero/zes_ddi.h>
#include <level_zero/zet_ddi.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace fake_ze {

// Table fillers for the tables the backend uses (fake_driver.cpp, fake_queue.cpp).
void fake_fill(ze_global_dditable_t* t);
void fake_fill(ze_driver_dditable_t* t);
void fake_fill(ze_device_dditable_t* t);
void fake_fill(ze_context_dditable_t* t);
void fake_fill(ze_command_list_dditable_t* t);
void fake_fill(ze_event_pool_dditable_t* t);
void fake_fill(ze_event_dditable_t* t);
void fake_fill(ze_module_dditable_t* t);
void fake_fill(ze_module_build_log_dditable_t* t);
void fake_fill(ze_kernel_dditable_t* t);
void fake_fill(ze_mem_dditable_t* t);

bool env_flag(const char* name);
long long env_num(const char* name, long long fallback);
// Queues of the copy-only group: FAKE_ZE_COPY_ENGINES (1 or 2, default 1).
std::uint32_t copy_engine_count();
// Prints "fake-ze: what" on stderr and returns r.
ze_result_t complain(ze_result_t r, const std::string& what);

// One lock for the whole fake, and one condition variable that is notified whenever an event
// is signaled, a command is queued or a context is lost: the state is plain maps, and the
// fake's speed does not matter.
extern std::mutex g_mutex;
extern std::condition_variable g_cv;

// Happens-before as a vector clock. Commands on one list are numbered from 1 in append order;
// `prefix[list] = n` says commands 1..n of that list are known complete (a barrier completes
// everything before it). A list completes out of order, so a command that signals an event
// without being a barrier is known complete alone: `singles` holds those (list, number) pairs.
struct Clock {
  std::map<int, std::uint64_t> prefix;
  std::set<std::pair<int, std::uint64_t>> singles;
};
void join(Clock& into, const Clock& from);
// Whether command `seq` of `list` is known complete in `c`.
bool covers(const Clock& c, int list, std::uint64_t seq);

struct Context {
  long device_allocs = 0;
  std::string lost;  // set when a command fails: every later call reports DEVICE_LOST
  Clock host;        // the commands the host has seen complete (through an event)
  int pending = 0;   // commands queued or running on the context's lists
  // Memory zeMemFree'd while commands were pending: freed for real once none is, so a queued
  // command that outlived its buffer is reported (fake_race.cpp) instead of corrupting the heap.
  std::vector<void*> quarantine;
};
// Frees the quarantine when nothing is pending (caller holds g_mutex).
void drain_quarantine(Context* ctx);
// A test hook (fakeZeHoldLists): while on, no list starts a command, so a test can append
// several before any starts.
void hold_lists(int on);
// Marks the context lost (first reason printed once) and wakes every waiter. Holds g_mutex.
void lose_context(Context* ctx, const std::string& why);

struct EventPool {
  Context* ctx;
  bool timestamps;
  std::uint32_t count;
};
struct Event {
  EventPool* pool = nullptr;
  bool signaled = false;
  int pending_signals = 0;  // appended commands that will signal it, not yet executed
  std::uint64_t start = 0, end = 0;
  Clock clock;  // the signaling list's clock when it was signaled
};

// A range of memory one command reads or writes (device or host addresses alike).
struct Access {
  std::uintptr_t begin, end;
  bool write;
};

// The device clock: Intel's usual 52.083 ns tick, kernel timestamps 32 bits wide.
inline constexpr std::uint64_t kTimerHz = 19'200'000;
inline constexpr std::uint32_t kTimestampBits = 32;
inline constexpr std::uint64_t kTimestampMask = (std::uint64_t{1} << kTimestampBits) - 1;

// A kernel handle is a KernelLaunch: name, program and the arguments set so far.
struct KernelLaunch {
  std::string name;
  void* program = nullptr;  // pocl_program() of the module; null with FAKE_ZE_KERNELS=cpu
  std::vector<std::vector<std::uint8_t>> args;  // bytes given to zeKernelSetArgumentValue
  std::uint32_t group_size[3] = {1, 1, 1};
  ze_group_count_t groups{};
};

// A checked launch (fake_kernels.cpp): what it touches, which arguments are pointers, and
// the zob::cpu reference that computes the same thing.
struct KernelPlan {
  std::string error;  // non-empty: the launch is wrong (message says why)
  std::vector<Access> accesses;
  std::vector<std::uint32_t> pointer_args;
  std::function<void()> cpu;
};
KernelPlan plan_kernel(const KernelLaunch& launch);
bool kernel_known(const std::string& name);

// True when [p, p+bytes) lies inside one device allocation (kernels may touch nothing else:
// not host allocations, not imported or memmapped host memory). Caller holds g_mutex.
bool is_device_range(const void* p, std::size_t bytes);
// True when p is host memory the driver knows nothing of: no allocation of it (device, host,
// memmapped) and not imported; a real driver stages a copy from it through bounce buffers.
// Caller holds g_mutex.
bool is_staged_host(const void* p);

// ---- PoCL (fake_pocl.cpp): the module's SPIR-V, translated back to LLVM IR by the same
// llvm-spirv that produced it, built by PoCL, launched with the Level Zero geometry.
// Which executor runs kernels: "pocl" (default) or "cpu" (FAKE_ZE_KERNELS=cpu).
const char* kernel_executor();
// Builds (or finds in the process-wide cache) the program for a SPIR-V module. Returns an
// opaque program, or nullptr with *log saying why.
void* pocl_program(const std::uint8_t* spirv, std::size_t size, std::string* log);
// Runs one launch on PoCL; "" or why it failed. Called on a list's worker, without g_mutex.
std::string pocl_run(void* program, const KernelLaunch& launch, const KernelPlan& plan);

// ---- happens-before checking (fake_race.cpp); all under g_mutex.
// Records the accesses of command `seq` of list `list`, which knows `now` complete when it
// starts. Returns "" or a description of the unordered pair.
std::string race_check(const std::vector<Access>& accesses, int list, std::uint64_t seq,
                       const Clock& now, const std::string& what);
// The host freed [p, p+bytes): any access not known complete by the host is a race.
std::string race_check_free(std::uintptr_t p, std::size_t bytes, const Clock& host);
// Every appended command is numbered (race_appended) until it has run or was dropped
// (race_retired). The host has seen `host` complete: forgets those accesses once every command
// appended before now has run. A command appended later knows what the host saw and cannot
// race with them; one appended earlier that has not run yet may.
std::uint64_t race_appended();
void race_retired(std::uint64_t number);
void race_forget(const Clock& host);
void race_forget_list(int list);  // the list is destroyed
// [p, p+bytes) was freed while commands were pending: any later access is an error, until
// the memory is really freed (race_unmark_freed).
void race_mark_freed(std::uintptr_t p, std::size_t bytes);
void race_unmark_freed(std::uintptr_t p);

// Objects the driver handed out and that were not given back yet. Atomics with constant
// initialisation and no destructor, so the at-exit leak report (fake_hooks.cpp) can read them
// whatever the order of static destruction.
struct Live {
  std::atomic<long> allocs{0}, imports{0}, contexts{0}, command_lists{0}, event_pools{0}, events{0},
      modules{0}, kernels{0};
  std::atomic<long> copy_only_lists{0};  // of command_lists, those on the copy-only group
  std::atomic<unsigned long long> alloc_bytes{0}, import_bytes{0};
  void add_alloc(std::size_t bytes) {
    ++allocs;
    alloc_bytes += bytes;
  }
  void remove_alloc(std::size_t bytes) {
    --allocs;
    alloc_bytes -= bytes;
  }
  void add_import(std::size_t bytes) {
    ++imports;
    import_bytes += bytes;
  }
  void remove_import(std::size_t bytes) {
    --imports;
    import_bytes -= bytes;
  }
};
extern Live g_live;

// Whether the fault switches apply in this process (FAKE_ZE_FAULT_CMDLINE): lets one e2e run
// fail one arm's child while the other arm, in another process, runs normally.
bool faults_apply();

}  // namespace fake_ze
