// The reporters of a run (reporter.hpp's interface), in order, and the one reporting call:
// both launchers (parent.cpp, mpi_launcher.cpp) hand their result to publish_run, so an output
// is written the same way whichever started the arms; a new output format is one new Reporter
// and one line in run_reporters().
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "report/reporter.hpp"
#include "zob/result.hpp"

namespace zob {

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
