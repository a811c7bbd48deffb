#include "driver/ranks.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "collectives/shm_collectives.hpp"
#include "driver/driver.hpp"
#include "driver/process.hpp"
#include "driver/rank_body.hpp"
#include "driver/test_hooks.hpp"
#include "report/json_util.hpp"
#include "zob/device.hpp"
#include "zob/errors.hpp"
#include "zob/stats.hpp"
#include "zob/step.hpp"

namespace zob {

namespace {

// A failed rank's peers wake at once through the abort flag; this is only how long the
// launcher waits for them to write their reason before it SIGKILLs them.
constexpr double kPeerGraceS = 2.0;
// Data slot per rank in the shared segment: collectives move larger buffers in pieces.
constexpr std::size_t kSlotBytes = std::size_t{4} << 20;

// This process's result for `arm` on fd (its parent's pipe), as one JSON document.
void send_result(int fd, Arm arm, ArmResult& r) { write_all(fd, result_document(r, arm)); }

// The arm's other users of the device from a rank's two answers: the larger count less the
// `siblings` (ranks of this arm on the same device, which NVML lists too); unknown stays -1.
void note_occupancy(ArmResult& r, const Device::Occupancy& start, const Device::Occupancy& end,
                    int siblings) {
  const int seen = std::max(start.other_processes, end.other_processes);
  r.device_other_processes = seen < 0 ? -1 : std::max(0, seen - siblings);
  r.device_free_bytes = start.free_bytes;
}

// The body of a rank process; never returns.
[[noreturn]] void rank_main(const RunConfig& config, Arm arm, int rank, ShmRegion& region,
                            int write_fd) {
  ArmResult r;
  int code = 0;
  try {
    ShmCollectives shm(region, rank, collective_timeout_s(config));
    const std::unique_ptr<Collectives> faulty = test_hooks::rank_fault_collectives(shm, arm, rank);
    Collectives& comm = faulty ? *faulty : static_cast<Collectives&>(shm);
    const bool share = test_hooks::ranks_share_device();
    std::unique_ptr<Device> device;
    try {
      device = test_hooks::fault_device(
          create_device({to_string(config.device), rank_device_index(config, rank, share)}), arm);
    } catch (const std::exception& e) {
      comm.abort(fmt::format("rank {} could not open its device: {}", rank, one_line(e.what())));
      throw;
    }
    // Who else is on the device (a second run, a training job), as a one-rank arm asks: while
    // every rank of the arm holds its device open (between two barriers of the launcher's own
    // collectives, which the test's rank fault does not count), less the ranks sharing it.
    shm.barrier();
    const Device::Occupancy start = device->occupancy();
    r = run_rank_body(config, arm, *device, comm, share);
    const Device::Occupancy end = device->occupancy();
    shm.barrier();
    note_occupancy(r, start, end, share ? config.gpus - 1 : 0);
  } catch (const CollectiveError& e) {
    set_arm_failure(r, e);  // a peer failed; this rank says where it was waiting
    code = 1;
  } catch (const std::exception& e) {
    set_arm_failure(r, e);
    region.abort(rank, fmt::format("rank {} failed: {}", rank, r.error));
    code = 1;
  }
  send_result(write_fd, arm, r);
  std::fflush(stderr);
  std::fflush(stdout);
  ::_exit(code);
}

std::string describe_outcome(const RankOutcome& o) {
  if (o.killed_by_launcher) return "was stopped by the launcher after a peer failed";
  if (o.term_signal != 0) return "killed by signal " + describe_signal(o.term_signal);
  return fmt::format("exited with code {} without a result", o.exit_code);
}

std::string rank_label(const RunConfig& c, const RankOutcome& o) {
  return fmt::format("rank {} of {} (pid {}, device {}:{})", o.rank, c.gpus, o.pid,
                     to_string(c.device), o.device_index);
}

}  // namespace

std::string combine_checksums(const std::vector<std::string>& shard_checksums) {
  if (shard_checksums.size() == 1) return shard_checksums[0];
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over "c0|c1|..."
  for (std::size_t i = 0; i < shard_checksums.size(); ++i) {
    const std::string part = (i == 0 ? "" : "|") + shard_checksums[i];
    for (unsigned char ch : part) {
      h ^= ch;
      h *= 1099511628211ull;
    }
  }
  return fmt::format("{:016x}", h);
}

namespace {

// Each phase's mean over the timed steps of one rank (device time -1 when any step had none).
std::map<std::string, PhaseSample> mean_phases(const ArmResult& a) {
  std::map<std::string, PhaseSample> out;
  int n = 0;
  for (std::size_t s = static_cast<std::size_t>(std::max(a.warmup, 0)); s < a.samples.size();
       ++s, ++n) {
    for (const auto& [name, p] : a.samples[s].phases) {
      PhaseSample& acc = out[name];
      if (n == 0) acc.device_s = 0;
      acc.device_s = (p.device_s < 0 || acc.device_s < 0) ? -1 : acc.device_s + p.device_s;
      acc.host_s += p.host_s;
      acc.bytes += p.bytes;
      acc.params += p.params;
    }
  }
  if (n == 0) return out;
  for (auto& [name, p] : out) {
    if (p.device_s >= 0) p.device_s /= n;
    p.host_s /= n;
    p.bytes /= static_cast<std::uint64_t>(n);
    p.params /= n;
  }
  return out;
}

// A rank killed outright says nothing of where it was: its peers say where they were when
// they learned of it (waiting for it in a collective, mostly), the first of them that can.
void add_peer_wait(const RunConfig& config, const std::vector<ArmResult>& results, ArmResult* m) {
  for (std::size_t i = 0; i < results.size(); ++i) {
    const std::optional<Phase> phase = parse_phase(results[i].failed_phase);
    if (results[i].failed_step <= 0 || !phase) continue;
    const int steps = config.warmup + config.steps;
    const StepFailurePoint at{results[i].failed_step, steps, results[i].failed_step > config.warmup,
                              *phase};
    m->error += fmt::format("; rank {} was then in {}", i, describe(at));
    m->failed_step = at.step;
    m->failed_phase = to_string(at.phase);
    return;
  }
}

// One rank's entry of `ranks`; *result receives its parsed ArmResult (left empty when none).
RankResult summarize_rank(const RankOutcome& o, std::int64_t shard_elems, ArmResult* result) {
  RankResult k;
  k.rank = o.rank;
  k.device_index = o.device_index;
  k.pid = static_cast<int>(o.pid);
  k.shard_elems = shard_elems;
  bool parsed = false;
  if (!o.output.empty()) {
    try {
      *result = nlohmann::json::parse(o.output).get<ArmResult>();
      parsed = true;
    } catch (const std::exception& e) {
      k.error = fmt::format("sent a malformed result: {}", one_line(e.what()));
    }
  }
  if (!parsed) {
    if (k.error.empty()) k.error = describe_outcome(o);
    return k;
  }
  const ArmResult& a = *result;
  k.ok = a.ok && o.exited && o.exit_code == 0;
  k.error = a.ok ? (k.ok ? "" : describe_outcome(o)) : a.error;
  for (const auto& s : a.samples) k.step_s.push_back(s.wall_s);
  k.phases = mean_phases(a);
  k.shard_checksum = a.param_checksum;
  k.placement = a.placement;
  return k;
}

// The bound of N ranks (docs/multi-gpu.md): the host's memory is shared by every rank's Adam,
// each rank has its own link, and no rank's compute hides. The ranks probe their memory at
// once (after a barrier), so the host's bandwidth is the sum of their probes; Adam of every
// rank's shard at that bandwidth, the busiest link in either direction, the slowest rank's
// compute: bound = max(adam_s, pcie_s) + compute_s, ratio = the group's median step / bound.
// The physical bound the same with every rank's host bytes (summed) in place of Adam's.
StepBound group_bound(const std::vector<ArmResult>& results, const ArmResult& merged,
                      std::int64_t group_params) {
  StepBound b;
  b.probe_passes = results.empty() ? 0 : results.front().bound.probe_passes;
  for (const ArmResult& r : results) {
    b.probe_gb_per_s += r.bound.probe_gb_per_s;
    b.probe_passes = std::min(b.probe_passes, r.bound.probe_passes);
    b.adam_measured_s = std::max(b.adam_measured_s, r.bound.adam_measured_s);
    b.d2h_s = std::max(b.d2h_s, r.bound.d2h_s);
    b.h2d_s = std::max(b.h2d_s, r.bound.h2d_s);
    b.compute_s = std::max(b.compute_s, r.bound.compute_s);
    b.host_bytes += r.bound.host_bytes;  // one host memory for every rank's passes and copies
    // The ranks' serial parts run at once: the longest holds the host memory's work back.
    b.serial_host_bytes += r.bound.serial_host_bytes;
    b.serial_s = std::max(b.serial_s, r.bound.serial_s);
    // The ranks' probes run at once, as their Adam passes do: their rates add up.
    b.host_gb_per_s += r.bound.probe_gb_per_s;
    b.adam_pass_gb_per_s += r.bound.adam_pass_gb_per_s;
  }
  b.adam_s = b.probe_gb_per_s > 0
                 ? 28.0 * static_cast<double>(group_params) / (b.probe_gb_per_s * 1e9)
                 : 0;
  b.pcie_s = std::max(b.d2h_s, b.h2d_s);
  b.bound_s = std::max(b.adam_s, b.pcie_s) + b.compute_s;
  std::vector<double> wall;
  for (std::size_t s = static_cast<std::size_t>(std::max(merged.warmup, 0));
       s < merged.samples.size(); ++s) {
    wall.push_back(merged.samples[s].wall_s);
  }
  b.ratio = b.bound_s > 0 ? median(wall) / b.bound_s : 0;
  b.host_rate_from = "ranks";  // the sum of each rank's rate
  b.finish_physical(median(wall), wall.empty() ? 0 : *std::min_element(wall.begin(), wall.end()));
  return b;
}

// Every rank completed: rank 0's result with the group's step times (the slowest rank's
// each step), memory, set-up and checksum.
ArmResult merge_completed(const RunConfig& config, const std::vector<ArmResult>& results) {
  ArmResult m = results[0];
  std::vector<std::string> sums;
  for (std::size_t i = 0; i < results.size(); ++i) {
    sums.push_back(results[i].param_checksum);
    m.gpu_peak_gb = std::max(m.gpu_peak_gb, results[i].gpu_peak_gb);
    m.gpu_reserved_peak_gb = std::max(m.gpu_reserved_peak_gb, results[i].gpu_reserved_peak_gb);
    // Another process on any rank's device shares the arm's time; the free memory is rank 0's
    // device's, compared with rank 0's in the other arms.
    m.device_other_processes =
        std::max(m.device_other_processes, results[i].device_other_processes);
    if (i > 0) {
      m.locked_bytes += results[i].locked_bytes;
      m.registered_bytes += results[i].registered_bytes;
      m.register_s = std::max(m.register_s, results[i].register_s);
      m.setup_s = std::max(m.setup_s, results[i].setup_s);
    }
  }
  double total = 0, best = 0;
  for (std::size_t s = 0; s < m.samples.size(); ++s) {
    for (const ArmResult& a : results) {
      if (s < a.samples.size())
        m.samples[s].wall_s = std::max(m.samples[s].wall_s, a.samples[s].wall_s);
    }
    if (static_cast<int>(s) >= m.warmup) {
      total += m.samples[s].wall_s;
      best = static_cast<int>(s) == m.warmup ? m.samples[s].wall_s
                                             : std::min(best, m.samples[s].wall_s);
    }
  }
  if (m.steps > 0) {
    m.step_avg_s = total / m.steps;
    m.step_min_s = best;
  }
  m.param_checksum = combine_checksums(sums);
  const int ranks = static_cast<int>(results.size());
  m.bound = group_bound(results, m, rank_shard_elems(config.model, ranks) * ranks);
  m.tokens_per_step = config.tokens_per_step();
  m.ok = true;
  return m;
}

}  // namespace

ArmResult merge_rank_results(const RunConfig& config, Arm arm,
                             const std::vector<RankOutcome>& ranks, int culprit,
                             const std::string& abort_reason) {
  const std::int64_t shard_elems = rank_shard_elems(config.model, static_cast<int>(ranks.size()));
  std::vector<ArmResult> results(ranks.size());
  std::vector<RankResult> summary;
  int first_failed = -1;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    summary.push_back(summarize_rank(ranks[i], shard_elems, &results[i]));
    if (!summary.back().ok && first_failed < 0) first_failed = static_cast<int>(i);
  }
  ArmResult m;
  if (first_failed < 0) {
    m = merge_completed(config, results);
  } else {
    // The rank at fault: one killed by a signal the launcher did not send (the root cause: its
    // peers' collective errors follow from it, and on the H200 NCCL's "remote process exited"
    // in rank 0 raised the abort flag before rank 1's SIGKILL was reaped), else the one the
    // abort flag names, else the first one that failed.
    std::size_t at = static_cast<std::size_t>(first_failed);
    if (culprit >= 0 && static_cast<std::size_t>(culprit) < ranks.size())
      at = static_cast<std::size_t>(culprit);
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i].term_signal != 0 && !ranks[i].killed_by_launcher) {
        at = i;
        break;
      }
    }
    // A culprit the launcher had to kill (it hung) is described by the abort reason: "rank 1
    // did not reach barrier 9 of the collectives within 10 s".
    std::string why = summary[at].error;
    if (why.empty() || (ranks[at].killed_by_launcher && !abort_reason.empty())) why = abort_reason;
    m.ok = false;
    m.error = fmt::format("{} failed: {}", rank_label(config, ranks[at]), why);
    m.failed_step = results[at].failed_step;  // 0 when the rank sent no result
    m.failed_phase = results[at].failed_phase;
    if (m.failed_step == 0) add_peer_wait(config, results, &m);
  }
  m.arm = arm;
  m.gpus = static_cast<int>(ranks.size());
  m.ranks = std::move(summary);
  return m;
}

