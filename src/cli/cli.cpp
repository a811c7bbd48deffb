#include "cli/cli.hpp"

#include <unistd.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <stdexcept>

#include "report/output_file.hpp"
#include "report/plot.hpp"
#include "zob/backends.hpp"
#include "zob/build_info.hpp"
#include "zob/errors.hpp"
#include "zob/model.hpp"
#include "zob/settings.hpp"
#include "zob/text.hpp"
#include "zob/thread_pool.hpp"

namespace zob {

namespace {

constexpr const char* kProgram = "zero3-offload-bench";

// The run flags' CLI11 options, registered from the settings' table (zob/settings.hpp): one
// text per flag, parsed after CLI11 is done so every refusal names the flag the same way.
struct RunOptions {
  std::vector<const Setting*> flags;  // the settings with a flag, in --help order
  std::vector<std::string> values;    // per flag
  // Toggles are bound to a bool so that CLI11 refuses "--offload-param=maybe".
  std::unique_ptr<bool[]> toggles;    // per flag
  std::vector<CLI::Option*> options;  // per flag
  std::size_t index_of(std::string_view name) const {
    for (std::size_t i = 0; i < flags.size(); ++i) {
      if (name == flags[i]->flag) return i;
    }
    throw std::out_of_range("no run flag " + std::string(name));
  }
  bool given(std::string_view name) const { return options[index_of(name)]->count() > 0; }
  // A toggle given and not turned off ("--list-devices=false").
  bool on(std::string_view name) const { return toggles[index_of(name)]; }
  const std::string& value(std::string_view name) const { return values[index_of(name)]; }
};

void add_run_options(CLI::App& app, RunOptions& o) {
  for (const Setting& s : settings()) {
    if (s.has_flag()) o.flags.push_back(&s);
  }
  o.values.resize(o.flags.size());  // never resized again: CLI11 keeps pointers into it
  o.toggles = std::make_unique<bool[]>(o.flags.size());
  for (std::size_t i = 0; i < o.flags.size(); ++i) {
    const Setting& f = *o.flags[i];
    if (f.value_name.empty()) {
      o.options.push_back(app.add_flag(f.flag, o.toggles[i], f.help));
      continue;
    }
    CLI::Option* opt = app.add_option(f.flag, o.values[i], f.help);
    if (const std::string def = f.help_default(); !def.empty()) {
      o.values[i] = def;
      opt->capture_default_str();
    }
    o.options.push_back(opt->type_name(f.value_name));
  }
}

// The given flags into the config, in table order; output files wait for the checks.
void apply_run_options(const RunOptions& o, RunConfig& c) {
  for (std::size_t i = 0; i < o.flags.size(); ++i) {
    const Setting& f = *o.flags[i];
    if (o.options[i]->count() == 0) continue;
    const std::string& text = o.values[i];
    switch (f.kind) {
      case FlagKind::integer: f.set(c, parse_integer_flag(f.flag, text, f.min, f.max)); break;
      case FlagKind::toggle: f.set(c, o.toggles[i] ? 1 : 0); break;
      case FlagKind::value: f.parse(c, text); break;
      case FlagKind::none:
      case FlagKind::output_file:
      case FlagKind::command: break;
    }
  }
}

// --compat v2: the v2 script's arms (pin_memory false / native + registered / native, not
// registered) and its loop (offload_param + offload_optimizer).
void apply_compat(const RunOptions& o, RunConfig& c) {
  if (c.compat == Compat::v2) {
    if (o.given("--arms")) {
      throw UsageError(
          "--arms with --compat v2: its arms are fixed (unpinned, pinned and, with "
          "--ablate-register, pinned-unregistered); drop --arms or use --compat v1");
    }
    c.arms = {Arm::pageable, Arm::registered};
    if (c.ablate_register) c.arms = {Arm::pageable, Arm::unregistered, Arm::registered};
    c.loop = Loop::offload_param;
  } else if (c.ablate_register) {
    throw UsageError(
        "--ablate-register belongs to --compat v2 (the v1 arms already compare "
        "registered with unregistered); add --compat v2 or drop it");
  }
}

// --model: the built-in config or config.json it names, --layers as an override; --hidden
// and --vocab would contradict the config and are refused.
void apply_model(const RunOptions& o, RunConfig& c) {
  if (!o.given("--model")) return;
  for (const char* flag : {"--hidden", "--vocab"}) {
    if (o.given(flag)) {
      throw UsageError(std::string(flag) + " with --model: the model's config.json sets it; " +
                       "drop " + flag + " (only --layers may override a --model config)");
    }
  }
  const std::int64_t layers = c.model.layers;
  c.model = resolve_model(c.model.name);
  if (o.given("--layers")) c.model.layers = layers;
}

CliCommand::Launcher parse_launcher(const std::string& launcher) {
  if (launcher != "fork" && launcher != "mpi") {
    throw UsageError("--launcher: unknown launcher '" + launcher + "'; use fork or mpi");
  }
  return launcher == "mpi" ? CliCommand::Launcher::mpi : CliCommand::Launcher::fork;
}

// The run: flags, defaults resolved, every check, then the output files.
CliCommand run_command(const RunOptions& o) {
  CliCommand cmd;
  RunConfig& c = cmd.run;
  apply_run_options(o, c);
  apply_model(o, c);
  apply_compat(o, c);
  if (c.device == DeviceKind::cpu && c.device_index != 0) {
    throw UsageError(
        fmt::format("--device-index {}: the cpu device has only index 0; leave "
                    "--device-index out with --device cpu",
                    c.device_index));
  }
  cmd.threads_given = o.given("--threads");
  cmd.gpus_given = o.given("--gpus");
  cmd.launcher = parse_launcher(o.value("--launcher"));
  // --fit without --offload-ratio searches the default ratios (kFitRatios); a given list, or
  // one ratio (1 included), is searched as given.
  if (c.fit && !o.given("--offload-ratio")) {
    c.offload_ratio_sweep.assign(std::begin(kFitRatios), std::end(kFitRatios));
    c.offload_ratio = c.offload_ratio_sweep.front();
  }
  if (cmd.launcher == CliCommand::Launcher::mpi && c.fit) {
    throw UsageError(
        "--fit runs many arm runs in fresh processes, which one mpirun (one arm) cannot: use "
        "--launcher fork, one node's GPUs (--gpus N)");
  }
  if (!cmd.threads_given) resolve_default_threads(c);
  c.left_to_device = {!o.given("--repeats"), !o.given("--warmup"), !o.given("--steps")};
  validate_run_config(c);
  if (o.on("--list-devices")) {
    cmd.kind = CliCommand::Kind::list_devices;
    return cmd;
  }
  for (const char* name : {"--trace", "--json", "--plot", "--csv"}) {
    if (!o.given(name)) continue;
    if (std::string_view(name) == "--plot") check_plot_path(o.value(name), name);
    check_output_path_writable(o.value(name), name);
    setting_of_flag(name).parse(c, o.value(name));
  }
  if (c.dry_run && (!c.plot_path.empty() || !c.csv_path.empty())) {
    throw UsageError(
        "--plot and --csv draw and list measurements, which --dry-run does not make; drop "
        "them, or drop --dry-run");
  }
  return cmd;
}

struct CompareOptionsCli {
  CLI::App* app = nullptr;
  std::vector<std::string> files;
  bool force = false;
  std::string json;
  CLI::Option* json_opt = nullptr;
};

void add_compare(CLI::App& app, CompareOptionsCli& o) {
  o.app =
      app.add_subcommand("compare", "saved results (--json files or captured stdout) side by side");
  o.app->add_option("files", o.files, "two or more result files")->type_name("FILE");
  o.app->add_flag("--force", o.force, "compare even when the workloads differ");
  o.json_opt =
      o.app->add_option("--json", o.json, "also write the comparison here")->type_name("FILE");
}

CliCommand compare_command(const CompareOptionsCli& o) {
  CliCommand cmd;
  cmd.kind = CliCommand::Kind::compare;
  if (o.files.size() < 2) {
    throw UsageError(
        fmt::format("compare needs at least two result files, got {}; give e.g. "
                    "compare cuda.json xpu.json",
                    o.files.size()));
  }
  cmd.compare.files = o.files;
  cmd.compare.force = o.force;
  if (o.json_opt->count() > 0) {
    check_output_path_writable(o.json, "compare --json");
    cmd.compare_json_path = o.json;
  }
  return cmd;
}

struct PlotOptionsCli {
  CLI::App* app = nullptr;
  std::vector<std::string> files;
  std::string out;
};

void add_plot(CLI::App& app, PlotOptionsCli& o) {
  o.app = app.add_subcommand("plot",
                             "draw saved results (--json files or captured stdout) as a "
                             "chart, side by side");
  o.app->add_option("files", o.files, "one or more result files")->type_name("FILE");
  o.app->add_option("--out", o.out, "the chart to write: .svg, or .png (with Cairo)")
      ->type_name("FILE");
}

CliCommand plot_command(const PlotOptionsCli& o) {
  CliCommand cmd;
  cmd.kind = CliCommand::Kind::plot;
  if (o.files.empty()) {
    throw UsageError(
        "plot needs at least one result file; give e.g. plot run.json --out "
        "chart.svg");
  }
  if (o.out.empty()) {
    throw UsageError(
        "plot needs --out FILE (.svg or .png); give e.g. plot run.json --out "
        "chart.svg");
  }
  check_plot_path(o.out, "plot --out");
  check_output_path_writable(o.out, "plot --out");
  cmd.compare.files = o.files;
  cmd.plot_path = o.out;
  return cmd;
}

struct AdamOptionsCli {
  CLI::App* app = nullptr;
  std::string params = "500000000";
  std::string threads = std::to_string(available_cpus());
  std::string repeats = "5";
  std::string json;
  CLI::Option* json_opt = nullptr;
};

void add_adam(CLI::App& app, AdamOptionsCli& o) {
  o.app = app.add_subcommand("adam", "CPU Adam throughput vs a same-run bandwidth probe");
  o.app->add_option("--params", o.params, "parameters")->capture_default_str()->type_name("N");
  o.app->add_option("--threads", o.threads, "threads")->capture_default_str()->type_name("N");
  o.app->add_option("--repeats", o.repeats, "timed repeats (medians reported)")
      ->capture_default_str()
      ->type_name("N");
  o.json_opt = o.app->add_option("--json", o.json, "also write the result here")->type_name("FILE");
}

CliCommand adam_command(const AdamOptionsCli& o) {
  CliCommand cmd;
  cmd.kind = CliCommand::Kind::adam;
  cmd.adam.params = parse_integer_flag("adam --params", o.params, 1, limits::elems);
  cmd.adam.threads =
      static_cast<int>(parse_integer_flag("adam --threads", o.threads, 1, limits::threads));
  cmd.adam.repeats =
      static_cast<int>(parse_integer_flag("adam --repeats", o.repeats, 1, limits::steps));
  validate_adam_options(cmd.adam);
  if (o.json_opt->count() > 0) {
    check_output_path_writable(o.json, "adam --json");
    cmd.adam_json_path = o.json;
  }
  return cmd;
}

// Run flags next to a subcommand would be ignored silently: refuse them instead.
void refuse_run_flags_next_to(const CLI::App& app, const CLI::App* sub) {
  if (!sub->parsed()) return;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() > 0) {
      throw UsageError(
          fmt::format("{} is a flag of the benchmark run, not of {}; see {} {} "
                      "--help",
                      opt->get_name(), sub->get_name(), kProgram, sub->get_name()));
    }
  }
}

