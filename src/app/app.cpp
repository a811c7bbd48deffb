// app_main (app.hpp): the dispatch of what the command line asks for.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/app.hpp"
#include "cli/cli.hpp"
#include "driver/driver.hpp"
#include "report/json_util.hpp"
#include "report/output_file.hpp"
#include "report/plot.hpp"
#include "report/report.hpp"
#include "zob/adam_bench.hpp"
#include "zob/compare.hpp"
#include "zob/errors.hpp"
#include "zob/exit_codes.hpp"
#include "zob/text.hpp"

namespace zob {

namespace {

void print_error(const std::string& what) { stderr_line("error: ", what); }

// argv of a child: <mode> [arm] --internal-config <json> --internal-result-fd <n>
int run_internal(const std::vector<std::string>& args) {
  const bool probe = args[1] == kProbeFlag;
  std::size_t i = probe ? 2 : 3;
  if (!probe && args.size() < 3) throw UsageError("internal: missing arm; not for direct use");
  std::string config_text;
  int fd = -1;
  for (; i + 1 < args.size(); i += 2) {
    if (args[i] == kConfigFlag) config_text = args[i + 1];
    else if (args[i] == kResultFdFlag) fd = std::stoi(args[i + 1]);
    else throw UsageError("internal: unexpected " + args[i] + "; not for direct use");
  }
  if (fd < 0 || config_text.empty()) {
    throw UsageError(
        "internal: missing --internal-config or --internal-result-fd; not for "
        "direct use");
  }
  const RunConfig config = nlohmann::json::parse(config_text).get<RunConfig>();
  return probe ? run_probe_child(config, fd) : run_arm_child(config, parse_arm(args[2]), fd);
}

int run_adam(const CliCommand& cmd) {
  const AdamBenchResult r = run_adam_benchmark(cmd.adam);
  const std::string text = r.to_text();
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (!text.empty() && text.back() != '\n') std::fputc('\n', stdout);
  std::fflush(stdout);
  if (!cmd.adam_json_path.empty()) {
    write_output_file(cmd.adam_json_path, dump_json(r.to_json(), 2) + "\n");
    stderr_line("", "wrote the result to " + cmd.adam_json_path);
  }
  return exit_code::ok;
}

int run_compare(const CliCommand& cmd) {
  const Comparison c = compare_results(cmd.compare);
  std::fwrite(c.text.data(), 1, c.text.size(), stdout);
  std::fflush(stdout);
  if (!cmd.compare_json_path.empty()) {
    write_output_file(cmd.compare_json_path, dump_json(c.doc, 2) + "\n");
    stderr_line("", "wrote the comparison to " + cmd.compare_json_path);
  }
  return exit_code::ok;
}

// plot FILE... --out CHART: the saved results read as compare reads them, one column each.
int run_plot(const CliCommand& cmd) {
  std::vector<ChartInput> inputs;
  for (const std::string& path : cmd.compare.files) {
    const auto slash = path.find_last_of('/');
    inputs.push_back({slash == std::string::npos ? path : path.substr(slash + 1),
                      read_result_file(path, "plot")});
  }
  write_chart(inputs, cmd.plot_path);
  stderr_line("", "wrote the chart to " + cmd.plot_path);
  return exit_code::ok;
}

int run_benchmark(const CliCommand& cmd, MpiLauncherEntry mpi_launcher) {
  if (cmd.launcher == CliCommand::Launcher::fork) return run_driver(cmd.run);
  if (mpi_launcher == nullptr) {
    throw UsageError(
        "--launcher mpi: this build has no MPI; install libopenmpi-dev "
        "(scripts/deps) and rebuild, or use --launcher fork");
  }
  return mpi_launcher(MpiRequest{cmd.run, cmd.gpus_given, cmd.threads_given});
}

}  // namespace

int app_main(int argc, char** argv, MpiLauncherEntry mpi_launcher) {
  const std::vector<std::string> args(argv, argv + argc);
  try {
    if (args.size() >= 2 && (args[1] == kProbeFlag || args[1] == kChildFlag)) {
      return run_internal(args);
    }
    const CliCommand cmd = parse_command_line(args);
    switch (cmd.kind) {
      case CliCommand::Kind::exit_now: return cmd.exit_code;
      case CliCommand::Kind::adam: return run_adam(cmd);
      case CliCommand::Kind::run: return run_benchmark(cmd, mpi_launcher);
      case CliCommand::Kind::compare: return run_compare(cmd);
      case CliCommand::Kind::list_devices: return run_list_devices(cmd.run);
      case CliCommand::Kind::plot: return run_plot(cmd);
    }
  } catch (const UsageError& e) {
    print_error(e.what());
    return exit_code::usage;
  } catch (const DeviceError& e) {
    print_error(e.what());
    return e.kind() == DeviceErrorKind::unavailable ? exit_code::backend_unavailable
                                                    : exit_code::arm_failed;
  } catch (const std::exception& e) {
    print_error(std::string(e.what()) + "; this is a bug, please report it");
    return exit_code::arm_failed;
  }
  return exit_code::arm_failed;
}

}  // namespace zob
