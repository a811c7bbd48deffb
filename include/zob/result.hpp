// The result model. A child fills an ArmResult and sends it to the parent as JSON over a pipe;
// the parent builds a RunResult; every report (table, DRIVERRESULT, --json file, trace) is
// rendered from these structures and nothing else.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "zob/config.hpp"
#include "zob/device.hpp"
#include "zob/environment.hpp"
#include "zob/phase.hpp"

namespace zob {

// One phase of one step; StepSample::phases keys them by to_string(Phase) (zob/phase.hpp).
struct PhaseSample {
  double device_s = -1;     // device-event time; -1 where the phase is not on the device
  double host_s = 0;        // host wall time the phase took (or blocked the host)
  std::uint64_t bytes = 0;  // bytes moved (copies: over the link; adam: 28 B/param)
  std::int64_t params = 0;  // parameters processed (adam, casts)
};

// One span on a timeline track, seconds relative to the start of its step.
struct TraceSpan {
  std::string track;  // "compute", "h2d", "d2h", "cpu_adam"
  std::string name;   // "layer3.fwd", "copy_back[2]"
  double start_s = 0;
  double duration_s = 0;
};

struct StepSample {
  double wall_s = 0;                          // host wall clock, step start to all queues idle
  float loss = 0;                             // sum of logits of the forward pass of this step
  std::map<std::string, PhaseSample> phases;  // by to_string(Phase)
  std::vector<TraceSpan> spans;

  PhaseSample& phase(Phase p) { return phases[to_string(p)]; }
  void set_phase(Phase p, double host_s, double device_s, std::uint64_t bytes,
                 std::int64_t params) {
    phases[to_string(p)] = PhaseSample{device_s, host_s, bytes, params};
  }
};

// Where the Adam pool's threads run.
struct ThreadPlacement {
  std::string policy = "none";  // "cpu-affinity", "numa-node N", "none"; with --gpus N > 1
                                // "<that>, rank slice i/m" or "rank slice i/m" (i-th, from 0,
                                // of the m ranks sharing the CPUs)
  std::vector<int> cpus;        // CPU of each thread in order; empty when unpinned
};

// One rank of a multi-rank arm (--gpus N > 1): its own step times and phases.
// --schedule deepspeed with --model: one module's device operations in a step (the decoder as
// eager PyTorch launches it, src/step/decoder/eager_decoder.hpp): what the plan states and what
// went through the Device, counted (kernels: kernel calls and fills; copies). The math's counts,
// then DeepSpeed's own copies over the link attributed to the module
// (src/step/deepspeed/deepspeed_plan.hpp DsModuleCopies: its visits' parameter fetches; its
// gradient hooks' bucket flushes, the end-of-backward flush with the embedding's).
struct ModuleDeviceOps {
  std::string module;  // the module's name: "embedding", "layers.0", ..., "head"
  std::int64_t plan_forward = 0, plan_backward = 0;
  std::int64_t kernels_forward = 0, kernels_backward = 0;
  std::int64_t copies_forward = 0, copies_backward = 0;
  std::int64_t plan_fetch_forward = 0, plan_fetch_backward = 0;  // H2D parameter fetches
  std::int64_t fetch_forward = 0, fetch_backward = 0;
  std::int64_t plan_grad_d2h = 0, plan_grad_h2d = 0;  // the gradient flushes' copies
  std::int64_t grad_d2h = 0, grad_h2d = 0;
};

struct RankResult {
  int rank = 0;
  int device_index = 0;
  int pid = 0;
  bool ok = false;
  std::string error;                          // set when !ok
  std::vector<double> step_s;                 // every step's wall time, warmup first
  std::map<std::string, PhaseSample> phases;  // averages over the timed steps
  std::int64_t shard_elems = 0;               // elements this rank owns (padding included)
  std::string shard_checksum;                 // checksum_hex of its final fp32 master shard
  ThreadPlacement placement;                  // where this rank's Adam threads ran
};

// The lower bound of a step under a perfect overlap of Adam with the link (docs/anatomy.md §6):
// medians over the timed steps.
// A lower bound of the arm's step from parts that cannot overlap, medians over the timed steps
// of the same run: the host's memory bandwidth bounds Adam, each direction of the link bounds
// its copies (PCIe is full duplex), and forward plus backward compute (the kernels alone, no
// waits) cannot hide under either: bound = max(adam_s, d2h_s, h2d_s) + compute_s.
struct StepBound {
  double adam_s = 0;           // 28 B/param at probe_gb_per_s: Adam at the memory's speed
  double adam_measured_s = 0;  // the step's own Adam time (host), for comparison
  double probe_gb_per_s = 0;   // same-run memory probe of Adam's shape (memory_probe_gb_per_s)
  double d2h_s = 0;            // device time of the step's pure device->host copies
  double h2d_s = 0;            // device time of the step's pure host->device copies
  double pcie_s = 0;           // max(d2h_s, h2d_s)
  double compute_s = 0;        // forward + backward kernels alone (module spans, no waits)
  double bound_s = 0;          // max(adam_s, d2h_s, h2d_s) + compute_s
  double ratio = 0;            // median step time / bound_s (>= 1 for a lower bound)
  // The physical bound (docs/schedules.md): the host memory is shared by Adam and every copy's
  // DMA, so all of the step's host bytes, not Adam's alone, go through it at the probe's rate.
  double host_bytes = 0;  // bytes of the step through host memory (CPU passes + copies)
  // The host memory's rate for the physical bound: the probe's, a measurement independent of
  // the step it judges (merged ranks: the sum of the ranks' probes). 0 in files made before
  // issue 25: the probe's rate then.
  double host_gb_per_s = 0;
  // Which measurement set host_gb_per_s: "probe", or "ranks" (their probes' sum). Files made
  // before issue 37 may say "adam_pass" or "step": the bound was raised to the fastest Adam
  // pass or step there, so a step could never beat it.
  std::string host_rate_from;
  // The fastest Adam pass of the timed steps (its bytes / its host time), beside the probe: a
  // reader sees where the probe read less than the step's own pass (not used by the bound).
  double adam_pass_gb_per_s = 0;
  // The fastest timed step; beaten: it took less than physical_s, which a lower bound cannot
  // allow, so the probe misread this run's host memory and the bound is "not known"
  // (physical_verdict) instead of being moved to fit the step.
  double fastest_step_s = 0;
  bool beaten = false;
  std::string physical_verdict;  // "holds", "not known", or "" without a physical bound
  double host_memory_s = 0;      // host_bytes / host_gb_per_s
  // Time no exact schedule can give the host memory work: step t+1's forward needs every
  // parameter Adam updates in step t (Adam follows the gradients, head first; the forward
  // starts at the embedding), and Adam needs the first gradients: the forward and the first
  // backward module, at the longer of their kernels and (offload_param) the forward's fetch
  // copies; serial_host_bytes of the host bytes move meanwhile. Median over the timed steps.
  double serial_s = 0;
  double serial_host_bytes = 0;
  // max(serial_s + (host_bytes - serial_host_bytes) / host_gb_per_s, d2h_s, h2d_s, compute_s):
  // each resource's own work at its measured rate, the host memory's after the serial part;
  // the rest of the compute is not added (pieces let the host memory work while the device
  // computes). Before 2026-12-02's host-memory results: max(host_memory_s, links, compute).
  double physical_s = 0;
  double physical_ratio = 0;  // median step time / physical_s
  // The probe's passes, each a sample of probe_gb_per_s's median: since 2026-12-03, 5 before
  // the steps and one after each timed step (ArmMemoryProbe); 0 in files made before (5, all
  // before the steps). Merged ranks: the fewest of any rank.
  int probe_passes = 0;