// Edit distance (insertions, deletions, substitutions, adjacent swaps) of two flag names.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t sub = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + sub});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// The long names ("--hidden") of the options of `app` (its own, not its subcommands').
std::vector<std::string> flag_names(const CLI::App& app) {
  std::vector<std::string> out;
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& n : opt->get_lnames()) out.push_back("--" + n);
  }
  return out;
}

// The first argument that is neither a flag nor a flag's value: where a subcommand stands.
std::string first_word(const CLI::App& app, const std::vector<std::string>& args) {
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") return "";
    if (arg.rfind("-", 0) != 0) return arg;
    if (arg.find('=') != std::string::npos) continue;
    const CLI::Option* opt = app.get_option_no_throw(arg);
    if (opt != nullptr && opt->get_expected_min() > 0) ++i;  // its value
  }
  return "";
}

// "compar a.json b.json": CLI11 would call the words unexpected arguments; name the subcommand
// meant instead. "" when the first word is a subcommand or near none.
std::string misspelt_subcommand_text(const CLI::App& app, const std::vector<std::string>& args) {
  const std::string word = first_word(app, args);
  if (word.empty()) return "";
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == word) return "";
  }
  for (const CLI::App* sub : app.get_subcommands({})) {
    // Up to a third of the word may be wrong ("compar", "plto", "adma"), as for flags.
    if (edit_distance(word, sub->get_name()) * 3 <= word.size()) {
      return fmt::format("unknown subcommand {}; did you mean {}?", word, sub->get_name());
    }
  }
  return "";
}

}  // namespace

