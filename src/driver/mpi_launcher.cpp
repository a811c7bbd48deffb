// --launcher mpi (see mpi_launcher.hpp). mpirun starts this executable once per rank; nothing
// forks. The ranks agree on every refusal before the arm starts (each reports its status, the
// lowest failing rank prints its one line, every rank exits with the worst code), so a bad
// flag or a missing device ends the job cleanly. Once the arm runs, MPI cannot cancel a
// collective a failed peer never joins: a failure then ends the job through MPI_Abort
// (MpiCollectives::abort), with the reason on stderr.
#include "driver/mpi_launcher.hpp"

#include <mpi.h>
#include <unistd.h>

#include <fmt/format.h>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "collectives/mpi_collectives.hpp"
#include "driver/driver.hpp"
#include "driver/process.hpp"
#include "driver/rank_body.hpp"
#include "driver/ranks.hpp"
#include "driver/test_hooks.hpp"
#include "report/details.hpp"
#include "report/json_util.hpp"
#include "zob/backends.hpp"
#include "zob/clock.hpp"
#include "zob/device.hpp"
#include "zob/environment.hpp"
#include "zob/errors.hpp"
#include "zob/exit_codes.hpp"
#include "zob/preflight.hpp"
#include "zob/step.hpp"

namespace zob {

namespace {

// Before MPI_Init the rank is only known from the launcher's environment; a process started
// without mpirun is rank 0 of 1.
bool launched_as_rank_zero() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (const char* v = std::getenv(var)) return std::string(v) == "0";
  }
  return true;
}

struct Status {
  int code = exit_code::ok;
  std::string line;  // without the "zero3-offload-bench: error: " prefix
};

Status status_of(const std::exception& e, const std::string& prefix) {
  if (const auto* u = dynamic_cast<const UsageError*>(&e)) {
    return {exit_code::usage, prefix + u->what()};
  }
  if (const auto* d = dynamic_cast<const DeviceError*>(&e)) {
    if (d->kind() == DeviceErrorKind::unavailable) {
      return {exit_code::backend_unavailable, prefix + "backend unavailable: " + d->what() +
                                                  "; run with --device cpu, or on "
                                                  "machines with that accelerator"};
    }
    return {exit_code::arm_failed, prefix + d->what()};
  }
  return {exit_code::arm_failed, prefix + e.what()};
}

