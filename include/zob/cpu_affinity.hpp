// CPU lists ("0-7,16-23") and where the Adam threads go: --cpu-affinity, or the CPUs of the
// device's NUMA node, or nowhere in particular.
#pragma once
#include <string>
#include <vector>

#include "zob/config.hpp"
#include "zob/device.hpp"
#include "zob/result.hpp"

namespace zob {

// Parses a Linux CPU list: comma-separated CPUs and inclusive ranges "a-b" (a <= b), in the
// order given. Throws UsageError naming `what` on garbage, an empty item, a reversed range, a
// CPU above 65535, or a CPU listed twice.
std::vector<int> parse_cpu_list(const std::string& text, const std::string& what = "CPU list");
// "0-3,8" for {0,1,2,3,8}: consecutive runs in the order given.
std::string format_cpu_list(const std::vector<int>& cpus);

// The CPUs this process may run on (sched_getaffinity), ascending.
std::vector<int> allowed_cpu_list();

// <sysfs>/devices/system/node/node<N>/cpulist; empty when absent or unreadable.
std::vector<int> numa_node_cpus(int node, const std::string& sysfs = "/sys");
// <sysfs>/bus/pci/devices/<bus id>/numa_node for a bus id in any usual spelling
// ("00000000:3B:00.0", "0000:3b:00.0"); -1 when unknown.
int pci_numa_node(const std::string& pci_bus_id, const std::string& sysfs = "/sys");

// Refuses (UsageError, one line) a --cpu-affinity list shorter than `threads` or naming a CPU
// outside `allowed`.
void validate_cpu_affinity(const std::vector<int>& cpus, int threads,
                           const std::vector<int>& allowed);

// The placement of `threads` Adam threads: --cpu-affinity when given (its first `threads`
// CPUs); else the device's NUMA node (DeviceInfo::numa_node, else the sysfs node of its PCI
// bus id) intersected with `allowed`, thread i on node CPU i mod count; else none. `notice`
// receives a line when the node is known but cannot be used or is oversubscribed.
ThreadPlacement choose_placement(const std::vector<int>& cpu_affinity, int threads,
                                 const DeviceInfo& info, const std::vector<int>& allowed,
                                 std::string* notice, const std::string& sysfs = "/sys");

}  // namespace zob
