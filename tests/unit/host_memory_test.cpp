// HostBuffer in each mode: what the kernel reports (VmLck, mincore), the process-wide
// counters, the release order, failure paths and the mlock refusal message.
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.hpp"
#include "random_seed.hpp"
#include "zob/errors.hpp"
#include "zob/host_memory.hpp"
#include "zob/thread_pool.hpp"

namespace {

using zob::HostBuffer;
using zob::HostMemoryMode;

const std::size_t kPage = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));

// Bytes locked in this process, from the kernel (VmLck is in kB).
std::uint64_t vm_locked_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmLck:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  }
  return ~std::uint64_t{0};
}

bool is_mapped(const void* p) {
  unsigned char vec = 0;
  return mincore(const_cast<void*>(p), kPage, &vec) == 0;  // ENOMEM once unmapped
}

void expect_counters_zero() {
  const auto c = zob::host_memory_counters();
  EXPECT_EQ(c.locked_bytes, 0u);
  EXPECT_EQ(c.registered_bytes, 0u);
}

// Fills and checks the buffer with fresh random bytes: it is real, writable memory.
void expect_usable(const HostBuffer& b) {
  std::mt19937 rng(static_cast<std::mt19937::result_type>(zob::test::random_seed("expect_usable")));
  std::vector<unsigned char> pattern(b.size());
  for (auto& x : pattern) x = static_cast<unsigned char>(rng());
  std::memcpy(b.data(), pattern.data(), b.size());
  EXPECT_EQ(std::memcmp(b.data(), pattern.data(), b.size()), 0);
}

// A device where registration applies: records the calls and what was locked at unregister.
class RegisteringDevice : public zob::CpuDevice {
 public:
  RegisteringDevice() : zob::CpuDevice(1) {}
  bool registration_applicable() const override { return true; }
  zob::Registration register_host(void* host, std::size_t bytes) override {
    last_host = host;
    registered_bytes = bytes;
    if (refuse) throw zob::DeviceError(zob::DeviceErrorKind::registration_refused, "refused");
    registered = true;
    return {"fake-register", true};
  }
  void unregister_host(void* host) noexcept override {
    unregistered_host = host;
    locked_at_unregister = vm_locked_bytes();
    registered = false;
  }
  bool is_registered(const void* host) const override { return registered && host == last_host; }
  void* allocate_host(std::size_t bytes) override {
    ++host_allocations;
    return zob::CpuDevice::allocate_host(bytes);
  }
  void deallocate_host(void* host) noexcept override {
    --host_allocations;
    zob::CpuDevice::deallocate_host(host);
  }

  bool refuse = false;
  bool registered = false;
  void* last_host = nullptr;
  void* unregistered_host = nullptr;
  std::size_t registered_bytes = 0;
  std::uint64_t locked_at_unregister = 0;
  int host_allocations = 0;
};

TEST(HostMemory, PinnedModeForEachArm) {
  EXPECT_EQ(zob::pinned_mode_for(zob::Arm::registered), HostMemoryMode::registered);
  EXPECT_EQ(zob::pinned_mode_for(zob::Arm::unregistered), HostMemoryMode::locked);
  EXPECT_EQ(zob::pinned_mode_for(zob::Arm::pageable), HostMemoryMode::pageable);
  EXPECT_EQ(zob::pinned_mode_for(zob::Arm::hostalloc), HostMemoryMode::device_host);
  EXPECT_STREQ(zob::to_string(HostMemoryMode::locked), "locked");
}

TEST(HostMemory, PageableIsPageAlignedAndNotLocked) {
  const auto locked_before = vm_locked_bytes();
  HostBuffer b(3 * kPage + 5, HostMemoryMode::pageable, nullptr, "pageable test");
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % kPage, 0u);
  EXPECT_EQ(b.size(), 3 * kPage + 5);
  EXPECT_EQ(b.registration_method(), "none");
  expect_usable(b);
  EXPECT_EQ(vm_locked_bytes(), locked_before);
  expect_counters_zero();
}

