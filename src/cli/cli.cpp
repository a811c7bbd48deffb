#include "cli/cli.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fmt/format.h>
#include <iostream>
#include <limits>
#include <set>

#include "zob/cpu_affinity.hpp"
#include "zob/errors.hpp"
#include "zob/thread_pool.hpp"

namespace zob {

namespace {

constexpr const char* kProgram = "zero3-offload-bench";

// Ceilings far above any real workload; they keep every derived size well inside 64 bits and
// turn a typo like --hidden 20480000 into a clear refusal instead of an allocation failure.
constexpr std::int64_t kMaxHidden = 1 << 20;
constexpr std::int64_t kMaxLayers = 100'000;
constexpr std::int64_t kMaxBatch = 1 << 20;
constexpr std::int64_t kMaxSeq = 1 << 24;
constexpr std::int64_t kMaxVocab = std::numeric_limits<std::int32_t>::max();  // int32 token ids
constexpr std::int64_t kMaxSteps = 1'000'000;
constexpr std::int64_t kMaxThreads = 4096;
constexpr std::int64_t kMaxElems = std::int64_t{1} << 50;
constexpr double kMaxTimeoutS = 1e7;
constexpr std::int64_t kMaxGpus = 64;  // the shared-memory collectives' rank limit
constexpr std::int64_t kMaxRepeats = 10'000;

std::string range_text(std::int64_t min, std::int64_t max) {
  return fmt::format("a whole number from {} to {}", min, max);
}

// a * b, or nullopt when it does not fit in 64 bits.
std::optional<std::uint64_t> mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
std::optional<std::uint64_t> add(std::optional<std::uint64_t> a, std::optional<std::uint64_t> b) {
  std::uint64_t r = 0;
  if (!a || !b || __builtin_add_overflow(*a, *b, &r)) return std::nullopt;
  return r;
}
std::optional<std::uint64_t> mul(std::optional<std::uint64_t> a, std::uint64_t b) {
  return a ? mul(*a, b) : std::nullopt;
}

std::vector<Arm> parse_arm_list(const std::string& text) {
  std::vector<Arm> arms;
  std::set<std::string> seen;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    const std::string name = text.substr(start, comma == std::string::npos ? std::string::npos
                                                                            : comma - start);
    if (name.empty()) {
      throw UsageError("--arms '" + text + "' has an empty arm name; give a comma-separated "
                       "list such as registered,unregistered");
    }
    Arm arm{};
    try {
      arm = parse_arm(name);
    } catch (const UsageError&) {
      throw UsageError("--arms: unknown arm '" + name +
                       "'; use registered, unregistered, pageable or hostalloc");
    }
    if (!seen.insert(name).second) {
      throw UsageError("--arms: arm '" + name + "' is listed twice; list each arm once");
    }
    arms.push_back(arm);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return arms;
}

// "a,b,c" of whole numbers, each in [min, max]; a value given twice is refused (it would run
// the same configuration twice).
std::vector<std::int64_t> parse_integer_list(const std::string& flag, const std::string& text,
                                             std::int64_t min, std::int64_t max) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos
                                                                            : comma - start);
    if (item.empty()) {
      throw UsageError(fmt::format("{} '{}' has an empty value; give one number or a "
                                   "comma-separated list such as 16777216,67108864", flag, text));
    }
    const std::int64_t v = parse_integer_flag(flag, item, min, max);
    for (std::int64_t seen : out) {
      if (seen == v) {
        throw UsageError(fmt::format("{} lists {} twice; list each value once", flag, v));
      }
    }
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string one_line(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

}  // namespace

std::int64_t parse_integer_flag(const std::string& flag, const std::string& text,
                                std::int64_t min, std::int64_t max) {
  const char* s = text.c_str();
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s, &end, 10);
  const bool digits = !text.empty() && end == s + text.size() &&
                      text.find_first_not_of("+-0123456789") == std::string::npos;
  if (!digits) {
    throw UsageError(fmt::format("{} '{}' is not a whole number; give {}", flag, text,
                                 range_text(min, max)));
  }
  if (errno == ERANGE || v < min || v > max) {
    throw UsageError(fmt::format("{} {} is out of range; give {}", flag, text,
                                 range_text(min, max)));
  }
  return v;
}

