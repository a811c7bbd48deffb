#include "report/details.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>

#include "report/arms.hpp"
#include "report/json_util.hpp"
#include "zob/backends.hpp"
#include "zob/environment.hpp"
#include "zob/phase.hpp"
#include "zob/step.hpp"
#include "zob/text.hpp"

namespace zob {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::size_t timed_start(const ArmResult& r) {
  return std::min(static_cast<std::size_t>(std::max(r.warmup, 0)), r.samples.size());
}

double json_number(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : -1;
}

}  // namespace

std::string bytes_text(std::uint64_t b) {
  const double v = static_cast<double>(b);
  if (v >= 1e9) return fmt::format("{:.2f} GB", v / 1e9);
  if (v >= 1e6) return fmt::format("{:.2f} MB", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.2f} kB", v / 1e3);
  return fmt::format("{} B", b);
}

ArmResult combine_rounds(const std::vector<const ArmResult*>& runs) {
  if (runs.empty()) return {};
  const ArmResult* base = runs.front();
  for (const ArmResult* r : runs) {
    if (r->ok) {
      base = r;
      break;
    }
  }
  ArmResult out = *base;
  if (runs.size() == 1) return out;
  out.samples.clear();
  bool first = true;
  for (std::size_t k = 0; k < runs.size(); ++k) {
    const ArmResult& r = *runs[k];
    if (!r.ok) {
      if (out.ok) {
        out.ok = false;
        out.error = fmt::format("round {}: {}", k + 1, r.error);
        out.failed_step = r.failed_step;
        out.failed_phase = r.failed_phase;
      }
      continue;
    }
    const std::size_t from = first ? 0 : timed_start(r);
    out.samples.insert(out.samples.end(), r.samples.begin() + static_cast<std::ptrdiff_t>(from),
                       r.samples.end());
    out.gpu_peak_gb = std::max(out.gpu_peak_gb, r.gpu_peak_gb);
    out.gpu_reserved_peak_gb = std::max(out.gpu_reserved_peak_gb, r.gpu_reserved_peak_gb);
    first = false;
  }
  const std::vector<double> timed = out.timed_step_s();
  if (!timed.empty()) {
    const Summary s = summarize(timed);
    out.step_avg_s = s.mean;
    out.step_min_s = s.min;
  }
  return out;
}

std::vector<const ArmResult*> runs_of(const RunResult& run, Arm arm) {
  std::vector<const ArmResult*> out;
  if (run.rounds.empty()) {
    for (const auto& a : run.arms) {
      if (a.arm == arm) out.push_back(&a);
    }
    return out;
  }
  for (const auto& round : run.rounds) {
    for (const auto& a : round) {
      if (a.arm == arm) out.push_back(&a);
    }
  }
  return out;
}

std::vector<double> round_speedups(const RunResult& run) {
  const SpeedupArms pair = speedup_arms(run.config);
  const auto reg = runs_of(run, pair.fast);
  const auto unreg = runs_of(run, pair.slow);
  std::vector<double> out;
  for (std::size_t k = 0; k < std::min(reg.size(), unreg.size()); ++k) {
    if (!reg[k]->ok || !unreg[k]->ok) continue;
    const double r = summarize(reg[k]->timed_step_s()).median;
    const double u = summarize(unreg[k]->timed_step_s()).median;
    if (r > 0 && std::isfinite(u)) out.push_back(u / r);
  }
  return out;
}

Summary step_summary(const ArmResult& arm) { return summarize(arm.timed_step_s()); }

std::vector<std::string> spread_warnings(const RunResult& run) {
  std::vector<std::string> out;
  for (const auto& a : run.arms) {
    if (!a.ok) continue;
    const Summary s = step_summary(a);
    if (s.n < 2 || !(s.rel_spread() > kSpreadWarning)) continue;
    out.push_back(fmt::format(
        "arm {}: step times spread {:.1f} % (stddev {:.4g} s / median {:.4g} s over {} timed "
        "steps), above {:.0f} %: too noisy to trust; stop other work on the machine, or raise "
        "--steps or --repeats",
        to_string(a.arm), 100 * s.rel_spread(), s.stddev, s.median, s.n, 100 * kSpreadWarning));
  }
  return out;
}