TEST(HostMemory, LockedGrowsVmLckAndGivesItBack) {
  const auto locked_before = vm_locked_bytes();
  const std::size_t bytes = 2 * kPage + 100;  // rounded up to 3 pages, not to a power of two
  void* p = nullptr;
  {
    HostBuffer b(bytes, HostMemoryMode::locked, nullptr, "locked test");
    p = b.data();
    EXPECT_EQ(vm_locked_bytes(), locked_before + 3 * kPage);
    auto c = zob::host_memory_counters();
    EXPECT_EQ(c.locked_bytes, 3 * kPage);
    EXPECT_GE(c.peak_locked_bytes, 3 * kPage);
    EXPECT_EQ(c.registered_bytes, 0u);
    EXPECT_EQ(b.registration_method(), "none");
    expect_usable(b);
  }
  EXPECT_EQ(vm_locked_bytes(), locked_before);
  EXPECT_FALSE(is_mapped(p)) << "munmap did not happen";
  expect_counters_zero();
}

TEST(HostMemory, RegisteredOnTheCpuDeviceIsLockedOnlyAndSaysNotApplicable) {
  zob::CpuDevice dev(1);
  const auto locked_before = vm_locked_bytes();
  {
    HostBuffer b(kPage, HostMemoryMode::registered, &dev, "cpu registered");
    EXPECT_EQ(b.registration_method(), "not-applicable");
    EXPECT_EQ(vm_locked_bytes(), locked_before + kPage);
    EXPECT_EQ(zob::host_memory_counters().registered_bytes, 0u);
    expect_usable(b);
  }
  EXPECT_EQ(vm_locked_bytes(), locked_before);
  expect_counters_zero();
}

TEST(HostMemory, RegisteredUnregistersBeforeUnlocking) {
  RegisteringDevice dev;
  const auto locked_before = vm_locked_bytes();
  void* p = nullptr;
  {
    HostBuffer b(5 * kPage, HostMemoryMode::registered, &dev, "registered test");
    p = b.data();
    EXPECT_EQ(b.registration_method(), "fake-register");
    EXPECT_EQ(dev.last_host, p);
    EXPECT_EQ(dev.registered_bytes, 5 * kPage);
    EXPECT_GE(b.register_seconds(), 0.0);
    const auto c = zob::host_memory_counters();
    EXPECT_EQ(c.registered_bytes, 5 * kPage);
    EXPECT_EQ(c.locked_bytes, 5 * kPage);
    EXPECT_GE(c.peak_registered_bytes, 5 * kPage);
    EXPECT_TRUE(dev.is_registered(p));
  }
  EXPECT_EQ(dev.unregistered_host, p);
  EXPECT_EQ(dev.locked_at_unregister, locked_before + 5 * kPage) << "munlock before unregister";
  EXPECT_EQ(vm_locked_bytes(), locked_before);
  EXPECT_FALSE(is_mapped(p));
  expect_counters_zero();
}

TEST(HostMemory, RefusedRegistrationUndoesTheLockAndTheMapping) {
  RegisteringDevice dev;
  dev.refuse = true;
  const auto locked_before = vm_locked_bytes();
  try {
    HostBuffer b(4 * kPage, HostMemoryMode::registered, &dev, "refused test");
    FAIL() << "construction succeeded";
  } catch (const zob::DeviceError& e) {
    EXPECT_EQ(e.kind(), zob::DeviceErrorKind::registration_refused);
  }
  ASSERT_NE(dev.last_host, nullptr);
  EXPECT_EQ(dev.unregistered_host, nullptr) << "unregistered what was never registered";
  EXPECT_EQ(vm_locked_bytes(), locked_before);
  EXPECT_FALSE(is_mapped(dev.last_host));
  expect_counters_zero();
}

TEST(HostMemory, DeviceHostComesFromTheDeviceAndGoesBackToIt) {
  RegisteringDevice dev;
  {
    HostBuffer b(3 * kPage + 1, HostMemoryMode::device_host, &dev, "hostalloc test");
    EXPECT_EQ(dev.host_allocations, 1);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % kPage, 0u);
    EXPECT_EQ(b.registration_method(), "none");
    expect_usable(b);
  }
  EXPECT_EQ(dev.host_allocations, 0);
  expect_counters_zero();
  EXPECT_THROW(HostBuffer(kPage, HostMemoryMode::device_host, nullptr, "no device"),
               zob::UsageError);
}