std::uint64_t parse_unsigned_flag(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos ||
      end != text.c_str() + text.size()) {
    throw UsageError(fmt::format("{} '{}' is not a whole number; give one from 0 to {}", flag,
                                 text, std::numeric_limits<std::uint64_t>::max()));
  }
  if (errno == ERANGE) {
    throw UsageError(fmt::format("{} {} is out of range; give one from 0 to {}", flag, text,
                                 std::numeric_limits<std::uint64_t>::max()));
  }
  return v;
}

double parse_seconds_flag(const std::string& flag, const std::string& text, double max) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE ||
      !std::isfinite(v) || text.find_first_of("xXpPnN") != std::string::npos) {
    throw UsageError(fmt::format("{} '{}' is not a number of seconds; give e.g. 30 or 0.5 "
                                 "(0 = no limit)", flag, text));
  }
  if (v < 0 || v > max) {
    throw UsageError(fmt::format("{} {} is out of range; give 0 (no limit) to {:g} seconds",
                                 flag, text, max));
  }
  return v;
}

void resolve_default_threads(RunConfig& c) {
  if (c.threads != 0 || c.gpus != 1) return;  // several ranks: each sizes its own pool
  // One Adam thread per --cpu-affinity CPU, else per CPU this process may use.
  c.threads = c.cpu_affinity.empty() ? available_cpus() : static_cast<int>(c.cpu_affinity.size());
}

void validate_run_config(const RunConfig& c) {
  auto in = [](const char* flag, std::int64_t v, std::int64_t min, std::int64_t max) {
    if (v < min || v > max) {
      throw UsageError(fmt::format("{} {} is out of range; give {}", flag, v,
                                   range_text(min, max)));
    }
  };
  in("--hidden", c.model.hidden, 1, kMaxHidden);
  in("--layers", c.model.layers, 1, kMaxLayers);
  in("--vocab", c.model.vocab, 1, kMaxVocab);
  in("--batch", c.batch, 1, kMaxBatch);
  in("--seq", c.seq, 1, kMaxSeq);
  in("--steps", c.steps, 1, kMaxSteps);
  in("--warmup", c.warmup, 0, kMaxSteps);
  in("--device-index", c.device_index, 0, 1023);
  in("--chunk-elems", c.chunk_elems, 1, kMaxElems);
  in("--sub-group-size", c.sub_group_size, 1, kMaxElems);
  for (std::int64_t v : c.chunk_elems_sweep) in("--chunk-elems", v, 1, kMaxElems);
  for (std::int64_t v : c.sub_group_size_sweep) in("--sub-group-size", v, 1, kMaxElems);
  if (!c.chunk_elems_sweep.empty() && c.chunk_elems_sweep.front() != c.chunk_elems) {
    throw UsageError("--chunk-elems: the sweep's first value must be the configured one");
  }
  if (!c.sub_group_size_sweep.empty() && c.sub_group_size_sweep.front() != c.sub_group_size) {
    throw UsageError("--sub-group-size: the sweep's first value must be the configured one");
  }
  in("--gpus", c.gpus, 0, kMaxGpus);  // 0: "all", resolved by the driver
  // 0 with several ranks: one thread per CPU of the rank's slice (chosen by each rank).
  in("--threads", c.threads, c.gpus == 1 ? 1 : 0, kMaxThreads);
  if (c.gpus != 1 && c.loop == Loop::offload_param) {
    throw UsageError("--gpus with --offload-param is not implemented yet: several ranks run the "
                     "default copy-back loop; drop --offload-param or use --gpus 1");
  }
  if (c.gpus != 1 && c.schedule != Schedule::stock) {
    throw UsageError(std::string("--gpus with --schedule ") + to_string(c.schedule) +
                     " is not implemented yet: several ranks run the stock schedule; use "
                     "--schedule stock or --gpus 1");
  }
  if (c.gpus == 1) {
    validate_cpu_affinity(c.cpu_affinity, c.threads, allowed_cpu_list());
  } else {  // each rank takes its part of the list (choose_rank_placement)
    validate_rank_cpu_affinity(c.cpu_affinity, c.gpus, allowed_cpu_list());
  }
  in("--repeats", c.repeats, 1, kMaxRepeats);
  if (!(c.timeout_s >= 0) || !std::isfinite(c.timeout_s) || c.timeout_s > kMaxTimeoutS) {
    throw UsageError(fmt::format("--timeout {} is out of range; give 0 (no limit) to {:g} "
                                 "seconds", c.timeout_s, kMaxTimeoutS));
  }
  if (c.arms.empty()) {
    throw UsageError("--arms is empty; give e.g. registered,unregistered");
  }
  std::set<Arm> seen(c.arms.begin(), c.arms.end());
  if (seen.size() != c.arms.size()) {
    throw UsageError("--arms lists an arm twice; list each arm once");
  }

  const auto V = static_cast<std::uint64_t>(c.model.vocab);
  const auto h = static_cast<std::uint64_t>(c.model.hidden);
  const auto n = static_cast<std::uint64_t>(c.model.layers);
  const auto tokens = mul(static_cast<std::uint64_t>(c.batch), static_cast<std::uint64_t>(c.seq));
  const std::string shape = fmt::format("--hidden {} --layers {} --vocab {} --batch {} --seq {}",
                                        h, n, V, c.batch, c.seq);
  // params = 2*V*h + n*(8*h*h + 5*h)
  const auto per_layer = add(mul(mul(h, h), 8), mul(h, 5));
  const auto params = add(mul(mul(V, h), 2), mul(per_layer, n));
  if (!params || *params > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    throw UsageError("the model " + shape + " has more parameters than fit in 64 bits; "
                     "choose a smaller --hidden, --layers or --vocab");
  }
  // 28 B/param of Adam traffic is the largest per-parameter byte count any part computes.
  if (!mul(*params, 28)) {
    throw UsageError(fmt::format("the model {} has {} parameters; its byte counts (28 B/param) "
                                 "overflow 64 bits; choose a smaller model", shape, *params));
  }
  if (!tokens || *tokens > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max())) {
    throw UsageError(fmt::format("--batch {} x --seq {} tokens exceeds {} (token positions are "
                                 "32-bit); choose a smaller batch or seq", c.batch, c.seq,
                                 std::numeric_limits<std::int32_t>::max()));
  }
  // Activations: logits [T, V] and the fc1 outputs [T, 4h] per layer, bf16, plus fp32 copies.
  const auto activations = add(mul(mul(*tokens, V), 4), mul(mul(mul(*tokens, h), 16), n + 1));
  if (!activations || !mul(*activations, 4)) {
    throw UsageError(fmt::format("the activations of {} overflow 64-bit byte counts; choose a "
                                 "smaller batch, seq, hidden or vocab", shape));
  }
  if (!mul(static_cast<std::uint64_t>(c.chunk_elems), 4)) {
    throw UsageError("--chunk-elems is too large; give at most 2**50");
  }
}