  // The physical bound's fields from host_bytes, serial_s, serial_host_bytes, host_gb_per_s
  // (the probe's), pcie_s and compute_s; then whether the fastest timed step beat it.
  void finish_physical(double median_wall_s, double fastest_wall_s);
};

// One timed step's inputs to the bound, from its device events.
struct StepLinkTimes {
  double d2h_s = 0, h2d_s = 0, compute_s = 0;
  // What no exact schedule overlaps with the host memory's work (StepBound::serial_s): the
  // forward kernels and the first backward module's, or the forward's fetch copies where
  // longer; and the host bytes those fetches read meanwhile. 0 where a schedule does not
  // report it (deepspeed).
  double serial_s = 0, serial_host_bytes = 0;
};

struct ArmResult {
  Arm arm = Arm::registered;
  bool ok = false;
  std::string error;  // set when !ok: the reason, one line
  // A failure inside a step (StepFailurePoint, zob/step.hpp): the step (from 1, warmup
  // counted) and the phase; 0 and "" when the arm failed outside its steps or did not fail.
  int failed_step = 0;
  std::string failed_phase;

  // Python-script-compatible fields
  std::string device;  // backend name: "cpu", "cuda", "xpu"
  std::string model;   // "synthetic-h{hidden}-l{layers}"
  std::int64_t params = 0;
  double params_b = 0;  // params / 1e9 rounded to 3 decimals
  std::int64_t batch = 0, seq = 0, tokens_per_step = 0;
  int steps = 0, warmup = 0;
  double step_avg_s = 0, step_min_s = 0;
  double gpu_peak_gb = 0;  // device memory high-water mark, 1e9 bytes
  // --schedule deepspeed: the caching pool's reserved high-water mark (segments taken from the
  // device; torch.cuda.max_memory_reserved), 1e9 bytes; gpu_peak_gb is then its allocated
  // bytes (torch.cuda.max_memory_allocated). 0 where the arm allocates without the pool.
  double gpu_reserved_peak_gb = 0;

