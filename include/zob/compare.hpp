// `zero3-offload-bench compare A.json B.json [...]`: saved results side by side (e.g. a CUDA box
// and an XPU box on the same flags), with ratios to the first file.
#pragma once
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace zob {

// Parses a saved result: a --json file, or captured stdout holding a "DRIVERRESULT={...}" line.
// Throws UsageError naming `origin` and what is wrong (not JSON, not a zero3-offload-bench
// result, unsupported schema_version, missing workload). Never crashes on any input (fuzzed).
nlohmann::json parse_result_document(std::string_view text, const std::string& origin);

// Reads and parses a saved result file; refusals name `command` ("compare", "plot").
nlohmann::json read_result_file(const std::string& path, const std::string& command);

struct CompareOptions {
  std::vector<std::string> files;  // at least 2
  bool force = false;              // compare even when the workloads differ
};

struct Comparison {
  nlohmann::json doc;  // the --json output
  std::string text;    // the table printed on stdout
};

// Throws UsageError: fewer than two files, unreadable file, bad document, or (without force)
// workloads that differ -- naming the first differing key and both values.
Comparison compare_results(const CompareOptions& options);

}  // namespace zob