void validate_adam_options(const AdamBenchOptions& o) {
  if (o.params < 1 || o.params > kMaxElems) {
    throw UsageError(fmt::format("adam --params {} is out of range; give {}", o.params,
                                 range_text(1, kMaxElems)));
  }
  if (o.threads < 1 || o.threads > kMaxThreads) {
    throw UsageError(fmt::format("adam --threads {} is out of range; give {}", o.threads,
                                 range_text(1, kMaxThreads)));
  }
  if (o.repeats < 1 || o.repeats > kMaxSteps) {
    throw UsageError(fmt::format("adam --repeats {} is out of range; give {}", o.repeats,
                                 range_text(1, kMaxSteps)));
  }
}

void check_output_path_writable(const std::string& path, const std::string& flag) {
  if (path.empty()) {
    throw UsageError(flag + " needs a file name; give e.g. " + flag + " result.json");
  }
  struct stat st {};
  const bool existed = ::stat(path.c_str(), &st) == 0;
  if (existed && S_ISDIR(st.st_mode)) {
    throw UsageError(flag + " " + path + " is a directory; give a file name");
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC | (existed ? 0 : O_CREAT | O_EXCL),
                        0644);
  if (fd < 0) {
    throw UsageError(fmt::format("{} {} cannot be written ({}); choose a writable folder", flag,
                                 path, std::strerror(errno)));
  }
  ::close(fd);
  if (!existed) ::unlink(path.c_str());
}