std::string shared_device(const RunResult& run) {
  struct Ran {
    const ArmResult* arm;
    std::string name;  // "arm registered", with rounds "arm registered (round 2)"
  };
  std::vector<Ran> all;  // every arm run, in the order they ran
  if (run.rounds.empty()) {
    for (const auto& a : run.arms) all.push_back({&a, fmt::format("arm {}", to_string(a.arm))});
  }
  for (std::size_t k = 0; k < run.rounds.size(); ++k) {
    for (const auto& a : run.rounds[k]) {
      all.push_back({&a, run.rounds.size() == 1
                             ? fmt::format("arm {}", to_string(a.arm))
                             : fmt::format("arm {} (round {})", to_string(a.arm), k + 1)});
    }
  }
  const Ran* first = nullptr;
  const std::uint64_t drop = std::max(kSharedFreeDrop, run.device_info.total_memory_bytes / 50);
  for (const Ran& r : all) {
    const ArmResult& a = *r.arm;
    if (a.device_other_processes > 0) {
      return fmt::format("{} other process{} on the device during {}", a.device_other_processes,
                         a.device_other_processes == 1 ? "" : "es", r.name);
    }
    if (a.device_free_bytes == 0) continue;
    if (first == nullptr) {
      first = &r;
    } else if (first->arm->device_free_bytes > a.device_free_bytes + drop) {
      return fmt::format("its free memory fell by {:.1f} GiB between the start of {} and of {}",
                         static_cast<double>(first->arm->device_free_bytes - a.device_free_bytes) /
                             static_cast<double>(std::uint64_t{1} << 30),
                         first->name, r.name);
    }
  }
  return "";
}

namespace {

// Why the processes on a `backend` device cannot be counted.
std::string uncounted_because(const std::string& backend) {
  if (backend == to_string(DeviceKind::cpu)) return "the CPU device keeps no list of its users";
  if (backend == to_string(DeviceKind::cuda)) {
    return "NVML (libnvidia-ml.so.1) could not be loaded or did not answer";
  }
  if (backend == to_string(DeviceKind::xpu)) return "Level Zero lists no processes of a device";
  return "the " + backend + " device lists no processes";
}

}  // namespace

OccupancyCheck occupancy_check(const RunResult& run) {
  std::vector<const ArmResult*> ran;
  for (const auto& round : run.rounds) {
    for (const auto& a : round) ran.push_back(&a);
  }
  if (run.rounds.empty()) {
    for (const auto& a : run.arms) ran.push_back(&a);
  }
  OccupancyCheck c;
  std::string backend;
  bool any = false;
  c.processes_counted = c.free_memory_watched = true;
  for (const ArmResult* a : ran) {
    if (!a->ok) continue;
    any = true;
    if (backend.empty()) backend = a->device;
    if (a->device_other_processes < 0) c.processes_counted = false;
    if (a->device_free_bytes == 0) c.free_memory_watched = false;
  }
  if (!any) return OccupancyCheck{};
  if (backend.empty()) backend = to_string(run.config.device);
  if (c.processes_counted && c.free_memory_watched) return c;
  if (!c.processes_counted) {
    c.note = fmt::format(
        "the shared-device check could not count the processes on the device ({}); {}",
        uncounted_because(backend),
        c.free_memory_watched
            ? "only a fall of its free memory between the arms would show another run on it"
            : "nor is its free memory known, so another run on it would go unnoticed");
  } else {
    c.note =
        "the shared-device check could not read the device's free memory; only its process "
        "count was checked";
  }
  return c;
}

nlohmann::ordered_json occupancy_check_json(const RunResult& run) {
  const OccupancyCheck c = occupancy_check(run);
  return {
      {"processes_counted", c.processes_counted},
      {"free_memory_watched", c.free_memory_watched},
      {"note", c.note.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(c.note)}};
}

std::vector<std::string> run_warnings(const RunResult& run) {
  std::vector<std::string> out = spread_warnings(run);
  if (std::string w = not_applicable_warning(run); !w.empty()) out.push_back(std::move(w));
  if (const std::string s = shared_device(run); !s.empty()) {
    out.push_back("another process used the device during the run (" + s +
                  "): the arms' times include its work, so no verdict is conclusive; run again "
                  "with the device to itself");
  }
  return out;
}

