// --fit: the fastest DeepSpeed settings that fit. Each candidate is an offload ratio and an
// arm (plus the baseline, DeepSpeed's default: ratio 1 with pageable memory); the plan and the
// pre-flight say which fit before anything runs, the rest run as interleaved rounds (each round
// every candidate once, a fresh process each) within --fit-budget, and the report
// (report/fit_report.hpp) names the winner with its DeepSpeed settings.
#pragma once
#include <cstdint>
#include <vector>

#include "zob/config.hpp"
#include "zob/device.hpp"
#include "zob/environment.hpp"
#include "zob/preflight.hpp"
#include "zob/result.hpp"

namespace zob {

// Every candidate with its plan and, where it will not run, why: it does not fit (the
// pre-flight's reason; none with --skip-preflight), or it has the same device/CPU split of the
// optimizer's sub-groups as an earlier ratio (the same run). device_memory: 0 unknown.
std::vector<FitCandidate> plan_fit_candidates(const RunConfig& config, const HostEnvironment& host,
                                              DeviceMemory device_memory);

// `config` at one ratio with one arm: what one candidate's child runs.
RunConfig fit_point(const RunConfig& config, double offload_ratio, Arm arm);

// The search and its report; the process's exit code (2 when no candidate fits, before any
// arm runs).
// device_free_bytes: the device's free memory as the probe found it (0 unknown).
int run_fit(const RunConfig& resolved, const DeviceInfo& info, std::uint64_t device_free_bytes,
            RunResult& run);

}  // namespace zob
