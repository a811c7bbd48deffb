// The parent: probe, one child per arm in --arms order, validation, reports, exit code.
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <variant>

#include "driver/arm_runs.hpp"
#include "driver/driver.hpp"
#include "driver/dry_run.hpp"
#include "driver/fit_search.hpp"
#include "driver/process.hpp"
#include "driver/test_hooks.hpp"
#include "report/details.hpp"
#include "report/json_util.hpp"
#include "report/publish.hpp"
#include "report/report.hpp"
#include "zob/environment.hpp"
#include "zob/errors.hpp"
#include "zob/exit_codes.hpp"
#include "zob/model.hpp"
#include "zob/preflight.hpp"
#include "zob/step.hpp"

namespace zob {

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

std::string RunProgress::starting(const std::string& label) const {
  std::string line = fmt::format("arm {}: starting (arm run {} of {}", label, done + 1, total);
  if (done > 0) {
    const double each = spent_s / done;
    line += fmt::format("; about {:.1f} s left in the run at the {:.1f} s an arm run has taken",
                        each * (total - done), each);
  }
  return line + ")";
}

ArmResult failed_arm(const RunConfig& c, Arm arm, const DeviceInfo& info, int pid,
                     std::string error) {
  ArmResult r = workload_result(c, arm, info);
  r.ok = false;
  r.error = std::move(error);
  r.pid = pid;
  return r;
}

namespace {

void error_line(const std::string& text) { stderr_line("error: ", text); }

std::vector<std::string> child_args(const char* mode_flag, const std::string& mode_value,
                                    const RunConfig& config) {
  std::vector<std::string> args{mode_flag};
  if (!mode_value.empty()) args.push_back(mode_value);
  args.insert(args.end(), {kConfigFlag, dump_json(nlohmann::json(config)), kResultFdFlag,
                           std::to_string(kChildResultFd)});
  return args;
}

std::string seconds_text(double s) { return fmt::format("{:g} s", s); }

// Turns what a child left behind into an ArmResult; every way of failing gets one line.
ArmResult collect_arm(const RunConfig& c, Arm arm, const DeviceInfo& info, const ChildOutcome& o) {
  const int pid = static_cast<int>(o.pid);
  auto fail = [&](std::string why) { return failed_arm(c, arm, info, pid, std::move(why)); };
  if (o.timed_out) {
    return fail("timed out after " + seconds_text(c.timeout_s) +
                " (--timeout); raise --timeout, or give 0 for no limit");
  }
  if (o.stopped_by != 0 && !(o.exited && o.exit_code == 0)) {
    return fail("interrupted by " + describe_signal(o.stopped_by));
  }
  if (o.term_signal != 0) {
    return fail(
        fmt::format("child process {} killed by signal {}", pid, describe_signal(o.term_signal)));
  }
  if (o.output.empty()) {
    return fail(
        fmt::format("child process {} exited with code {} without a result", pid, o.exit_code));
  }
  ArmResult r;
  try {
    r = nlohmann::json::parse(o.output).get<ArmResult>();
  } catch (const std::exception& e) {
    return fail(fmt::format("child process {} (exit code {}) sent a malformed result: {}", pid,
                            o.exit_code, e.what()));
  }
  if (r.arm != arm) {
    return fail(
        fmt::format("child process {} sent the result of arm {} instead", pid, to_string(r.arm)));
  }
  r.pid = pid;
  if (r.ok && o.exit_code != 0) {
    r.ok = false;
    r.error = fmt::format("child process {} exited with code {} after reporting success", pid,
                          o.exit_code);
  }
  if (!r.ok) {
    // Keep the child's own reason; fill the workload fields it may not have reached.
    ArmResult f =
        fail(r.error.empty() ? fmt::format("child process {} exited with code {}", pid, o.exit_code)
                             : r.error);
    f.gpus = r.gpus;  // --gpus: which rank failed how
    f.failed_step = r.failed_step;
    f.failed_phase = r.failed_phase;
    f.ranks = std::move(r.ranks);
    return f;
  }
  return r;
}

std::vector<std::vector<ArmResult>> run_rounds(const RunConfig& resolved, const DeviceInfo& info,
                                               int& stopped_by, RunProgress& progress);

int exit_code_for_signal(int sig) {
  if (sig == SIGHUP) return exit_code::hung_up;
  return sig == SIGTERM ? exit_code::terminated : exit_code::interrupted;
}

}  // namespace

// Own table rather than glibc's sigabbrev_np (2.32+): the binary also runs on older hosts.
std::string signal_name(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGSYS: return "SIGSYS";
    default: return fmt::format("signal {}", sig);
  }
}