std::string first_round_difference(const RunResult& run) {
  for (Arm arm : run.config.arms) {
    const auto runs = runs_of(run, arm);
    const ArmResult* ref = nullptr;
    std::size_t ref_round = 0;
    for (std::size_t k = 0; k < runs.size(); ++k) {
      const ArmResult& r = *runs[k];
      if (!r.ok) continue;
      if (ref == nullptr) {
        ref = &r;
        ref_round = k + 1;
        continue;
      }
      const std::string who =
          fmt::format("arm {} round {} vs round {}", to_string(arm), k + 1, ref_round);
      if (r.samples.size() != ref->samples.size()) {
        return fmt::format("{}: step count differs ({} vs {})", who, r.samples.size(),
                           ref->samples.size());
      }
      for (std::size_t i = 0; i < r.samples.size(); ++i) {
        if (!same_bits(r.samples[i].loss, ref->samples[i].loss)) {
          return fmt::format("{}: loss of step {} ({}) differs: {:.9g} vs {:.9g}", who, i + 1,
                             static_cast<int>(i) < ref->warmup ? "warmup" : "timed",
                             r.samples[i].loss, ref->samples[i].loss);
        }
      }
      if (r.param_checksum != ref->param_checksum) {
        return fmt::format("{}: param_checksum differs: {} vs {}", who, r.param_checksum,
                           ref->param_checksum);
      }
    }
  }
  return "";
}

std::optional<double> register_s_per_gib(const ArmResult& arm) {
  if (arm.registered_bytes == 0 || !std::isfinite(arm.register_s)) return std::nullopt;
  return arm.register_s / (static_cast<double>(arm.registered_bytes) / kGiB);
}

nlohmann::json phases_json(const ArmResult& arm) { return summarize_phases(arm); }

void add_arm_details(nlohmann::ordered_json& j, const RunResult& run, const ArmResult& arm) {
  const Summary s = step_summary(arm);
  j["step_stats"] = arm.ok && s.n > 0 ? nlohmann::json(to_json(s)) : nlohmann::json(nullptr);
  nlohmann::json rounds = nlohmann::json::array();
  int k = 0;
  for (const ArmResult* r : runs_of(run, arm.arm)) {
    ++k;
    const Summary rs = summarize(r->timed_step_s());
    nlohmann::json e{{"round", k}, {"pid", r->pid}, {"ok", r->ok}};
    e["step_avg_s"] = r->ok ? finite_or_null(r->step_avg_s) : nlohmann::json(nullptr);
    e["step_median_s"] = r->ok && rs.n > 0 ? finite_or_null(rs.median) : nlohmann::json(nullptr);
    e["param_checksum"] = r->param_checksum;
    rounds.push_back(std::move(e));
  }
  j["rounds"] = rounds;
  const auto per_gib = register_s_per_gib(arm);
  j["register_s_per_gib"] = per_gib ? finite_or_null(*per_gib) : nlohmann::json(nullptr);
}

void add_run_details(nlohmann::ordered_json& j, const RunResult& run) {
  j["repeats"] = run.config.repeats;
  const std::vector<double> ratios = round_speedups(run);
  if (ratios.empty()) {
    j["speedup_median"] = nullptr;
    j["speedup_interval"] = nullptr;
  } else {
    const MedianInterval m = median_interval(ratios);
    j["speedup_median"] = finite_or_null(m.median);
    j["speedup_interval"] = {{"low", finite_or_null(m.low)},
                             {"high", finite_or_null(m.high)},
                             {"confidence", m.confidence},
                             {"method", m.method},
                             {"rounds", ratios.size()}};
  }
  j["warnings"] = run_warnings(run);
  j["environment"] = run.has_environment
                         ? nlohmann::json(environment_json(run.host, run.device_info))
                         : nlohmann::json(nullptr);
}

