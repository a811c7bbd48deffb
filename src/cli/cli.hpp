// Flags -> a validated RunConfig (or AdamBenchOptions, or a comparison): what to run, nothing
// more; src/app dispatches it. The run flags are declared in zob/settings.hpp; everything is
// checked here, before anything is allocated or any process is spawned; every refusal is a
// UsageError whose text is "<what>; <fix>" (the app prints it as one line and exits 2).
#pragma once
#include <string>
#include <vector>

namespace CLI {
class App;
}

#include "zob/adam_bench.hpp"
#include "zob/compare.hpp"
#include "zob/config.hpp"

namespace zob {

struct CliCommand {
  enum class Kind { run, adam, exit_now, compare, list_devices, plot };
  Kind kind = Kind::run;
  RunConfig run;                  // Kind::run, Kind::list_devices (device index, timeout)
  AdamBenchOptions adam;          // Kind::adam
  std::string adam_json_path;     // Kind::adam, "" = none
  int exit_code = 0;              // Kind::exit_now (--help, --version)
  CompareOptions compare;         // Kind::compare
  std::string compare_json_path;  // Kind::compare, "" = none
  std::string plot_path;          // Kind::plot: the chart (its inputs are compare.files)
  // Kind::run: --launcher fork (default: the ranks of --gpus N are forked on this host) or
  // mpi (this process is one rank started by mpirun; src/driver/mpi_launcher.cpp). The mpi
  // launcher takes --gpus from the MPI world size, so it needs to know what was given.
  enum class Launcher { fork, mpi };
  Launcher launcher = Launcher::fork;
  bool gpus_given = false;
  bool threads_given = false;
};

// Parses argv (argv[0] is the program). --help / --version print to stdout and give exit_now.
// Throws UsageError for everything else that is wrong, CLI11's own parse errors included.
CliCommand parse_command_line(const std::vector<std::string>& args);

void validate_adam_options(const AdamBenchOptions& options);

// "zero3-offload-bench 1.0.0 (commit ..., Release build)", the backends (built in, plugin
// present next to the executable, or not built) and the chart formats: what --version prints.
std::string version_text();

// For a command line CLI11 refused: "unknown flag --hiden; did you mean --hidden?" for the
// first unknown --flag (or "...; see ... --help" when nothing is close); "" when every flag
// is known (the refusal is about something else).
std::string misspelt_flag_text(const CLI::App& app, const std::vector<std::string>& args);

// Refuses (UsageError) a path the run could not write as it will (check_output_path,
// report/output_file.hpp): nothing is opened, created or left behind.
void check_output_path_writable(const std::string& path, const std::string& flag);

}  // namespace zob