std::string describe_signal(int sig) {
  std::string name = signal_name(sig);
  if (const char* desc = strsignal(sig)) name += fmt::format(" ({})", desc);
  return name;
}

namespace {

// 1. Probe: resolve --device in a child, so the parent never loads a device runtime. Returns
// the child's answer, or the exit code of a run that ends here.
std::variant<nlohmann::json, int> probe_device(const RunConfig& config) {
  const ChildOutcome probe =
      run_child(child_args(kProbeFlag, "", config), probe_timeout_s(config.timeout_s));
  if (probe.stopped_by != 0) {
    error_line("interrupted by " + describe_signal(probe.stopped_by) +
               " while probing the "
               "device; nothing ran");
    return exit_code_for_signal(probe.stopped_by);
  }
  const std::string requested = to_string(config.device);
  nlohmann::json answer;
  std::string problem;
  if (probe.timed_out) {
    problem = "the device probe timed out after " + seconds_text(probe_timeout_s(config.timeout_s));
  } else if (probe.term_signal != 0) {
    problem = "the device probe was killed by " + describe_signal(probe.term_signal);
  } else {
    try {
      answer = nlohmann::json::parse(probe.output);
      if (!answer.at("ok").get<bool>()) problem = answer.at("error").get<std::string>();
    } catch (const std::exception& e) {
      problem = fmt::format("the device probe (exit code {}) sent no valid answer: {}",
                            probe.exit_code, e.what());
    }
  }
  if (problem.empty()) return answer;
  const std::string prefix = requested + ": ";  // plugins may already name themselves
  if (problem.rfind(prefix, 0) == 0) problem.erase(0, prefix.size());
  // The CPU device is always built: its probe failing is no reason to suggest it.
  error_line(fmt::format("backend {} unavailable: {}; {}", requested, problem,
                         config.device == DeviceKind::cpu
                             ? "check the machine's load and memory and run again"
                             : "run with --device cpu, or on a machine with that accelerator"));
  return exit_code::backend_unavailable;
}

// The config for the device the probe found: its backend, --gpus all resolved (and checked
// again with the real count). 0, or the exit code of a --gpus N the device cannot serve.
int resolve_devices(const RunConfig& config, const nlohmann::json& answer, const DeviceInfo& info,
                    RunConfig& resolved, RunResult& run) {
  resolved = config;
  resolved.device = parse_device_kind(info.backend);
  run.config.device = resolved.device;
  apply_device_round_defaults(resolved);  // what the report says, and what runs
  apply_device_round_defaults(run.config);
  if (resolved.gpus == 0) run.config.gpus = resolved.gpus = answer.value("device_count", 1);
  if (config.gpus == 0) {  // --gpus all: the checks and the default --threads for the real count
    resolve_default_threads(resolved);
    validate_run_config(resolved);
    run.config.threads = resolved.threads;
  }
  if (resolved.gpus <= 1) return 0;
  // See README "Several devices per arm".
  const int visible = answer.value("device_count", 1);
  const bool share = test_hooks::ranks_share_device();
  if (info.backend != to_string(DeviceKind::cpu) && resolved.gpus > visible && !share) {
    error_line(
        fmt::format("--gpus {} asks for {} {} devices from index {}, but {} {} there; "
                    "use --gpus {} (or --gpus all)",
                    resolved.gpus, resolved.gpus, info.backend, config.device_index, visible,
                    visible == 1 ? "is" : "are", visible));
    return exit_code::usage;
  }
  if (answer.contains("collectives_error")) {
    const bool missing = answer.value("collectives_unavailable", false);
    error_line(fmt::format("--gpus {} on {}: {}", resolved.gpus, info.backend,
                           answer.at("collectives_error").get<std::string>()));
    return missing ? exit_code::backend_unavailable : exit_code::usage;
  }
  return 0;
}

// 2. Per configuration of the sweep (one without --chunk-elems / --sub-group-size lists): one
// child per arm, in --arms order; with --repeats R, R such rounds (A B A B ...), so slow
// drifts of the machine hit every arm alike.
void run_sweep(const RunConfig& resolved, const DeviceInfo& info, RunResult& run, int& stopped_by) {
  const std::vector<RunConfig> points = sweep_points(resolved);
  RunProgress progress;
  progress.total =
      static_cast<int>(points.size() * resolved.arms.size()) * std::max(resolved.repeats, 1);
  for (const RunConfig& point : points) {
    const SweepPoint label{point.chunk_elems, point.sub_group_size, {}, point.offload_ratio};
    if (points.size() > 1) {
      std::fprintf(stderr, "zero3-offload-bench: %s\n", label.label(ratio_shown(resolved)).c_str());
    }
    RunResult part;
    part.rounds = run_rounds(point, info, stopped_by, progress);
    for (Arm arm : resolved.arms) part.arms.push_back(combine_rounds(runs_of(part, arm)));
    if (run.sweep.empty()) {  // the top level reports the first configuration
      run.rounds = part.rounds;
      run.arms = part.arms;
    }
    run.sweep.push_back(
        {point.chunk_elems, point.sub_group_size, std::move(part.arms), point.offload_ratio});
  }
  if (run.sweep.size() == 1) run.sweep.clear();  // no sweep: the report is the plain one
  if (stopped_by != 0) run.interrupted = signal_name(stopped_by);
}

}  // namespace

