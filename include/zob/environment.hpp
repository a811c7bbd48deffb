// What a result was measured on: the host (read by the parent from /proc and /sys, no device
// runtime involved) and the device (DeviceInfo from the probe child, plus the PCIe link read
// from sysfs). Goes into DRIVERRESULT's "environment" and the report's header.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "zob/device.hpp"

namespace zob {

struct HostEnvironment {
  std::string tool_version, git_commit, build_type, compiler;
  std::string hostname, kernel, cpu_model, utc_start;
  int logical_cpus = 0;                 // online CPUs of the machine
  int available_cpus = 0;               // CPUs this process may run on (affinity)
  std::string transparent_hugepages;    // the selected mode: always / madvise / never / ""
  std::uint64_t memlock_limit = 0;      // RLIMIT_MEMLOCK soft limit in bytes
  bool memlock_unlimited = false;       // RLIM_INFINITY
  bool can_lock_without_limit = false;  // effective CAP_IPC_LOCK
  std::uint64_t mem_total = 0, mem_available = 0;  // bytes, /proc/meminfo
};
HostEnvironment collect_host_environment();

// PCIe link of a device by PCI bus id ("0000:19:00.0"), from sysfs; empty when unreadable.
struct PcieLink {
  std::string current_speed, max_speed;  // e.g. "32.0 GT/s PCIe"
  int current_width = 0, max_width = 0;
  int numa_node = -1;
};
PcieLink read_pcie_link(const std::string& pci_bus_id);

nlohmann::json to_json(const HostEnvironment&);
nlohmann::json environment_json(const HostEnvironment&, const DeviceInfo&);

// Helpers shared with the pre-flight check, exposed for tests.
std::uint64_t meminfo_bytes(const std::string& meminfo_text, const std::string& key);
std::string selected_thp_mode(
    const std::string& sysfs_text);  // "always [madvise] never" -> "madvise"

}  // namespace zob
