// The fake Level Zero driver's internals shared by its three files. The driver is a test
// fixture: a shared library the real loader loads through ZE_ENABLE_ALT_DRIVERS, that copies
// with memcpy, runs kernels by name with zob::cpu and serves the zex import functions.
#pragma once
#include <level_zero/zes_ddi.h>
#include <level_zero/zet_ddi.h>
#include <level_zero/ze_ddi.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fake_ze {

// Table fillers (fake_driver.cpp) for the tables the backend uses.
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

struct KernelLaunch {
  std::string name;
  std::vector<std::vector<std::uint8_t>> args;  // bytes given to zeKernelSetArgumentValue
  std::uint32_t group_size[3] = {1, 1, 1};
  ze_group_count_t groups{};
};

// True when [p, p+bytes) lies inside one device allocation (kernels may touch nothing else:
// not host allocations, not imported or memmapped host memory).
bool is_device_range(const void* p, std::size_t bytes);

// Runs the kernel with zob::cpu. Returns an error (and prints why on stderr) for an unknown
// name, a wrong argument size, a launch that does not cover the problem, or a pointer
// argument outside device memory.
ze_result_t run_kernel(const KernelLaunch& launch);

// Objects the driver handed out and that were not given back yet. Atomics with constant
// initialisation and no destructor, so the at-exit leak report (fake_hooks.cpp) can read them
// whatever the order of static destruction.
struct Live {
  std::atomic<long> allocs{0}, imports{0}, contexts{0}, command_lists{0}, event_pools{0},
      events{0}, modules{0}, kernels{0};
  std::atomic<unsigned long long> alloc_bytes{0}, import_bytes{0};
  void add_alloc(std::size_t bytes) { ++allocs; alloc_bytes += bytes; }
  void remove_alloc(std::size_t bytes) { --allocs; alloc_bytes -= bytes; }
  void add_import(std::size_t bytes) { ++imports; import_bytes += bytes; }
  void remove_import(std::size_t bytes) { --imports; import_bytes -= bytes; }
};
extern Live g_live;

// Whether the fault switches apply in this process (FAKE_ZE_FAULT_CMDLINE): lets one e2e run
// fail one arm's child while the other arm, in another process, runs normally.
bool faults_apply();

}  // namespace fake_ze
