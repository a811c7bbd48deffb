// Every output of a run is one Reporter over the one RunResult (Google Benchmark's
// BenchmarkReporter is the model): the sections of stdout (header, table, phases, bars,
// ranks, registration, verdict, the DRIVERRESULT line) and the files (--json, --csv, --plot,
// --trace). This header is the interface alone, so that each reporter's file includes it and
// publish.hpp (the list of reporters and publish_run) includes the reporters' files: one way.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "zob/result.hpp"

namespace zob {

// What a reporter reads: the run, and its DRIVERRESULT document (driver_result_json), built
// once for every reporter that needs it.
struct ReportContext {
  const RunResult& run;
  const nlohmann::ordered_json& driver_result;
};

class Reporter {
 public:
  virtual ~Reporter() = default;
  // Its part of stdout, printed in the order of run_reporters(); "" when it prints nothing.
  virtual std::string render(const ReportContext& context) const {
    (void)context;
    return "";
  }
  // Writes its file when the run asks for one and returns what it wrote ("the CSV to r.csv");
  // "" when the run asks for none. Throws (UsageError naming the path) when it cannot write.
  virtual std::string write(const ReportContext& context) const {
    (void)context;
    return "";
  }
};

}  // namespace zob
