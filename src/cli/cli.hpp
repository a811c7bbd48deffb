// Flags -> a validated RunConfig (or AdamBenchOptions). Everything is checked here, before
// anything is allocated or any process is spawned; every refusal is a UsageError whose text is
// "<what>; <fix>" (main prints it as one line and exits 2).
#pragma once
#include <string>
#include <vector>

#include "zob/adam_bench.hpp"
#include "zob/compare.hpp"
#include "zob/config.hpp"

namespace zob {

struct CliCommand {
  enum class Kind { run, adam, exit_now, compare, list_devices };
  Kind kind = Kind::run;
  RunConfig run;               // Kind::run, Kind::list_devices (device index, timeout)
  AdamBenchOptions adam;       // Kind::adam
  std::string adam_json_path;  // Kind::adam, "" = none
  int exit_code = 0;           // Kind::exit_now (--help, --version)
  CompareOptions compare;      // Kind::compare
  std::string compare_json_path;  // Kind::compare, "" = none
};

// Parses argv (argv[0] is the program). --help / --version print to stdout and give exit_now.
// Throws UsageError for everything else that is wrong, CLI11's own parse errors included.
CliCommand parse_command_line(const std::vector<std::string>& args);

// --threads not given (threads 0) with one rank: one per --cpu-affinity CPU, else per CPU
// available. Several ranks keep 0: each rank runs one thread per CPU of its slice.
void resolve_default_threads(RunConfig& config);
// The checks of parse_command_line on a RunConfig built some other way (and re-run by the
// child on the config it receives). Throws UsageError.
void validate_run_config(const RunConfig& config);
void validate_adam_options(const AdamBenchOptions& options);

// Refuses (UsageError) a path that cannot be written: opens it for append, and removes it
// again when the check created it.
void check_output_path_writable(const std::string& path, const std::string& flag);

// Strict number parsing for flag values: the whole text, in [min, max]. Throws UsageError
// naming the flag and the accepted range.
std::int64_t parse_integer_flag(const std::string& flag, const std::string& text,
                                std::int64_t min, std::int64_t max);
std::uint64_t parse_unsigned_flag(const std::string& flag, const std::string& text);
double parse_seconds_flag(const std::string& flag, const std::string& text, double max);

// The whole program: flags, the hidden child entry points, exit codes.
int cli_main(int argc, char** argv);

}  // namespace zob