std::string render_environment_header(const RunResult& run) {
  if (!run.has_environment) return "";
  const HostEnvironment& h = run.host;
  const DeviceInfo& d = run.device_info;
  const PcieLink link = read_pcie_link(d.pci_bus_id);
  std::string out;
  out += fmt::format("# zero3-offload-bench {} (commit {}, {}, {})\n", h.tool_version, h.git_commit,
                     h.build_type, h.compiler);
  out += fmt::format("# device: {} ({}), runtime {}, driver {}, {} memory\n", one_line(d.name),
                     d.backend, one_line(d.runtime_version.empty() ? "-" : d.runtime_version),
                     one_line(d.driver_version.empty() ? "-" : d.driver_version),
                     bytes_text(d.total_memory_bytes));
  if (link.current_speed.empty()) {
    out += "# pcie: n/a\n";
  } else {
    out += fmt::format("# pcie: {} x{} (max {} x{}), NUMA node {}\n", link.current_speed,
                       link.current_width, link.max_speed, link.max_width, link.numa_node);
  }
  // threads 0: --gpus N without --threads, each rank one thread per CPU of its slice.
  const std::string adam_threads =
      run.config.threads > 0 ? fmt::format("{} Adam threads", run.config.threads)
                             : std::string("Adam threads: one per CPU of each rank's slice");
  out += fmt::format("# host: {}, {} of {} CPUs available, {}, THP {}\n",
                     one_line(h.cpu_model.empty() ? "unknown CPU" : h.cpu_model), h.available_cpus,
                     h.logical_cpus, adam_threads,
                     h.transparent_hugepages.empty() ? "n/a" : h.transparent_hugepages);
  out += fmt::format("# memory: MemAvailable {} of {}, memlock {}{}\n", bytes_text(h.mem_available),
                     bytes_text(h.mem_total),
                     h.memlock_unlimited ? std::string("unlimited") : bytes_text(h.memlock_limit),
                     h.can_lock_without_limit ? " (CAP_IPC_LOCK)" : "");
  out += fmt::format("# kernel: {}, host {}, started {}\n", one_line(h.kernel),
                     one_line(h.hostname), h.utc_start);
  const RunConfig& c = run.config;
  const char* decoder = decoder_kernels_used(c);
  out += fmt::format("# step: {} loop, {} schedule ({}){}\n", to_string(c.loop),
                     to_string(c.schedule), schedule_description(c.schedule),
                     decoder == nullptr ? ""
                     : std::string_view(decoder) == "eager"
                         ? "; decoder: eager PyTorch's kernels per module"
                         : "; decoder: fused kernels");
  return out;
}

namespace {

// The physical bound (docs/schedules.md "Bounds"): the serial part, then the rest of the step's
// host bytes at the host rate, against the busiest link and the compute.
std::string physical_bound_line(const ArmResult& a) {
  const StepBound& b = a.bound;
  const double host = b.host_gb_per_s > 0 ? b.host_gb_per_s : b.probe_gb_per_s;
  std::string rate = fmt::format("{:.1f} GB/s", host);
  if (b.host_rate_from == "adam_pass" || b.host_rate_from == "step") {  // files before issue 37
    rate += fmt::format(", its fastest {} (probe {:.1f})",
                        b.host_rate_from == "step" ? "step" : "Adam pass", b.probe_gb_per_s);
  } else if (b.host_rate_from == "ranks") {
    rate += ", the ranks' probes";
  } else {
    rate += ", the probe";
  }
  const double rest = std::max(0.0, b.host_bytes - b.serial_host_bytes);
  std::string out = fmt::format(
      "physical bound: {}: {:.4f} s, step/bound {:.2f} = max(serial {:.4f} s + host memory "
      "{:.3f} GB at {} {:.4f} s, busiest link {:.4f} s, compute {:.4f} s)\n",
      to_string(a.arm), b.physical_s, b.physical_ratio, b.serial_s, rest / 1e9, rate,
      host > 0 ? rest / (host * 1e9) : 0.0, b.pcie_s, b.compute_s);
  if (b.beaten) {
    out += fmt::format(
        "physical bound: {}: not known: its fastest step ({:.4f} s) beat it ({:.4f} s), so the "
        "probe's {:.1f} GB/s misread this run's host memory (its fastest Adam pass: {:.1f} "
        "GB/s); the probe is unreliable for this run\n",
        to_string(a.arm), b.fastest_step_s, b.physical_s, host, b.adam_pass_gb_per_s);
  }
  return out;
}

// The lower bound (Adam's bytes at the probe, the busiest link, then the compute added) and
// the physical one; `adam` names whose Adam.
std::string bound_line(const ArmResult& a, const char* adam) {
  const StepBound& b = a.bound;
  if (b.bound_s <= 0) return "";
  std::string out = fmt::format(
      "bound: {}: {:.4f} s, step/bound {:.2f} = max({} {:.4f} s at {:.1f} GB/s, busiest link "
      "{:.4f} s) + compute {:.4f} s\n",
      to_string(a.arm), b.bound_s, b.ratio, adam, b.adam_s, b.probe_gb_per_s, b.pcie_s,
      b.compute_s);
  if (b.physical_s > 0) out += physical_bound_line(a);
  return out;
}

}  // namespace