// A collective over every rank: the worst status code wins; the lowest failing rank prints
// its line. Returns the agreed code (0 when every rank is fine).
int agree(const Status& mine, int rank) {
  int worst = 0;
  MPI_Allreduce(&mine.code, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (worst == 0) return 0;
  const int candidate = mine.code != 0 ? rank : INT_MAX;
  int first = INT_MAX;
  MPI_Allreduce(&candidate, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == first) stderr_line("error: ", mine.line);
  return worst;
}

struct Place {
  int rank = 0, size = 1, local_rank = 0, local_size = 1, hosts = 1;
};

Place place_in_world() {
  Place p;
  MPI_Comm_rank(MPI_COMM_WORLD, &p.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p.size);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, p.rank, MPI_INFO_NULL, &local);
  MPI_Comm_rank(local, &p.local_rank);
  MPI_Comm_size(local, &p.local_size);
  MPI_Comm_free(&local);
  const int first_on_host = p.local_rank == 0 ? 1 : 0;
  MPI_Allreduce(&first_on_host, &p.hosts, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  return p;
}

// The ranks' ArmResult JSON, their device indices and pids, at rank 0 (empty elsewhere).
std::vector<RankOutcome> gather_outcomes(const std::string& mine, int device_index,
                                         const Place& p) {
  if (mine.size() > static_cast<std::size_t>(INT_MAX)) {
    throw UsageError(
        fmt::format("rank {}: its result is {} bytes, more than one MPI message "
                    "holds; use fewer --steps",
                    p.rank, mine.size()));
  }
  const long long meta[3] = {static_cast<long long>(mine.size()), device_index,
                             static_cast<long long>(::getpid())};
  std::vector<long long> metas(p.rank == 0 ? 3 * static_cast<std::size_t>(p.size) : 0);
  MPI_Gather(meta, 3, MPI_LONG_LONG, metas.data(), 3, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  std::vector<int> counts, displs;
  long long total = 0;
  if (p.rank == 0) {
    for (int r = 0; r < p.size; ++r) {
      counts.push_back(static_cast<int>(metas[3 * static_cast<std::size_t>(r)]));
      displs.push_back(static_cast<int>(total));
      total += counts.back();
    }
    if (total > INT_MAX) {  // rank 0 cannot receive it; the others are already waiting
      MPI_Abort(MPI_COMM_WORLD, exit_code::arm_failed);
    }
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  MPI_Gatherv(mine.data(), static_cast<int>(mine.size()), MPI_CHAR, all.data(), counts.data(),
              displs.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  std::vector<RankOutcome> out;
  for (int r = 0; p.rank == 0 && r < p.size; ++r) {
    const auto ru = static_cast<std::size_t>(r);
    RankOutcome o;
    o.rank = r;
    o.device_index = static_cast<int>(metas[3 * ru + 1]);
    o.pid = static_cast<pid_t>(metas[3 * ru + 2]);
    o.output =
        all.substr(static_cast<std::size_t>(displs[ru]), static_cast<std::size_t>(counts[ru]));
    o.exited = true;  // it reached the gather: it is alive and its result says how it went
    out.push_back(std::move(o));
  }
  return out;
}

// 1. The flags for this world (every rank computes the same answer).
Status check_world(RunConfig& c, const MpiRequest& cmd, const Place& p) {
  try {
    if (cmd.gpus_given && c.gpus != 0 && c.gpus != p.size) {
      throw UsageError(
          fmt::format("--gpus {} disagrees with the {} ranks mpirun started; leave "
                      "--gpus out with --launcher mpi (the world size is the "
                      "number of ranks), or run mpirun -np {}",
                      c.gpus, p.size, c.gpus));
    }
    c.gpus = p.size;
    if (!cmd.threads_given) {
      c.threads = 0;
      resolve_default_threads(c);
    }
    validate_run_config(c);
  } catch (const std::exception& e) {
    return status_of(e, "");
  }
  return {};
}

// 2. This rank's device (its local rank picks it; the CPU device is shared) and the
// pre-flight, which every rank checks against its own host and device.
Status open_device(RunConfig& c, const Place& p, int device_index, std::unique_ptr<Device>& device,
                   HostEnvironment& host) {
  try {
    if (c.device == DeviceKind::automatic) {
      std::string notice;
      device = create_first_available_device(device_index, &notice);
      if (!notice.empty() && p.rank == 0) stderr_line("notice: ", notice);
    } else {
      device = create_device({to_string(c.device), device_index});
    }
    c.device = parse_device_kind(device->info().backend);
    if (!c.skip_preflight || p.rank == 0) host = collect_host_environment();
    if (!c.skip_preflight) {
      // This rank's device as it has it now, its context made (free: another process's share
      // is not this rank's).
      preflight_check(
          c, plan_memory(c, p.local_size), host,
          DeviceMemory{device->info().total_memory_bytes, device->occupancy().free_bytes,
                       device->info().memory_is_host_ram});
    }
  } catch (const std::exception& e) {
    return status_of(e, fmt::format("rank {} of {}: ", p.rank, p.size));
  }
  return {};
}

// --device auto may resolve differently where the hosts differ: one backend per arm.
bool same_backend_everywhere(DeviceKind mine, const Place& p) {
  const int kind = static_cast<int>(mine);
  int lowest = 0, highest = 0;
  MPI_Allreduce(&kind, &lowest, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&kind, &highest, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (lowest == highest) return true;
  if (p.rank == 0) {
    stderr_line("error: ",
                "--device auto found different backends on the ranks' hosts; "
                "give --device " +
                    backend_names("or"));
  }
  return false;
}

// 3. The arm. A failure ends every rank (MPI_Abort): peers may be waiting in a collective
// that MPI cannot cancel.
ArmResult run_arm_in_world(const RunConfig& c, Arm arm, Device& device, MpiCollectives& comm,
                           const Place& p) {
  ArmResult r;
  try {
    if (p.rank == 0) {
      std::fprintf(stderr, "zero3-offload-bench: device %s (%s); %d MPI ranks on %d host%s\n",
                   device.info().backend.c_str(), one_line(device.info().name).c_str(), p.size,
                   p.hosts, p.hosts == 1 ? "" : "s");
      std::fprintf(stderr, "zero3-offload-bench: arm %s: starting\n", to_string(arm));
      std::fflush(stderr);
    }
    test_hooks::apply_mpi_rank_fault(p.rank);
    const std::unique_ptr<Collectives> faulty =
        test_hooks::mpi_rank_fault_collectives(comm, p.rank);
    r = run_rank_body(c, arm, device, faulty ? *faulty : static_cast<Collectives&>(comm),
                      /*ranks_share_device=*/false);
  } catch (const std::exception& e) {
    set_arm_failure(r, e);  // where in the steps it failed, when it was in one
    comm.abort(r.error);    // does not return
  }
  return r;
}

// Everything between MPI_Init and MPI_Finalize.
int run_rank(const MpiRequest& cmd, Clock::time_point entered) {
  const Place p = place_in_world();
  RunConfig c = cmd.run;
  const Arm arm = c.arms.front();
  if (const int code = agree(check_world(c, cmd, p), p.rank)) return code;
  const int device_index = rank_device_index(c, p.local_rank, /*ranks_share_device=*/false);
  std::unique_ptr<Device> device;
  HostEnvironment host;
  if (const int code = agree(open_device(c, p, device_index, device, host), p.rank)) return code;
  if (!same_backend_everywhere(c.device, p)) return exit_code::usage;

  const std::string started = now_utc();
  MpiCollectives comm(MPI_COMM_WORLD, collective_timeout_s(c));
  ArmResult r = run_arm_in_world(c, arm, *device, comm, p);
  r.wall_s = seconds_since(entered);
  std::vector<RankOutcome> outcomes;
  try {
    outcomes = gather_outcomes(result_document(r, arm), device_index, p);
  } catch (const std::exception& e) {
    comm.abort(one_line(e.what()));
  }
  if (p.rank != 0) return r.ok ? exit_code::ok : exit_code::arm_failed;

  // 4. Rank 0 merges and reports, as the fork launcher does for one arm.
  RunResult run;
  run.config = c;
  run.started_utc = started;
  run.tool_version = ZOB_VERSION;
  run.hostname = host_name();
  run.host = host;
  run.has_environment = true;
  run.device_info = device->info();
  run.rounds = {{merge_rank_results(c, arm, outcomes, -1, "")}};
  run.arms = {combine_rounds(runs_of(run, arm))};
  if (!run.arms[0].ok) {
    stderr_line("error: ", fmt::format("arm {}: {}", to_string(arm), run.arms[0].error));
  }
  return report_run(run, 0);  // the fork launcher's reports and exit code
}

}  // namespace

std::string mpi_launcher_refusal(const MpiRequest& cmd) {
  const RunConfig& c = cmd.run;
  if (c.arms.size() != 1) {
    return "--launcher mpi runs one arm per mpirun; give --arms with one arm (e.g. --arms "
           "registered --json reg.json), run one mpirun per arm and compare them with "
           "`zero3-offload-bench compare reg.json unreg.json`";
  }
  if (c.repeats != 1) {
    return "--launcher mpi runs one round; drop --repeats and run mpirun again for another "
           "round (each run is a fresh set of processes)";
  }
  if (!c.chunk_elems_sweep.empty() || !c.sub_group_size_sweep.empty() ||
      !c.offload_ratio_sweep.empty()) {
    return "--launcher mpi runs one configuration; give one --chunk-elems, one "
           "--sub-group-size and one --offload-ratio, one mpirun per configuration";
  }
  return "";
}

int run_mpi_launcher(const MpiRequest& cmd) {
  const auto entered = Clock::now();
  if (const std::string why = mpi_launcher_refusal(cmd); !why.empty()) {
    if (launched_as_rank_zero()) stderr_line("error: ", why);  // once, not once per rank
    return exit_code::usage;
  }
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    stderr_line("error: ",
                "MPI_Init_thread failed; start the ranks with mpirun (see README "
                "\"Across nodes (MPI)\")");
    return exit_code::backend_unavailable;
  }
  int code = exit_code::arm_failed;
  try {
    code = run_rank(cmd, entered);
  } catch (const std::exception& e) {
    stderr_line("error: ", e.what());
    MPI_Abort(MPI_COMM_WORLD, exit_code::arm_failed);
  }
  MPI_Finalize();
  return code;
}

}  // namespace zob
