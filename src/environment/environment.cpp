#include "zob/environment.hpp"

#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <sstream>

#include "zob/build_info.hpp"
#include "zob/thread_pool.hpp"

#ifndef ZOB_VERSION
#define ZOB_VERSION "0.0.0"
#endif
#ifndef ZOB_BUILD_TYPE
#define ZOB_BUILD_TYPE "unknown"
#endif

namespace zob {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

bool has_cap_ipc_lock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capget, &header, data) != 0) return false;
  return (data[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32))) != 0;
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

std::uint64_t meminfo_bytes(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      std::istringstream fields(line.substr(key.size() + 1));
      std::uint64_t kib = 0;
      fields >> kib;
      return kib * 1024;
    }
  }
  return 0;
}

std::string selected_thp_mode(const std::string& text) {
  const auto open = text.find('['), close = text.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return {};
  return text.substr(open + 1, close - open - 1);
}

HostEnvironment collect_host_environment() {
  HostEnvironment e;
  e.tool_version = ZOB_VERSION;
  e.git_commit = build_git_commit();
  e.build_type = ZOB_BUILD_TYPE;
#if defined(__clang__)
  e.compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
  e.compiler = "gcc " __VERSION__;
#endif
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) e.hostname = host;
  utsname u{};
  if (uname(&u) == 0) e.kernel = std::string(u.sysname) + " " + u.release;
  std::istringstream cpuinfo(read_file("/proc/cpuinfo"));
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      e.cpu_model = trim(line.substr(line.find(':') + 1));
      break;
    }
  }
  e.utc_start = utc_now();
  e.logical_cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  e.available_cpus = zob::available_cpus();
  e.transparent_hugepages =
      selected_thp_mode(read_file("/sys/kernel/mm/transparent_hugepage/enabled"));
  rlimit rl{};
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
    e.memlock_unlimited = rl.rlim_cur == RLIM_INFINITY;
    e.memlock_limit = e.memlock_unlimited ? 0 : static_cast<std::uint64_t>(rl.rlim_cur);
  }
  e.can_lock_without_limit = has_cap_ipc_lock();
  const std::string meminfo = read_file("/proc/meminfo");
  e.mem_total = meminfo_bytes(meminfo, "MemTotal");
  e.mem_available = meminfo_bytes(meminfo, "MemAvailable");
  return e;
}

PcieLink read_pcie_link(const std::string& bus_id) {
  PcieLink link;
  if (bus_id.empty()) return link;
  std::string id = bus_id;
  for (auto& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // CUDA reports "00000000:19:00.0"; sysfs wants a 4-digit domain.
  if (id.size() > 12 && id[8] == ':') id = id.substr(4);
  const std::string dir = "/sys/bus/pci/devices/" + id + "/";
  link.current_speed = trim(read_file(dir + "current_link_speed"));
  link.max_speed = trim(read_file(dir + "max_link_speed"));
  try {
    link.current_width = std::stoi("0" + trim(read_file(dir + "current_link_width")));
    link.max_width = std::stoi("0" + trim(read_file(dir + "max_link_width")));
    const std::string numa = trim(read_file(dir + "numa_node"));
    if (!numa.empty()) link.numa_node = std::stoi(numa);
  } catch (const std::exception&) {
    // unreadable or malformed sysfs: leave the defaults ("unknown")
  }
  return link;
}

nlohmann::json to_json(const HostEnvironment& e) {
  return {{"tool_version", e.tool_version},
          {"git_commit", e.git_commit},
          {"build_type", e.build_type},
          {"compiler", e.compiler},
          {"hostname", e.hostname},
          {"kernel", e.kernel},
          {"cpu_model", e.cpu_model},
          {"utc_start", e.utc_start},
          {"logical_cpus", e.logical_cpus},
          {"available_cpus", e.available_cpus},
          {"transparent_hugepages", e.transparent_hugepages},
          {"memlock_limit_bytes",
           e.memlock_unlimited ? nlohmann::json("unlimited") : nlohmann::json(e.memlock_limit)},
          {"cap_ipc_lock", e.can_lock_without_limit},
          {"mem_total_bytes", e.mem_total},
          {"mem_available_bytes", e.mem_available}};
}

nlohmann::json environment_json(const HostEnvironment& host, const DeviceInfo& d) {
  nlohmann::json j = to_json(host);
  const PcieLink link = read_pcie_link(d.pci_bus_id);
  j["device"] = {{"backend", d.backend},
                 {"name", d.name},
                 {"runtime_version", d.runtime_version},
                 {"driver_version", d.driver_version},
                 {"pci_bus_id", d.pci_bus_id},
                 {"total_memory_bytes", d.total_memory_bytes},
                 {"numa_node", d.numa_node >= 0 ? d.numa_node : link.numa_node},
                 {"pcie_current_speed", link.current_speed},
                 {"pcie_current_width", link.current_width},
                 {"pcie_max_speed", link.max_speed},
                 {"pcie_max_width", link.max_width}};
  return j;
}

}  // namespace zob