namespace {

// The ranks of one arm as the launcher sees them: forked, their result pipes read, reaped.
// The first failure raises the abort flag (if the rank did not itself) and starts the peers'
// grace period, after which the ones still running are killed.
class RankGroup {
 public:
  RankGroup(const RunConfig& config, Arm arm, ShmRegion& region)
      : config_(config),
        arm_(arm),
        region_(region),
        n_(static_cast<std::size_t>(config.gpus)),
        outcomes_(n_),
        read_fds_(n_, -1),
        reaped_(n_, false) {}

  // Forks every rank; on a failure kills the ones already started and throws.
  void start() {
    const pid_t launcher = ::getpid();
    std::fflush(stderr);
    std::fflush(stdout);
    for (std::size_t r = 0; r < n_; ++r) {
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0) {
        region_.abort(-1, "the launcher could not create a pipe");
        throw DeviceError(DeviceErrorKind::runtime,
                          fmt::format("pipe2 for rank {}: {}", r, std::strerror(errno)));
      }
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != launcher) ::_exit(127);
        for (std::size_t k = 0; k < r; ++k) ::close(read_fds_[k]);
        ::close(fds[0]);
        rank_main(config_, arm_, static_cast<int>(r), region_, fds[1]);
      }
      const int fork_errno = errno;
      ::close(fds[1]);
      if (pid < 0) {
        ::close(fds[0]);
        stop_started(r);
        throw DeviceError(DeviceErrorKind::runtime, fmt::format("fork of rank {} of {}: {}", r, n_,
                                                                std::strerror(fork_errno)));
      }
      ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
      read_fds_[r] = fds[0];
      RankOutcome& o = outcomes_[r];
      o.rank = static_cast<int>(r);
      o.device_index = rank_device_index(config_, o.rank, test_hooks::ranks_share_device());
      o.pid = pid;
    }
  }

  // Until every rank is reaped: read the pipes, reap the ranks that end, abort and kill.
  void watch() {
    std::size_t alive = n_;
    while (alive > 0) {
      std::vector<pollfd> pfds;
      for (int fd : read_fds_) {
        if (fd >= 0) pfds.push_back({fd, POLLIN, 0});
      }
      ::poll(pfds.data(), static_cast<nfds_t>(pfds.size()), 50);
      for (std::size_t r = 0; r < n_; ++r) {
        drain(r);
        if (reaped_[r] || read_fds_[r] >= 0) continue;  // reap only after its pipe is drained
        if (reap(r)) --alive;
      }
      if (failure_ && !killed_ && Clock::now() >= grace_end_) kill_unreaped();
    }
  }

  const std::vector<RankOutcome>& outcomes() const { return outcomes_; }

 private:
  // Reads what rank r's pipe holds; closes it at its end.
  void drain(std::size_t r) {
    if (read_fds_[r] < 0 || read_available(read_fds_[r], outcomes_[r].output)) return;
    ::close(read_fds_[r]);
    read_fds_[r] = -1;
  }

  // True when rank r has ended (and is reaped now); its failure starts the grace period.
  bool reap(std::size_t r) {
    RankOutcome& o = outcomes_[r];
    int status = 0;
    if (::waitpid(o.pid, &status, killed_ ? 0 : WNOHANG) != o.pid) return false;
    reaped_[r] = true;
    if (WIFEXITED(status)) {
      o.exited = true;
      o.exit_code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      o.term_signal = WTERMSIG(status);
    }
    if (!(o.exited && o.exit_code == 0) && !failure_) {
      failure_ = true;
      grace_end_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(kPeerGraceS));
      region_.abort(o.rank, fmt::format("{} {}", rank_label(config_, o), describe_outcome(o)));
    }
    return true;
  }

  void kill_unreaped() {
    for (std::size_t r = 0; r < n_; ++r) {
      if (reaped_[r]) continue;
      ::kill(outcomes_[r].pid, SIGKILL);
      outcomes_[r].killed_by_launcher = true;
    }
    killed_ = true;
  }

  // A fork failed: the ranks before `started` are told, killed and reaped.
  void stop_started(std::size_t started) {
    region_.abort(-1, "the launcher could not start every rank");
    for (std::size_t k = 0; k < started; ++k) {
      ::kill(outcomes_[k].pid, SIGKILL);
      ::waitpid(outcomes_[k].pid, nullptr, 0);
      ::close(read_fds_[k]);
    }
  }

  const RunConfig& config_;
  Arm arm_;
  ShmRegion& region_;
  std::size_t n_;
  std::vector<RankOutcome> outcomes_;
  std::vector<int> read_fds_;
  std::vector<bool> reaped_;
  bool failure_ = false;
  bool killed_ = false;
  Clock::time_point grace_end_{};
};

}  // namespace

int run_ranked_arm_child(const RunConfig& config, Arm arm, int result_fd) {
  ArmResult merged;
  int code = 0;
  try {
    validate_run_config(config);
    ShmRegion region = ShmRegion::create(config.gpus, kSlotBytes, to_string(arm));
    RankGroup group(config, arm, region);
    group.start();
    group.watch();
    merged = merge_rank_results(config, arm, group.outcomes(), region.culprit(), region.reason());
    code = merged.ok ? 0 : 1;
  } catch (const std::exception& e) {
    merged.ok = false;
    merged.error = one_line(e.what());
    code = 1;
  }
  send_result(result_fd, arm, merged);
  return code;
}

}  // namespace zob