TEST(HostMemory, MoveTransfersOwnershipAndReleasesOnce) {
  const auto locked_before = vm_locked_bytes();
  {
    HostBuffer a(2 * kPage, HostMemoryMode::locked, nullptr, "a");
    void* pa = a.data();
    HostBuffer b(std::move(a));
    EXPECT_EQ(a.data(), nullptr);
    EXPECT_EQ(b.data(), pa);
    EXPECT_EQ(b.mode(), HostMemoryMode::locked);
    HostBuffer c(kPage, HostMemoryMode::locked, nullptr, "c");
    void* pc = c.data();
    EXPECT_EQ(vm_locked_bytes(), locked_before + 3 * kPage);
    c = std::move(b);  // c's own page is released first
    EXPECT_EQ(c.data(), pa);
    EXPECT_FALSE(is_mapped(pc));
    EXPECT_EQ(vm_locked_bytes(), locked_before + 2 * kPage);
    EXPECT_EQ(zob::host_memory_counters().locked_bytes, 2 * kPage);
    HostBuffer empty;
    EXPECT_EQ(empty.data(), nullptr);
    c = std::move(c);  // self-move keeps the buffer
    EXPECT_EQ(c.data(), pa);
  }
  EXPECT_EQ(vm_locked_bytes(), locked_before);
  expect_counters_zero();
}

// In a child: drop CAP_IPC_LOCK from the effective set and cap RLIMIT_MEMLOCK at 64 KiB, then
// a 1 MiB locked buffer must be refused with lock_refused naming the limit and the fix, and
// leave nothing locked. The exit code says which check failed.
int refused_lock_child() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct caps[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, caps) != 0) return 10;
  caps[CAP_TO_INDEX(CAP_IPC_LOCK)].effective &= ~CAP_TO_MASK(CAP_IPC_LOCK);
  if (syscall(SYS_capset, &header, caps) != 0) return 11;
  const rlimit limit{64 * 1024, 64 * 1024};
  if (setrlimit(RLIMIT_MEMLOCK, &limit) != 0) return 12;
  try {
    HostBuffer b(1 << 20, HostMemoryMode::locked, nullptr, "fp32 master");
    return 13;
  } catch (const zob::DeviceError& e) {
    const std::string what = e.what();
    if (e.kind() != zob::DeviceErrorKind::lock_refused) return 14;
    if (what.find("RLIMIT_MEMLOCK 64 KiB") == std::string::npos) return 15;
    if (what.find("ulimit -l unlimited") == std::string::npos) return 16;
    if (what.find("CAP_IPC_LOCK") == std::string::npos) return 17;
    if (what.find("fp32 master") == std::string::npos) return 18;
    if (what.find("1048576") == std::string::npos) return 19;
  } catch (...) {
    return 20;
  }
  if (vm_locked_bytes() != 0) return 21;
  if (zob::host_memory_counters().locked_bytes != 0) return 22;
  return 0;
}

TEST(HostMemory, MlockRefusalNamesTheLimitAndLeavesNothingLocked) {
  const pid_t pid = fork();
  ASSERT_GE(pid, 0) << std::strerror(errno);
  if (pid == 0) _exit(refused_lock_child());
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died, status " << status;
  const char* meaning[] = {"ok",
                           "",
                           "",
                           "",
                           "",
                           "",
                           "",
                           "",
                           "",
                           "",
                           "capget failed",
                           "capset failed",
                           "setrlimit failed",
                           "mlock was not refused",
                           "wrong error kind",
                           "message lacks the RLIMIT_MEMLOCK value",
                           "message lacks the ulimit fix",
                           "message lacks CAP_IPC_LOCK",
                           "message lacks the buffer name",
                           "message lacks the bytes",
                           "not a DeviceError",
                           "VmLck not zero after",
                           "counter not zero after"};
  const int code = WEXITSTATUS(status);
  EXPECT_EQ(code, 0) << (code < 23 ? meaning[code] : "unexpected exit code");
}

}  // namespace