// 3. Reports (both launchers), then the exit code.
int report_run(const RunResult& run, int stopped_by) {
  const bool written = publish_run(run);
  if (stopped_by != 0) return exit_code_for_signal(stopped_by);
  bool failed = !written;
  for (const auto& a : run.arms) failed = failed || !a.ok;
  for (const auto& p : run.sweep) {
    for (const auto& a : p.arms) failed = failed || !a.ok;
  }
  const Validation v = validate_arms(run);
  if (!v.ok()) {
    error_line(v.losses_equal && v.checksums_equal
                   ? "the rounds disagree: " + v.first_difference +
                         "; a fresh process must compute the same numbers (report this as a bug)"
                   : "the arms disagree: " + v.first_difference +
                         "; the kind of host memory must not change the numbers (report this "
                         "as a bug)");
  }
  return failed || !v.ok() ? exit_code::arm_failed : exit_code::ok;
}

namespace {

// Every configuration of the sweep, before any arm runs: the plan changes with the ratio (and
// the chunk), so the first one fitting says nothing of the others.
void preflight_points(const RunConfig& config, const HostEnvironment& host,
                      DeviceMemory device_memory) {
  const std::vector<RunConfig> points = sweep_points(config);
  for (const RunConfig& point : points) {
    try {
      preflight_check(point, plan_memory(point), host, device_memory);
    } catch (const UsageError& e) {
      if (points.size() == 1) throw;
      const SweepPoint label{point.chunk_elems, point.sub_group_size, {}, point.offload_ratio};
      throw UsageError(fmt::format("{} (at {}; --dry-run lists what each configuration needs)",
                                   e.what(), label.label(ratio_shown(config))));
    }
  }
}

}  // namespace

