// What makes the numbers trustworthy, rendered from the same RunResult as the table: the
// environment header, the per-phase section, the registration lines, step statistics with the
// spread warning, and the statistics over --repeats rounds.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include <cstring>

#include "zob/result.hpp"
#include "zob/stats.hpp"

namespace zob {

// Equal bit patterns (a NaN equals itself; 0.0 and -0.0 differ): how arms and rounds compare.
inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// "1.23 GB", "598.02 kB", "12 B": bytes in the unit that shows them.
std::string bytes_text(std::uint64_t bytes);

// One arm over all its rounds (all the same arm, round order): the Python-compatible fields
// (step_avg_s, step_min_s, step times) cover every round's timed steps; samples are the first
// round's warmup steps followed by every round's timed steps, so timed_step_s() and
// summarize_phases() see them all. Not ok when any round failed (the error names the round).
ArmResult combine_rounds(const std::vector<const ArmResult*>& runs);

// The runs of `arm` in round order: run.rounds when present, else the one entry of run.arms.
std::vector<const ArmResult*> runs_of(const RunResult& run, Arm arm);

// Per round in which both completed: median(unregistered timed) / median(registered timed).
std::vector<double> round_speedups(const RunResult& run);

// Summary of the timed steps of an arm (over all rounds); n == 0 when it has none.
Summary step_summary(const ArmResult& arm);

// "arm X: step times spread ..." for every completed arm whose stddev exceeds kSpreadWarning
// of its median. Printed on stderr and listed in DRIVERRESULT's "warnings".
std::vector<std::string> spread_warnings(const RunResult& run);

// Another process on the device while the arms ran, "" when none was seen: the arms' children
// report Device::occupancy; a device that lists other processes (NVML on CUDA) is believed,
// else a fall of its free memory from the first arm's start to a later arm's start by more
// than kSharedFreeDrop (or 2 % of the device's memory, the larger). Then the arms' times
// include the other process's work: the verdict is never conclusive, and a warning says why.
inline constexpr std::uint64_t kSharedFreeDrop = std::uint64_t{1} << 30;
std::string shared_device(const RunResult& run);

// Whether the shared-device check above could run: every completed arm run counted the
// device's other processes (NVML on CUDA; not the CPU device, Level Zero or CUDA without
// NVML) and knew the device's free memory. `note` says what was not checked and why ("" when
// both were, or no arm completed): stderr shows it as a "note:" line, DRIVERRESULT's
// "occupancy_check" holds all three.
struct OccupancyCheck {
  bool processes_counted = false;
  bool free_memory_watched = false;
  std::string note;
};
OccupancyCheck occupancy_check(const RunResult& run);
nlohmann::ordered_json occupancy_check_json(const RunResult& run);

// spread_warnings, then the CPU device's "registration does not apply" (verdict.hpp) and a
// shared device: what stderr shows as "warning:" lines and DRIVERRESULT lists in "warnings".
std::vector<std::string> run_warnings(const RunResult& run);

// First difference between rounds of one arm (losses of every step, then the checksum); ""
// when every completed round agrees with the first completed one.
std::string first_round_difference(const RunResult& run);

// register_s per GiB registered (or locked, where nothing is registered); nullopt when no
// bytes were pinned.
std::optional<double> register_s_per_gib(const ArmResult& arm);

// summarize_phases() of the arm, the shape of DRIVERRESULT's per-arm "phases".
nlohmann::json phases_json(const ArmResult& arm);

// DRIVERRESULT additions of an arm: "step_stats", "rounds", "register_s_per_gib".
void add_arm_details(nlohmann::ordered_json& j, const RunResult& run, const ArmResult& arm);
// Top-level additions: "repeats", "speedup_median", "speedup_interval", "warnings",
// "environment".
void add_run_details(nlohmann::ordered_json& j, const RunResult& run);

// "# " lines: tool, device, PCIe link, host, memory; "" without an environment.
std::string render_environment_header(const RunResult& run);
// One row per phase per completed arm (device ms, host ms, GB, GB/s); "" when no phases.
std::string render_phase_section(const RunResult& run);
// --gpus N > 1: per phase the slowest rank's mean (device ms, host ms, GB), and the arm's
// N-rank bound with its ratio; "" with one rank.
std::string render_rank_section(const RunResult& run);
// "registration: <arm>: ..." per completed arm.
std::string render_registration_lines(const RunResult& run);

}  // namespace zob