std::string misspelt_flag_text(const CLI::App& app, const std::vector<std::string>& args) {
  // The flags known where each argument stands: the run's, or a subcommand's after its name.
  std::vector<std::string> known = flag_names(app);
  std::string where;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") break;
    if (arg.rfind("--", 0) != 0) {
      for (const CLI::App* sub : app.get_subcommands({})) {
        if (sub->get_name() == arg && where.empty()) {
          known = flag_names(*sub);
          where = arg + " ";
        }
      }
      continue;
    }
    const std::string name = arg.substr(0, arg.find('='));
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    std::string best;
    std::size_t best_d = 0;
    for (const std::string& k : known) {
      const std::size_t dist = edit_distance(name, k);
      if (best.empty() || dist < best_d) {
        best = k;
        best_d = dist;
      }
    }
    // Up to a third of the name may be wrong ("--hiden", "--stpes", "--warmpu").
    if (!best.empty() && best_d * 3 <= name.size()) {
      return fmt::format("unknown flag {}{}; did you mean {}?", where, name, best);
    }
    return fmt::format("unknown flag {}{}; see {} {}--help", where, name, kProgram, where);
  }
  return "";
}

std::string version_text() {
  // The plugins are looked for next to the executable, as the registry does (or in
  // ZOB_PLUGIN_DIR).
  std::string dir;
  if (const char* env = std::getenv("ZOB_PLUGIN_DIR"); env != nullptr && *env != '\0') {
    dir = env;
  } else {
    std::string exe(4096, '\0');
    const ssize_t n = ::readlink("/proc/self/exe", exe.data(), exe.size() - 1);
    exe.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    const auto slash = exe.rfind('/');
    dir = slash == std::string::npos ? "." : exe.substr(0, slash);
  }
  std::string backends;
  for (const BackendInfo& b : kBackends) {
    if (!backends.empty()) backends += ", ";
    if (b.plugin == nullptr) {
      backends += std::string(b.name) + " (built in)";
    } else {
      const bool present = ::access((dir + "/" + b.plugin).c_str(), R_OK) == 0;
      backends += fmt::format("{} ({})", b.name, present ? "plugin present" : "not built");
    }
  }
  return fmt::format("{} {} (commit {}, {} build)\nbackends: {}\ncharts: svg{}", kProgram,
                     ZOB_VERSION, build_git_commit(), ZOB_BUILD_TYPE, backends,
                     plot_png_available() ? ", png (Cairo)" : " (no png: built without Cairo)");
}

