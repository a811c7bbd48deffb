// The fake Level Zero driver's internals shared by its three files. The driver is a test
// fixture: a shared library the real loader loads through ZE_ENABLE_ALT_DRIVERS, that copies
// with memcpy, runs kernels by name with zob::cpu and serves the zex import functions.
#pragma once
#include <level_zero/zes_ddi.h>
#include <level_zero/zet_ddi.h>
#include <level_zero/ze_ddi.h>

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

}  // namespace fake_ze