std::string render_phase_section(const RunResult& run) {
  std::string rows;
  for (const auto& a : run.arms) {
    if (!a.ok) continue;
    const nlohmann::json phases = phases_json(a);
    std::vector<std::string> names;
    // Phase rows in the order a step runs them (zob/phase.hpp); unknown phases (a newer
    // step's) follow by name.
    for (Phase p : kAllPhases) {
      if (phases.contains(to_string(p))) names.emplace_back(to_string(p));
    }
    for (const auto& [n, v] : phases.items()) {
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    }
    for (const auto& n : names) {
      const auto& p = phases.at(n);
      const double dev = json_number(p, "device_s");
      const double host = json_number(p, "host_s");
      const double bytes = json_number(p, "bytes");
      const double gbs = json_number(p, "gb_per_s");
      std::string row = fmt::format("{:<15}{:<14}{:>12}{:>12}{:>12}{:>10}", n, to_string(a.arm),
                                    dev >= 0 ? fmt::format("{:.3f}", dev * 1e3) : "-",
                                    host >= 0 ? fmt::format("{:.3f}", host * 1e3) : "-",
                                    bytes > 0 ? fmt::format("{:.4f}", bytes / 1e9) : "-",
                                    gbs > 0 ? fmt::format("{:.2f}", gbs) : "-");
      if (n == to_string(Phase::adam) || n == to_string(Phase::adam_cast)) {
        const double gp = json_number(p, "gparams_per_s");
        if (gp > 0) row += fmt::format("  {:.3f} Gparam/s", gp);
      }
      rows += row + "\n";
    }
    if (a.ranks.size() < 2) rows += bound_line(a, "Adam");  // N ranks: in the rank section
  }
  if (rows.empty()) return "";
  return fmt::format("{:<15}{:<14}{:>12}{:>12}{:>12}{:>10}\n", "phase", "arm", "device ms",
                     "host ms", "GB", "GB/s") +
         rows;
}

std::string render_rank_section(const RunResult& run) {
  std::string rows;
  for (const auto& a : run.arms) {
    if (!a.ok || a.ranks.size() < 2) continue;
    std::vector<std::string> names;
    for (Phase p : kAllPhases) {
      if (a.ranks[0].phases.count(to_string(p)) != 0) names.emplace_back(to_string(p));
    }
    for (const auto& n : names) {
      // The slowest rank by device time where the phase has one, else by host time.
      const RankResult* worst = nullptr;
      double worst_s = -1;
      for (const RankResult& k : a.ranks) {
        const auto it = k.phases.find(n);
        if (it == k.phases.end()) continue;
        const double t = it->second.device_s >= 0 ? it->second.device_s : it->second.host_s;
        if (t > worst_s) {
          worst_s = t;
          worst = &k;
        }
      }
      if (worst == nullptr) continue;
      const PhaseSample& p = worst->phases.at(n);
      rows += fmt::format(
          "{:<15}{:<14}{:>13}{:>12}{:>12}{:>12}\n", n, to_string(a.arm), worst->rank,
          p.device_s >= 0 ? fmt::format("{:.3f}", p.device_s * 1e3) : "-",
          fmt::format("{:.3f}", p.host_s * 1e3),
          p.bytes > 0 ? fmt::format("{:.4f}", static_cast<double>(p.bytes) / 1e9) : "-");
    }
    rows += bound_line(a, "Adam of all ranks");
  }
  if (rows.empty()) return "";
  return fmt::format("{:<15}{:<14}{:>13}{:>12}{:>12}{:>12}\n", "phase", "arm", "slowest rank",
                     "device ms", "host ms", "GB") +
         rows;
}

std::string render_registration_lines(const RunResult& run) {
  std::string out;
  for (const auto& a : run.arms) {
    if (!a.ok) continue;
    std::string line = fmt::format("registration: {}: {} locked, {} registered", to_string(a.arm),
                                   bytes_text(a.locked_bytes), bytes_text(a.registered_bytes));
    if (a.runtime_pinned_bytes > 0) {
      const BackendInfo* backend = find_backend(a.device);
      line += fmt::format(", {} pinned by the runtime ({})", bytes_text(a.runtime_pinned_bytes),
                          backend != nullptr ? backend->host_alloc : "allocate_host");
    }
    // "verified" and "not registered" are the driver's answers, asked buffer by buffer after
    // the set-up (registered_at_driver), not the registration call's.
    const char* driver = a.registered_bytes > 0
                             ? (a.registration_verified ? ", verified" : ", NOT verified")
                         : a.registered_at_driver == "none" ? ", none registered at the driver"
                                                            : "";
    line += fmt::format(" ({}{})", a.registration.empty() ? "none" : a.registration, driver);
    if (const auto per_gib = register_s_per_gib(a)) {
      line += fmt::format(" in {:.4f} s ({:.3f} s/GiB)", a.register_s, *per_gib);
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace zob