CliCommand parse_command_line(const std::vector<std::string>& args) {
  CLI::App app{"Measures what registering host memory with the accelerator does to a ZeRO-3 "
               "CPU-offload training step.",
               kProgram};
  app.set_version_flag("--version", std::string(kProgram) + " " + ZOB_VERSION);
  app.require_subcommand(0, 1);

  const RunConfig defaults;
  std::string hidden = std::to_string(defaults.model.hidden);
  std::string layers = std::to_string(defaults.model.layers);
  std::string batch = std::to_string(defaults.batch);
  std::string seq = std::to_string(defaults.seq);
  std::string steps = std::to_string(defaults.steps);
  std::string warmup = std::to_string(defaults.warmup);
  std::string vocab = std::to_string(defaults.model.vocab);
  std::string device = "auto";
  std::string device_index = "0";
  std::string arms = "registered,unregistered";
  bool offload_param = false;
  std::string chunk = std::to_string(defaults.chunk_elems);
  std::string sub_group = std::to_string(defaults.sub_group_size);
  std::string threads = std::to_string(available_cpus());
  std::string seed = std::to_string(defaults.seed);
  std::string json_path;
  bool json_given = false;
  std::string timeout = "0";
  std::string gpus = "1";
  std::string schedule = "deepspeed";
  std::string cpu_affinity;
  std::string repeats = "1";
  std::string trace_path;
  bool skip_preflight = false;
  bool list_devices = false;
  std::string launcher = "fork";

  app.add_option("--hidden", hidden, "hidden size h")->capture_default_str()->type_name("N");
  app.add_option("--layers", layers, "number of blocks")->capture_default_str()->type_name("N");
  app.add_option("--batch", batch, "batch size")->capture_default_str()->type_name("N");
  app.add_option("--seq", seq, "sequence length")->capture_default_str()->type_name("N");
  app.add_option("--steps", steps, "timed steps per arm (>= 1)")->capture_default_str()->type_name("N");
  app.add_option("--warmup", warmup, "untimed steps before them (>= 0)")->capture_default_str()->type_name("N");
  app.add_option("--vocab", vocab, "vocabulary size")->capture_default_str()->type_name("N");
  app.add_option("--device", device, "auto|cpu|cuda|xpu")->capture_default_str()->type_name("NAME");
  app.add_option("--device-index", device_index, "which device of the backend")
      ->capture_default_str()->type_name("N");
  app.add_option("--arms", arms, "comma-separated: registered,unregistered,pageable,hostalloc")
      ->capture_default_str()->type_name("LIST");
  app.add_flag("--offload-param", offload_param, "ZeRO-3 offload_param loop (params on host)");
  app.add_option("--chunk-elems", chunk, "elements per copy-back piece (a comma list sweeps)")
      ->capture_default_str()->type_name("N[,N...]");
  app.add_option("--sub-group-size", sub_group, "elements per Adam sub-group (a comma list sweeps)")
      ->capture_default_str()->type_name("N[,N...]");
  auto* schedule_opt =
      app.add_option("--schedule", schedule,
                     "deepspeed|stock|overlap: the step's copies, waits and Adam as DeepSpeed "
                     "0.19.8 runs them, or the what-ifs: the algorithm alone, Adam overlapped "
                     "(default deepspeed; stock with several ranks)")
          ->capture_default_str()->type_name("NAME");
  auto* affinity_opt = app.add_option("--cpu-affinity", cpu_affinity,
                 "CPUs of the Adam threads in order, e.g. 0-7,16-23 (default: the device's "
                 "NUMA node); with --gpus N rank r takes part r of N")->type_name("LIST");
  auto* threads_opt = app.add_option("--threads", threads, "CPU Adam threads (default: CPUs "
                                     "available, or as many as --cpu-affinity lists; with "
                                     "--gpus N, per rank: the CPUs of its slice)")
      ->capture_default_str()->type_name("N");
  app.add_option("--seed", seed, "seed of the initial weights and token ids")
      ->capture_default_str()->type_name("N");
  auto* json_opt = app.add_option("--json", json_path, "also write DRIVERRESULT (pretty) here")
                       ->type_name("FILE");
  app.add_option("--timeout", timeout, "seconds per arm, 0 = no limit")->capture_default_str()->type_name("SECONDS");
  app.add_option("--gpus", gpus, "ranks per arm, one per device (ZeRO-3 partitioned), or 'all'")
      ->capture_default_str()->type_name("N|all");
  app.add_option("--repeats", repeats, "rounds of all arms, interleaved, each a fresh process")
      ->capture_default_str()->type_name("N");
  auto* trace_opt = app.add_option("--trace", trace_path,
                                   "write a Chrome trace (Perfetto) of every arm run here")
                        ->type_name("FILE");
  app.add_flag("--skip-preflight", skip_preflight,
               "skip the memory / memlock checks made before any arm starts");
  auto* gpus_opt = app.get_option("--gpus");
  app.add_option("--launcher", launcher, "fork|mpi: fork the --gpus ranks here, or be one rank "
                 "started by mpirun (one arm per mpirun; see README)")
      ->capture_default_str()->type_name("NAME");
  app.add_flag("--list-devices", list_devices,
               "probe cpu, cuda and xpu and say what is available (or why not)");

  CLI::App* compare = app.add_subcommand(
      "compare", "saved results (--json files or captured stdout) side by side");
  std::vector<std::string> compare_files;
  bool compare_force = false;
  std::string compare_json;
  compare->add_option("files", compare_files, "two or more result files")->type_name("FILE");
  compare->add_flag("--force", compare_force, "compare even when the workloads differ");
  auto* compare_json_opt =
      compare->add_option("--json", compare_json, "also write the comparison here")
          ->type_name("FILE");

  CLI::App* adam = app.add_subcommand("adam", "CPU Adam throughput vs a same-run bandwidth probe");
  std::string adam_params = "500000000";
  std::string adam_threads = threads;
  std::string adam_repeats = "5";
  std::string adam_json;
  adam->add_option("--params", adam_params, "parameters")->capture_default_str()->type_name("N");
  adam->add_option("--threads", adam_threads, "threads")->capture_default_str()->type_name("N");
  adam->add_option("--repeats", adam_repeats, "timed repeats (medians reported)")
      ->capture_default_str()->type_name("N");
  auto* adam_json_opt =
      adam->add_option("--json", adam_json, "also write the result here")->type_name("FILE");

  std::vector<std::string> reversed(args.rbegin(), args.rend() - (args.empty() ? 0 : 1));
  try {
    app.parse(reversed);
  } catch (const CLI::Success& e) {  // --help / --version
    CliCommand cmd;
    cmd.kind = CliCommand::Kind::exit_now;
    cmd.exit_code = app.exit(e, std::cout, std::cerr);
    return cmd;
  } catch (const CLI::ParseError& e) {
    throw UsageError(one_line(e.what()) + "; see " + kProgram + " --help");
  }
  json_given = json_opt->count() > 0;

  // Run flags next to a subcommand would be ignored silently: refuse them instead.
  for (const CLI::App* sub : {adam, compare}) {
    if (!sub->parsed()) continue;
    for (const CLI::Option* opt : app.get_options()) {
      if (opt->count() > 0) {
        throw UsageError(fmt::format("{} is a flag of the benchmark run, not of {}; see {} {} "
                                     "--help", opt->get_name(), sub->get_name(), kProgram,
                                     sub->get_name()));
      }
    }
  }

  CliCommand cmd;
  if (compare->parsed()) {
    cmd.kind = CliCommand::Kind::compare;
    if (compare_files.size() < 2) {
      throw UsageError(fmt::format("compare needs at least two result files, got {}; give e.g. "
                                   "compare cuda.json xpu.json", compare_files.size()));
    }
    cmd.compare.files = compare_files;
    cmd.compare.force = compare_force;
    if (compare_json_opt->count() > 0) {
      check_output_path_writable(compare_json, "compare --json");
      cmd.compare_json_path = compare_json;
    }
    return cmd;
  }
  if (adam->parsed()) {
    cmd.kind = CliCommand::Kind::adam;
    cmd.adam.params = parse_integer_flag("adam --params", adam_params, 1, kMaxElems);
    cmd.adam.threads =
        static_cast<int>(parse_integer_flag("adam --threads", adam_threads, 1, kMaxThreads));
    cmd.adam.repeats =
        static_cast<int>(parse_integer_flag("adam --repeats", adam_repeats, 1, kMaxSteps));
    validate_adam_options(cmd.adam);
    if (adam_json_opt->count() > 0) {
      check_output_path_writable(adam_json, "adam --json");
      cmd.adam_json_path = adam_json;
    }
    return cmd;
  }

  RunConfig& c = cmd.run;
  c.model.hidden = parse_integer_flag("--hidden", hidden, 1, kMaxHidden);
  c.model.layers = parse_integer_flag("--layers", layers, 1, kMaxLayers);
  c.model.vocab = parse_integer_flag("--vocab", vocab, 1, kMaxVocab);
  c.batch = parse_integer_flag("--batch", batch, 1, kMaxBatch);
  c.seq = parse_integer_flag("--seq", seq, 1, kMaxSeq);
  c.steps = static_cast<int>(parse_integer_flag("--steps", steps, 1, kMaxSteps));
  c.warmup = static_cast<int>(parse_integer_flag("--warmup", warmup, 0, kMaxSteps));
  try {
    c.device = parse_device_kind(device);
  } catch (const UsageError&) {
    throw UsageError("--device: unknown device '" + device + "'; use auto, cpu, cuda or xpu");
  }
  c.device_index = static_cast<int>(parse_integer_flag("--device-index", device_index, 0, 1023));
  if (c.device == DeviceKind::cpu && c.device_index != 0) {
    throw UsageError(fmt::format("--device-index {}: the cpu device has only index 0; leave "
                                 "--device-index out with --device cpu", c.device_index));
  }
  c.arms = parse_arm_list(arms);
  c.loop = offload_param ? Loop::offload_param : Loop::copy_back;
  c.threads = static_cast<int>(parse_integer_flag("--threads", threads, 1, kMaxThreads));
  const auto chunks = parse_integer_list("--chunk-elems", chunk, 1, kMaxElems);
  const auto groups = parse_integer_list("--sub-group-size", sub_group, 1, kMaxElems);
  c.chunk_elems = chunks.front();
  c.sub_group_size = groups.front();
  if (chunks.size() > 1) c.chunk_elems_sweep = chunks;
  if (groups.size() > 1) c.sub_group_size_sweep = groups;
  try {
    c.schedule = parse_schedule(schedule);
  } catch (const UsageError&) {
    throw UsageError("--schedule: unknown schedule '" + schedule + "'; use stock, overlap or deepspeed");
  }
  if (affinity_opt->count() > 0) c.cpu_affinity = parse_cpu_list(cpu_affinity, "--cpu-affinity");
  c.seed = parse_unsigned_flag("--seed", seed);
  c.timeout_s = parse_seconds_flag("--timeout", timeout, kMaxTimeoutS);
  c.gpus = gpus == "all" ? 0 : static_cast<int>(parse_integer_flag("--gpus", gpus, 1, kMaxGpus));
  if ((c.gpus != 1 || launcher == "mpi") && schedule_opt->count() == 0) {
    // The deepspeed schedule is single-rank for now: the documented default of several ranks
    // is stock (--help, docs/schedules.md; the report's "# step:" line names the one that ran).
    c.schedule = Schedule::stock;
  }
  if (threads_opt->count() == 0) {
    c.threads = 0;
    resolve_default_threads(c);
  }
  c.repeats = static_cast<int>(parse_integer_flag("--repeats", repeats, 1, kMaxRepeats));
  if (launcher != "fork" && launcher != "mpi") {
    throw UsageError("--launcher: unknown launcher '" + launcher + "'; use fork or mpi");
  }
  cmd.launcher = launcher == "mpi" ? CliCommand::Launcher::mpi : CliCommand::Launcher::fork;
  cmd.gpus_given = gpus_opt->count() > 0;
  cmd.threads_given = threads_opt->count() > 0;
  c.skip_preflight = skip_preflight;
  validate_run_config(c);
  if (list_devices) {
    cmd.kind = CliCommand::Kind::list_devices;
    return cmd;
  }
  if (trace_opt->count() > 0) {
    check_output_path_writable(trace_path, "--trace");
    c.trace_path = trace_path;
  }
  if (json_given) {
    check_output_path_writable(json_path, "--json");
    c.json_path = json_path;
  }
  return cmd;
}

}  // namespace zob
