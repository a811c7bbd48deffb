// --list-devices: one probe child per backend (the parent still loads no device runtime), and
// one line each saying what is there or why not.
#include <fmt/format.h>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "driver/driver.hpp"
#include "driver/process.hpp"
#include "report/json_util.hpp"
#include "zob/backends.hpp"
#include "zob/exit_codes.hpp"

namespace zob {

namespace {

std::string gb(std::uint64_t bytes) {
  return fmt::format("{:.1f} GB", static_cast<double>(bytes) / 1e9);
}

// "available: <name> ..." or "unavailable: <reason>".
std::string probe_line(const RunConfig& config, DeviceKind kind) {
  RunConfig c = config;
  c.device = kind;
  const std::vector<std::string> args{kProbeFlag, kConfigFlag, dump_json(nlohmann::json(c)),
                                      kResultFdFlag, std::to_string(kChildResultFd)};
  ChildOutcome o;
  try {
    o = run_child(args, config.timeout_s > 0 ? probe_timeout_s(config.timeout_s) : kProbeTimeoutS);
  } catch (const std::exception& e) {
    return std::string("unavailable: could not start the probe: ") + e.what();
  }
  if (o.stopped_by != 0) return "not probed: interrupted by " + describe_signal(o.stopped_by);
  if (o.timed_out) return "unavailable: the probe timed out";
  if (o.term_signal != 0)
    return "unavailable: the probe was killed by " + describe_signal(o.term_signal);
  try {
    const auto answer = nlohmann::json::parse(o.output);
    if (!answer.at("ok").get<bool>()) {
      std::string why = answer.at("error").get<std::string>();
      const std::string prefix = std::string(to_string(kind)) + ": ";
      if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
      return "unavailable: " + one_line(why);
    }
    const DeviceInfo d = answer.at("device_info").get<DeviceInfo>();
    std::string line =
        fmt::format("available: {} (index {})", one_line(d.name), config.device_index);
    if (!d.runtime_version.empty()) line += ", runtime " + one_line(d.runtime_version);
    if (!d.driver_version.empty()) line += ", driver " + one_line(d.driver_version);
    if (d.total_memory_bytes > 0) line += ", " + gb(d.total_memory_bytes);
    if (!d.pci_bus_id.empty()) line += ", PCI " + d.pci_bus_id;
    return line;
  } catch (const std::exception& e) {
    return fmt::format("unavailable: the probe (exit code {}) sent no valid answer: {}",
                       o.exit_code, one_line(e.what()));
  }
}

}  // namespace

int run_list_devices(const RunConfig& config) {
  install_driver_signal_handlers();
  for (const BackendInfo& b : kBackends) {
    const std::string line = fmt::format("{:<6}{}\n", b.name, probe_line(config, b.kind));
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
    if (stop_signal() != 0) break;
  }
  return exit_code::ok;
}

}  // namespace zob
