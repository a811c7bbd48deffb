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

nlohmann::json chrome_trace(const std::vector<TracedRun>& runs);

// Writes via a temporary file and rename, so a reader never sees half a file.
// Throws UsageError when the file can't be written.
void write_json_file(const std::string& path, const nlohmann::json& doc, int indent = -1);

}  // namespace zob
