// Every output of a run is one Reporter over the one RunResult (Google Benchmark's
// BenchmarkReporter is the model): the sections of stdout (header, table, phases, bars,
// ranks, registration, verdict, the DRIVERRESULT line) and the files (--json, --csv, --plot,
// --trace). Both launchers (parent.cpp, mpi_launcher.cpp) hand their result to publish_run,
// so an output is written the same way whichever started the arms; a new output format is one
// new Reporter and one line in run_reporters().
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

// The reporters of a run in order: stdout's sections (the compat printer of config.compat for
// the table), then the files.
std::vector<std::unique_ptr<Reporter>> run_reporters(const RunConfig& config);

// Every reporter's stdout section, concatenated: everything the run prints on stdout.
std::string render_reports(const ReportContext& context);

// The one reporting call of both launchers: the run's warnings on stderr, stdout in one
// write, then every file, each written or refused on its own ("wrote ..." / "error: ..." on
// stderr). False when some file could not be written (the results are still on stdout).
bool publish_run(const RunResult& run);

}  // namespace zob
