// The parent and the children. The parent never initialises a device runtime: a probe child
// resolves --device, then each arm runs in a fresh child process (fork + exec of this
// executable), so no device state, registration or JIT cache leaks from one arm to the next,
// and a crash or hang of one arm cannot take the others with it.
#pragma once
#include <algorithm>
#include <string>

#include "zob/config.hpp"
#include "zob/result.hpp"

namespace zob {

// The whole run: probe, arms, validation, reports. Returns the process exit code.
int run_driver(const RunConfig& config);
// --list-devices: a probe child per backend (cpu, cuda, xpu at config.device_index); prints
// one line each, what is available or why not. Returns 0.
int run_list_devices(const RunConfig& config);

// What the --launcher mpi entry (mpi_launcher.hpp, built only with MPI) is handed: the run,
// and which flags were given (it takes --gpus from the MPI world size, and sizes --threads
// for the world unless given).
struct MpiRequest {
  RunConfig run;
  bool gpus_given = false;
  bool threads_given = false;
};

// The end of a run, whichever launcher ran its arms: every report (publish_run,
// report/publish.hpp), then the exit code: the signal's when one stopped the run (stopped_by != 0),
// arm_failed when an arm failed, a file could not be written or the arms disagree (said on stderr),
// else 0.
int report_run(const RunResult& run, int stopped_by);

// Hidden entry points (argv built by the parent; see process.cpp). Each writes one JSON
// document to result_fd and returns the exit code.
int run_probe_child(const RunConfig& config, int result_fd);
int run_arm_child(const RunConfig& config, Arm arm, int result_fd);

// A failed arm's (or rank's) reason, one line, into r.error: the error's kind, where in the
// steps it happened when a step threw (r.failed_step / r.failed_phase too), the runtime's own
// text, and for a fault in the middle of the steps what to do about it.
void set_arm_failure(ArmResult& r, const std::exception& e);

// The flags the parent passes to its children.
inline constexpr const char* kProbeFlag = "--internal-probe";
inline constexpr const char* kChildFlag = "--internal-child";
inline constexpr const char* kConfigFlag = "--internal-config";
inline constexpr const char* kResultFdFlag = "--internal-result-fd";
inline constexpr int kChildResultFd = 3;
// The device probe's own time limit: a first CUDA / Level Zero init can take a while.
// --timeout limits each arm; the probe waits for the larger of the two (none without either).
inline constexpr double kProbeTimeoutS = 120;
inline double probe_timeout_s(double arm_timeout_s) {
  return arm_timeout_s > 0 ? std::max(arm_timeout_s, kProbeTimeoutS) : 0;
}

// The run's start for reports ("2026-11-29T14:15:54Z") and this host's name ("" unknown).
std::string now_utc();
std::string host_name();

// "SIGSEGV"; and with the description: "SIGSEGV (Segmentation fault)"
std::string signal_name(int sig);
std::string describe_signal(int sig);

}  // namespace zob