  // additions
  DeviceInfo device_info;
  std::string loop;                 // "copy_back" / "offload_param"
  std::vector<StepSample> samples;  // every step, warmup first (the first `warmup` entries)
  std::string param_checksum;       // checksum_hex of the final fp32 master
  std::string registration;         // Registration::method, "none", or "not-applicable"
  bool registration_verified = false;
  // What the driver reported of the arm's host buffers after the set-up, asked buffer by buffer
  // (step/arm_result_fill.hpp): "all" registered (registered arm), "none" (unregistered,
  // pageable), "not-applicable" (no registration on the device; hostalloc), "not-checked" (the
  // arm failed before the check).
  std::string registered_at_driver = "not-checked";
  std::uint64_t locked_bytes = 0;      // peak bytes mlocked by this arm
  std::uint64_t registered_bytes = 0;  // peak bytes registered by this arm
  // Bytes the device runtime allocated for this arm (hostalloc: cudaMallocHost /
  // zeMemAllocHost), which the runtime pins itself; 0 on the CPU device's plain allocation.
  std::uint64_t runtime_pinned_bytes = 0;
  double register_s = 0;  // time spent registering
  double setup_s = 0;     // allocation + lock + registration + init, untimed
  int adam_threads = 0;
  std::string schedule = "stock";  // --schedule
  StepBound bound;
  ThreadPlacement placement;
  std::uint64_t host_mapped_bytes = 0;  // bytes this arm's HostBuffers map (page-rounded)
  double wall_s = 0;                    // child process start to result (time to result)
  int pid = 0;  // process that ran the arm (set by the driver, not the step)
  // Device::occupancy as the arm's child saw it (the child's JSON only): the most other
  // processes on the device at the arm's start or end (-1 unknown), its free memory at start.
  int device_other_processes = -1;
  std::uint64_t device_free_bytes = 0;
  // --gpus N: the ranks, in rank order (empty with one rank). With N > 1 each step's wall_s
  // is the slowest rank's, the loss the sum over ranks, param_checksum combines the shards'.
  int gpus = 1;
  std::vector<RankResult> ranks;
  // --schedule deepspeed with --model: every module's device operations, in module order (rank
  // 0's with N ranks); empty otherwise.
  std::vector<ModuleDeviceOps> device_ops;

  // Timed (post-warmup) step times.
  std::vector<double> timed_step_s() const;
};

void to_json(nlohmann::json&, const StepBound&);
void from_json(const nlohmann::json&, StepBound&);
void to_json(nlohmann::json&, const ThreadPlacement&);
void from_json(const nlohmann::json&, ThreadPlacement&);
void to_json(nlohmann::json&, const ArmResult&);
void from_json(const nlohmann::json&, ArmResult&);  // throws nlohmann::json::exception

// One combination of a sweep and the arms run for it.
struct SweepPoint {
  std::int64_t chunk_elems = 0;
  std::int64_t sub_group_size = 0;
  std::vector<ArmResult> arms;  // in --arms order
  double offload_ratio = 1.0;
  // "chunk_elems=N sub_group_size=N[ offload_ratio=R]": the ratio where the run sweeps it or
  // sets it below 1 (`ratio_shown`), so that a plain sweep's labels read as before.
  std::string label(bool ratio_shown) const;
};

// --fit (src/driver/fit_search.cpp): one candidate of the search, an offload ratio and an arm,
// with what its plan needs and, where it ran, its arm run of each round.
struct FitCandidate {
  double offload_ratio = 1.0;
  Arm arm = Arm::registered;
  bool baseline = false;  // DeepSpeed's default (ratio 1, pin_memory false: pageable), run always
  std::int64_t sub_groups = 0, device_sub_groups = 0;  // the plan's optimizer split, one rank
  std::uint64_t planned_device_bytes = 0;              // one rank's device peak, planned
  std::uint64_t planned_locked_bytes = 0;  // what one rank mlocks (registered / unregistered)
  // Why it did not run, or did not run every round: "" when it did; "does not fit: ...",
  // "same split as ratio R", "cut: ..." (the budget).
  std::string skipped;
  std::vector<ArmResult> rounds;  // its arm run of each round, in round order
};

struct FitSearch {
  std::vector<FitCandidate> candidates;  // ratio-major in --offload-ratio order, then --arms
  double budget_s = 0;                   // --fit-budget
  double spent_s = 0;                    // wall seconds of the arm runs
  int rounds_planned = 0, rounds_run = 0;
  // "the budget cut rounds 3-5 of every candidate": what the search left out, in words.
  std::vector<std::string> cut;
};

struct RunResult {
  RunConfig config;
  std::vector<ArmResult> arms;    // in --arms order; with a sweep, those of its first combination
  std::vector<SweepPoint> sweep;  // every combination, chunk-major; empty = just `arms`
  std::string started_utc;
  std::string tool_version;
  std::string hostname;  // where it ran (reported in DRIVERRESULT "host")
  std::string
      interrupted;  // "SIGINT" / "SIGTERM" / "SIGHUP" when the run was cut short; "" otherwise

  // With --repeats R: every arm run, rounds[r][i] = round r+1 of config.arms[i] (a round cut
  // short by a signal may be shorter). `arms` then holds each arm over all rounds (see
  // combine_rounds in src/report). Empty when the run result was built without rounds.
  std::vector<std::vector<ArmResult>> rounds;
  // What the run was measured on; has_environment is false where nothing was collected.
  bool has_environment = false;
  HostEnvironment host;
  DeviceInfo device_info;
  // --fit: the search; the sweep above then holds each ratio that ran with its arms combined.
  std::optional<FitSearch> fit;
};

}  // namespace zob