int run_driver(const RunConfig& config) {
  install_driver_signal_handlers();
  RunResult run;
  run.config = config;
  run.started_utc = now_utc();
  run.tool_version = ZOB_VERSION;
  run.hostname = host_name();
  run.host = collect_host_environment();
  // Pre-flight, host part first (device memory unknown yet): a model the host cannot hold is
  // refused before even the probe runs; the device part follows the probe.
  // --fit plans each candidate itself and skips what does not fit.
  if (!config.skip_preflight && !config.dry_run && !config.fit) {
    preflight_points(config, run.host, 0);
  }

  const auto probed = probe_device(config);
  if (const int* code = std::get_if<int>(&probed)) return *code;
  const nlohmann::json& answer = std::get<nlohmann::json>(probed);
  const DeviceInfo info = answer.at("device_info").get<DeviceInfo>();
  RunConfig resolved;
  if (const int code = resolve_devices(config, answer, info, resolved, run)) return code;
  run.device_info = info;
  run.has_environment = true;
  // What the probe found free (its own context made, as an arm's will be): a device another
  // process shares holds less than its total. One device's figure; with --gpus N each rank's
  // device may differ, so the ranks' launcher checks its own (mpi_launcher.cpp).
  const std::uint64_t free_bytes =
      resolved.gpus <= 1 ? answer.value("device_free_bytes", std::uint64_t{0}) : 0;
  // --fit --dry-run: the CLI put the search's ratios in the sweep, so each is planned.
  if (config.dry_run) return run_dry_run(resolved, run.host, info, free_bytes);
  if (config.fit) return run_fit(resolved, info, free_bytes, run);
  // Before any arm: refuse (exit 2) what the device cannot hold, rather than failing an arm
  // half-way with memory locked.
  if (!config.skip_preflight) {
    preflight_points(resolved, run.host,
                     DeviceMemory{info.total_memory_bytes, free_bytes, info.memory_is_host_ram});
  }
  std::fprintf(stderr, "zero3-offload-bench: device %s (%s); arms:", info.backend.c_str(),
               one_line(info.name).c_str());
  for (Arm a : config.arms) std::fprintf(stderr, " %s", to_string(a));
  std::fprintf(stderr, "\n");

  int stopped_by = 0;
  run_sweep(resolved, info, run, stopped_by);
  return report_run(run, stopped_by);
}

namespace {

// The rounds of one configuration. Once a stop signal has been seen (stopped_by != 0), the
// remaining arms of the round are reported as not run, and no further round starts.
std::vector<std::vector<ArmResult>> run_rounds(const RunConfig& resolved, const DeviceInfo& info,
                                               int& stopped_by, RunProgress& progress) {
  std::vector<std::vector<ArmResult>> out;
  const int rounds = std::max(resolved.repeats, 1);
  for (int k = 0; k < rounds && stopped_by == 0; ++k) {
    std::vector<ArmResult> results;
    for (Arm arm : resolved.arms) {
      const std::string label = rounds > 1
                                    ? fmt::format("{} (round {}/{})", to_string(arm), k + 1, rounds)
                                    : std::string(to_string(arm));
      if (stopped_by != 0) {
        results.push_back(failed_arm(resolved, arm, info, 0,
                                     "not run: interrupted by " + describe_signal(stopped_by)));
        continue;
      }
      results.push_back(run_arm_once(resolved, arm, info, label, progress, stopped_by));
    }
    out.push_back(std::move(results));
  }
  return out;
}

}  // namespace

ArmResult run_arm_once(const RunConfig& config, Arm arm, const DeviceInfo& info,
                       const std::string& label, RunProgress& progress, int& stopped_by) {
  std::fprintf(stderr, "zero3-offload-bench: %s\n", progress.starting(label).c_str());
  ChildOutcome o;
  const auto started = std::chrono::steady_clock::now();
  try {
    o = run_child(child_args(kChildFlag, to_string(arm), config), config.timeout_s);
  } catch (const std::exception& e) {
    return failed_arm(config, arm, info, 0, std::string("could not start the child: ") + e.what());
  }
  ++progress.done;
  progress.spent_s +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ArmResult r = collect_arm(config, arm, info, o);
  if (!r.ok) error_line(fmt::format("arm {}: {}", label, r.error));
  if (o.stopped_by != 0) stopped_by = o.stopped_by;
  else if (stop_signal() != 0) stopped_by = stop_signal();
  return r;
}

}  // namespace zob
