// --trace FILE: a Chrome trace-event JSON (loads in Perfetto / chrome://tracing) with one
// process per arm run and one thread (track) per queue -- compute, h2d, d2h -- plus cpu_adam,
// built from the spans every StepSample carries.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "zob/result.hpp"

namespace zob {

struct TracedRun {
  std::string label;  // "registered", or "registered #2" with --repeats
  const ArmResult* arm = nullptr;
};

// The file itself is written as every output file is (report/output_file.hpp).
nlohmann::json chrome_trace(const std::vector<TracedRun>& runs);

}  // namespace zob
