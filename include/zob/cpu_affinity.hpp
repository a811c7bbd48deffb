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

// ---- --gpus N: one Adam pool per rank, the ranks of one host side by side ----

// The NUMA node of a device: DeviceInfo::numa_node, else the sysfs node of its PCI bus id;
// -1 when unknown.
int device_numa_node(const DeviceInfo& info, const std::string& sysfs = "/sys");

// Part `index` of `parts` contiguous parts of `cpus` (0 <= index < parts), in list order; part
// sizes differ by at most one, the larger ones first. With more parts than CPUs every part is
// the one CPU cpus[index mod size] (CPUs shared round-robin) and `notice` receives a line
// saying so. Empty `cpus`: empty. Throws std::invalid_argument on a bad index or parts < 1.
std::vector<int> cpu_slice(const std::vector<int>& cpus, int parts, int index,
                           std::string* notice = nullptr);

// Refuses (UsageError, one line) a --cpu-affinity list for `ranks` ranks (--gpus; 0 = not
// known yet, checked as 1) that lists fewer CPUs than ranks or a CPU outside `allowed`.
void validate_rank_cpu_affinity(const std::vector<int>& cpus, int ranks,
                                const std::vector<int>& allowed);

// The placement of rank `rank`'s Adam threads, node_of_rank[r] being the NUMA node of rank r's
// device (-1 unknown) as every rank of the host sees it (so every rank computes the same,
// disjoint split):
// - --cpu-affinity given: rank r takes part r of node_of_rank.size() parts of the list
//   ("cpu-affinity, rank slice r/N"; UsageError when it lists fewer CPUs than ranks, or a CPU
//   outside `allowed`);
// - else the ranks whose node has allowed CPUs split those CPUs (node CPUs ∩ allowed) among
//   themselves in rank order ("numa-node K, rank slice i/m": i-th of the m ranks on node K);
// - the other ranks split the allowed CPUs that no such node group uses (all allowed CPUs if
//   none are left) ("rank slice i/m").
// threads 0: one thread per CPU of the slice; else thread t on slice CPU t mod slice size.
// Policy "none" and no CPUs only when `allowed` is empty. `notice` receives a line (or lines
// joined by "; ") when CPUs are shared or a node cannot be used.
ThreadPlacement choose_rank_placement(const std::vector<int>& cpu_affinity, int threads, int rank,
                                      const std::vector<int>& node_of_rank,
                                      const std::vector<int>& allowed, std::string* notice,
                                      const std::string& sysfs = "/sys");

}  // namespace zob