// First touch by a pool: every page is resident (mincore) and zero before mlock, in every
// mode that maps memory, and the buffer behaves as without it.
TEST(HostMemory, FirstTouchByAPoolFaultsEveryPageAndZeroesIt) {
  zob::ThreadPool pool(3);
  const std::size_t bytes = (std::size_t{5} << 20) + 3 * kPage + 17;
  for (HostMemoryMode mode : {HostMemoryMode::pageable, HostMemoryMode::locked}) {
    HostBuffer b(bytes, mode, nullptr, "touched", &pool);
    const std::size_t pages = (bytes + kPage - 1) / kPage;
    std::vector<unsigned char> resident(pages);
    ASSERT_EQ(mincore(b.data(), pages * kPage, resident.data()), 0);
    std::size_t present = 0;
    for (unsigned char r : resident) present += r & 1u;
    EXPECT_EQ(present, pages) << zob::to_string(mode);
    const auto* p = b.as<unsigned char>();
    std::size_t nonzero = 0;
    for (std::size_t i = 0; i < bytes; ++i) nonzero += p[i] != 0;
    EXPECT_EQ(nonzero, 0u);
    expect_usable(b);
  }
  expect_counters_zero();
}

namespace {

// The smaps entry of the mapping that holds `p` (the kernel may merge it with a neighbour of
// the same flags): its VmFlags line and its AnonHugePages (kB).
struct SmapsEntry {
  bool found = false;
  std::string vm_flags;
  std::uint64_t anon_huge_kb = 0;
};

SmapsEntry smaps_entry(const void* p) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  SmapsEntry e;
  bool inside = false;
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  while (std::getline(in, line)) {
    const auto dash = line.find('-');
    const bool header = dash != std::string::npos && dash > 0 && line.find(':') > dash &&
                        std::isxdigit(static_cast<unsigned char>(line[0])) != 0;
    if (header) {
      const auto lo = std::stoull(line.substr(0, dash), nullptr, 16);
      const auto hi = std::stoull(line.substr(dash + 1), nullptr, 16);
      inside = lo <= at && at < hi;
      e.found = e.found || inside;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      e.vm_flags = line.substr(8) + " ";
    } else if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      e.anon_huge_kb = std::stoull(line.substr(14));
    }
  }
  return e;
}

std::string thp_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string all;
  std::getline(in, all);
  const auto l = all.find('['), r = all.find(']');
  return l == std::string::npos || r == std::string::npos ? "" : all.substr(l + 1, r - l - 1);
}

}  // namespace

// HostPages: the tool's buffers carry the huge-page advice (smaps VmFlags "hg"); one that stands
// for PyTorch's CPU allocator does not, and under THP "madvise" its touched pages are all 4 KiB,
// as a fresh at::empty is (the reassign temporary's D2H faults them; issue 38's profile).
TEST(HostMemory, PytorchAllocatorPagesCarryNoHugePageAdvice) {
  if (thp_mode().empty() || thp_mode() == "never") GTEST_SKIP() << "no transparent huge pages";
  const std::size_t bytes = std::size_t{64} << 20;
  HostBuffer ours(bytes, HostMemoryMode::pageable, nullptr, "ours");
  HostBuffer torch_like(bytes, HostMemoryMode::pageable, nullptr, "torch-like", nullptr,
                        zob::HostPages::as_pytorch_cpu_allocator);
  std::memset(ours.data(), 1, bytes);
  std::memset(torch_like.data(), 1, bytes);
  const SmapsEntry a = smaps_entry(ours.data()), b = smaps_entry(torch_like.data());
  ASSERT_TRUE(a.found && b.found);
  EXPECT_NE(a.vm_flags.find(" hg "), std::string::npos) << a.vm_flags;
  EXPECT_EQ(b.vm_flags.find(" hg "), std::string::npos) << b.vm_flags;
  if (thp_mode() == "madvise") EXPECT_EQ(b.anon_huge_kb, 0u);
  expect_usable(torch_like);
}