void validate_adam_options(const AdamBenchOptions& o) {
  auto in = [](const char* flag, std::int64_t v, std::int64_t max) {
    if (v < 1 || v > max) {
      throw UsageError(
          fmt::format("adam {} {} is out of range; give {}", flag, v, range_text(1, max)));
    }
  };
  in("--params", o.params, limits::elems);
  in("--threads", o.threads, limits::threads);
  in("--repeats", o.repeats, limits::steps);
}

void check_output_path_writable(const std::string& path, const std::string& flag) {
  check_output_path(path, flag);
}

CliCommand parse_command_line(const std::vector<std::string>& args) {
  CLI::App app{
      "Measures what registering host memory with the accelerator does to a ZeRO-3 "
      "CPU-offload training step.",
      kProgram};
  app.set_version_flag("--version", version_text());
  app.require_subcommand(0, 1);
  // A flag given twice takes its last value, as argparse (the upstream scripts' parser) does:
  // a command line built by appending to a default one keeps working. Set before any option
  // is added (each copies the defaults; the subcommands copy them from the app).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  RunOptions run;
  add_run_options(app, run);
  CompareOptionsCli compare;
  add_compare(app, compare);
  AdamOptionsCli adam;
  add_adam(app, adam);
  PlotOptionsCli plot;
  add_plot(app, plot);

  std::vector<std::string> reversed(args.rbegin(), args.rend() - (args.empty() ? 0 : 1));
  try {
    app.parse(reversed);
  } catch (const CLI::Success& e) {  // --help / --version
    CliCommand cmd;
    cmd.kind = CliCommand::Kind::exit_now;
    cmd.exit_code = app.exit(e, std::cout, std::cerr);
    return cmd;
  } catch (const CLI::ParseError& e) {
    // A misspelt subcommand or flag gets the nearest known one, in this tool's words, not
    // CLI11's.
    if (const std::string typo = misspelt_subcommand_text(app, args); !typo.empty()) {
      throw UsageError(typo);
    }
    if (const std::string typo = misspelt_flag_text(app, args); !typo.empty()) {
      throw UsageError(typo);
    }
    throw UsageError(one_line(e.what()) + "; see " + kProgram + " --help");
  }
  refuse_run_flags_next_to(app, adam.app);
  refuse_run_flags_next_to(app, compare.app);
  refuse_run_flags_next_to(app, plot.app);
  if (plot.app->parsed()) return plot_command(plot);
  if (compare.app->parsed()) return compare_command(compare);
  if (adam.app->parsed()) return adam_command(adam);
  return run_command(run);
}

}  // namespace zob
