// The run flags' table (zob/run_flags.hpp) and the strict parsing of flag values.
#include "zob/run_flags.hpp"

#include <fmt/format.h>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>
#include <stdexcept>

#include "zob/backends.hpp"
#include "zob/cpu_affinity.hpp"
#include "zob/errors.hpp"
#include "zob/text.hpp"
#include "zob/thread_pool.hpp"

namespace zob {

namespace {

std::vector<Arm> parse_arm_list(const std::string& text) {
  std::vector<Arm> arms;
  std::set<std::string> seen;
  for (const std::string& name : split_list(text)) {
    if (name.empty()) {
      throw UsageError("--arms '" + text +
                       "' has an empty arm name; give a comma-separated "
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
  }
  return arms;
}

// --chunk-elems / --sub-group-size: the first value, and every value when the list sweeps.
void parse_sweep(const char* flag, const std::string& text, std::int64_t& first,
                 std::vector<std::int64_t>& sweep) {
  const auto v = parse_integer_list(flag, text, 1, limits::elems);
  first = v.front();
  if (v.size() > 1) sweep = v;
}

template <typename T>
std::string number(T v) {
  return std::to_string(v);
}

const RunConfig kDefaults{};

// --repeats / --warmup / --steps: the CPU device's default (RunConfig's) and the accelerators'
// (kAcceleratorRounds, applied once the probe has named the device).
std::string device_default(int cpu, int accelerator) {
  return fmt::format("{} on cpu, {} on cuda/xpu", cpu, accelerator);
}

// The table. Help texts and value names are those --help prints; doc_default is the
// "default" column of docs/usage.md.
const RunFlag kRunFlags[] = {
    {"--model", "NAME|PATH",
     "a decoder transformer (docs/models.md): a built-in config such as Qwen2.5-7B or "
     "meta-llama/Llama-3.1-8B, or a config.json / a folder holding one; --layers N then "
     "overrides its layer count; default the synthetic model",
     "synthetic", FlagKind::value, 0, 0, 0, nullptr, nullptr,
     // The name only: the CLI resolves it once every flag is in (it needs --layers).
     [](RunConfig& c, const std::string& text) {
       if (text.empty()) throw UsageError("--model: empty; give a built-in name or a path");
       c.model.name = text;
     },
     nullptr},
    {"--hidden", "N", "hidden size h", "2048", FlagKind::integer, 1, limits::hidden, 1,
     [](const RunConfig& c) -> std::int64_t { return c.model.hidden; },
     [](RunConfig& c, std::int64_t v) { c.model.hidden = v; }, nullptr,
     [] { return number(kDefaults.model.hidden); }},
    {"--layers", "N", "number of blocks", "12", FlagKind::integer, 1, limits::layers, 1,
     [](const RunConfig& c) -> std::int64_t { return c.model.layers; },
     [](RunConfig& c, std::int64_t v) { c.model.layers = v; }, nullptr,
     [] { return number(kDefaults.model.layers); }},
    {"--batch", "N", "batch size", "4", FlagKind::integer, 1, limits::batch, 1,
     [](const RunConfig& c) -> std::int64_t { return c.batch; },
     [](RunConfig& c, std::int64_t v) { c.batch = v; }, nullptr,
     [] { return number(kDefaults.batch); }},
    {"--seq", "N", "sequence length", "128", FlagKind::integer, 1, limits::seq, 1,
     [](const RunConfig& c) -> std::int64_t { return c.seq; },
     [](RunConfig& c, std::int64_t v) { c.seq = v; }, nullptr,
     [] { return number(kDefaults.seq); }},
    {"--steps", "N", "timed steps per arm run (>= 1)",
     device_default(kDefaults.steps, kAcceleratorRounds.steps), FlagKind::integer, 1, limits::steps,
     1, [](const RunConfig& c) -> std::int64_t { return c.steps; },
     [](RunConfig& c, std::int64_t v) { c.steps = static_cast<int>(v); }, nullptr,
     [] { return device_default(kDefaults.steps, kAcceleratorRounds.steps); }},
    {"--warmup", "N", "untimed steps before them (>= 0)",
     device_default(kDefaults.warmup, kAcceleratorRounds.warmup), FlagKind::integer, 0,
     limits::steps, 0, [](const RunConfig& c) -> std::int64_t { return c.warmup; },
     [](RunConfig& c, std::int64_t v) { c.warmup = static_cast<int>(v); }, nullptr,
     [] { return device_default(kDefaults.warmup, kAcceleratorRounds.warmup); }},
    {"--vocab", "N", "vocabulary size", "32000", FlagKind::integer, 1, limits::vocab, 1,
     [](const RunConfig& c) -> std::int64_t { return c.model.vocab; },
     [](RunConfig& c, std::int64_t v) { c.model.vocab = v; }, nullptr,
     [] { return number(kDefaults.model.vocab); }},
    {"--device", "NAME", backend_names("|", true), "auto", FlagKind::value, 0, 0, 0, nullptr,
     nullptr,
     [](RunConfig& c, const std::string& text) {
       try {
         c.device = parse_device_kind(text);
       } catch (const UsageError&) {
         throw UsageError("--device: unknown device '" + text + "'; use " +
                          backend_names("or", true));
       }
     },
     [] { return std::string(to_string(kDefaults.device)); }},
    {"--device-index", "N", "which device of the backend", "0", FlagKind::integer, 0,
     limits::device_index, 0, [](const RunConfig& c) -> std::int64_t { return c.device_index; },
     [](RunConfig& c, std::int64_t v) { c.device_index = static_cast<int>(v); }, nullptr,
     [] { return number(kDefaults.device_index); }},
    {"--arms", "LIST", "comma-separated: registered,unregistered,pageable,hostalloc",
     "registered,unregistered", FlagKind::value, 0, 0, 0, nullptr, nullptr,
     [](RunConfig& c, const std::string& text) { c.arms = parse_arm_list(text); },
     [] { return std::string("registered,unregistered"); }},
    {"--offload-param", "", "ZeRO-3 offload_param loop (params on host)", "off", FlagKind::toggle,
     0, 0, 0, nullptr,
     [](RunConfig& c, std::int64_t v) { c.loop = v ? Loop::offload_param : Loop::copy_back; },
     nullptr, nullptr},
    {"--compat", "VERSION",
     "v1|v2: output of the upstream script's version: v1 registered / unregistered; v2 "
     "unpinned / pinned, 'pinning speedup', the offload_param loop",
     "v1", FlagKind::value, 0, 0, 0, nullptr, nullptr,
     [](RunConfig& c, const std::string& text) { c.compat = parse_compat(text); },
     [] { return std::string(to_string(kDefaults.compat)); }},
    {"--dry-run", "",
     "validate, print the plan (parameters, modules, host and device bytes per arm) and the "
     "pre-flight verdict; allocate nothing (exit 0 fits, 2 refused)",
     "off", FlagKind::toggle, 0, 0, 0, nullptr,
     [](RunConfig& c, std::int64_t v) { c.dry_run = v != 0; }, nullptr, nullptr},
    {"--ablate-register", "",
     "with --compat v2: also the pinned-unregistered arm (as the v2 script's flag)", "off",
     FlagKind::toggle, 0, 0, 0, nullptr,
     [](RunConfig& c, std::int64_t v) { c.ablate_register = v != 0; }, nullptr, nullptr},
    {"--chunk-elems", "N[,N...]", "elements per copy-back piece (a comma list sweeps)",
     "67108864 (2^26)", FlagKind::value, 1, limits::elems, 1,
     [](const RunConfig& c) -> std::int64_t { return c.chunk_elems; }, nullptr,
     [](RunConfig& c, const std::string& text) {
       parse_sweep("--chunk-elems", text, c.chunk_elems, c.chunk_elems_sweep);
     },
     [] { return number(kDefaults.chunk_elems); }},
    {"--sub-group-size", "N[,N...]", "elements per Adam sub-group (a comma list sweeps)",
     "1000000000", FlagKind::value, 1, limits::elems, 1,
     [](const RunConfig& c) -> std::int64_t { return c.sub_group_size; }, nullptr,
     [](RunConfig& c, const std::string& text) {
       parse_sweep("--sub-group-size", text, c.sub_group_size, c.sub_group_size_sweep);
     },
     [] { return number(kDefaults.sub_group_size); }},
    {"--schedule", "NAME",
     "deepspeed|stock|overlap: the step's copies, waits and Adam as DeepSpeed 0.19.8 runs them, "
     "or the what-ifs: the algorithm alone, Adam overlapped (default deepspeed, for any --gpus)",
     "deepspeed", FlagKind::value, 0, 0, 0, nullptr, nullptr,
     [](RunConfig& c, const std::string& text) {
       try {
         c.schedule = parse_schedule(text);
       } catch (const UsageError&) {
         throw UsageError("--schedule: unknown schedule '" + text + "'; use " +
                          schedule_names("or"));
       }
     },
     // Not RunConfig's default (stock): the CLI picks deepspeed for one rank (cli.cpp).
     [] { return std::string(to_string(Schedule::deepspeed)); }},
    {"--cpu-affinity", "LIST",
     "CPUs of the Adam threads in order, e.g. 0-7,16-23 (default: the device's NUMA node); "
     "with --gpus N rank r takes part r of N",
     "the device's NUMA node", FlagKind::value, 0, 0, 0, nullptr, nullptr,
     [](RunConfig& c, const std::string& text) {
       c.cpu_affinity = parse_cpu_list(text, "--cpu-affinity");
     },
     nullptr},
    // config_min 0: with --gpus N > 1 each rank sizes its own pool (validate_run_config).
    {"--threads", "N",
     "CPU Adam threads (default: CPUs available, or as many as --cpu-affinity lists; with "
     "--gpus N, per rank: the CPUs of its slice)",
     "CPUs this process may use (with `--cpu-affinity`: as many as it lists; with `--gpus N > "
     "1`: per rank, the CPUs of its slice)",
     FlagKind::integer, 1, limits::threads, 0,
     [](const RunConfig& c) -> std::int64_t { return c.threads; },
     [](RunConfig& c, std::int64_t v) { c.threads = static_cast<int>(v); }, nullptr,
     [] { return number(available_cpus()); }},
    {"--seed", "N", "seed of the initial weights and token ids", "42", FlagKind::value, 0, 0, 0,
     nullptr, nullptr,
     [](RunConfig& c, const std::string& text) { c.seed = parse_unsigned_flag("--seed", text); },
     [] { return number(kDefaults.seed); }},
    {"--json", "FILE", "also write DRIVERRESULT (pretty) here", "none", FlagKind::output_file, 0, 0,
     0, nullptr, nullptr, [](RunConfig& c, const std::string& text) { c.json_path = text; },
     nullptr},
    {"--timeout", "SECONDS", "seconds per arm, 0 = no limit", "0", FlagKind::value, 0, 0, 0,
     nullptr, nullptr,
     [](RunConfig& c, const std::string& text) {
       c.timeout_s = parse_seconds_flag("--timeout", text, limits::timeout_s);
     },
     [] { return std::string("0"); }},
    // config_min 0: "all", resolved by the driver.
    {"--gpus", "N|all", "ranks per arm, one per device (ZeRO-3 partitioned), or 'all'", "1",
     FlagKind::value, 1, limits::gpus, 0, [](const RunConfig& c) -> std::int64_t { return c.gpus; },
     nullptr,
     [](RunConfig& c, const std::string& text) {
       c.gpus = text == "all"
                    ? 0
                    : static_cast<int>(parse_integer_flag("--gpus", text, 1, limits::gpus));
     },
     [] { return number(kDefaults.gpus); }},
    {"--repeats", "N", "rounds of all arms, interleaved, each a fresh process",
     device_default(kDefaults.repeats, kAcceleratorRounds.repeats), FlagKind::integer, 1,
     limits::repeats, 1, [](const RunConfig& c) -> std::int64_t { return c.repeats; },
     [](RunConfig& c, std::int64_t v) { c.repeats = static_cast<int>(v); }, nullptr,
     [] { return device_default(kDefaults.repeats, kAcceleratorRounds.repeats); }},
    {"--trace", "FILE", "write a Chrome trace (Perfetto) of every arm run here", "none",
     FlagKind::output_file, 0, 0, 0, nullptr, nullptr,
     [](RunConfig& c, const std::string& text) { c.trace_path = text; }, nullptr},
    {"--plot", "FILE",
     "draw the chart here (.svg, or .png with Cairo): phases stacked per arm, every step's time",
     "none", FlagKind::output_file, 0, 0, 0, nullptr, nullptr,
     [](RunConfig& c, const std::string& text) { c.plot_path = text; }, nullptr},
    {"--csv", "FILE",
     "also write the phases and step times here as CSV (one row per arm x phase "
     "and per arm x step)",
     "none", FlagKind::output_file, 0, 0, 0, nullptr, nullptr,
     [](RunConfig& c, const std::string& text) { c.csv_path = text; }, nullptr},
    {"--skip-preflight", "", "skip the memory / memlock checks made before any arm starts", "off",
     FlagKind::toggle, 0, 0, 0, nullptr,
     [](RunConfig& c, std::int64_t v) { c.skip_preflight = v != 0; }, nullptr, nullptr},
    {"--launcher", "NAME",
     "fork|mpi: fork the --gpus ranks here, or be one rank started by mpirun (one arm per "
     "mpirun; see README)",
     "fork", FlagKind::command, 0, 0, 0, nullptr, nullptr, nullptr,
     [] { return std::string("fork"); }},
    {"--list-devices", "",
     "probe " + backend_names("and") + " and say what is available (or why not)", "",
     FlagKind::command, 0, 0, 0, nullptr, nullptr, nullptr, nullptr},
};

}  // namespace

std::span<const RunFlag> run_flags() { return kRunFlags; }

const RunFlag& run_flag(std::string_view name) {
  for (const RunFlag& f : kRunFlags) {
    if (name == f.name) return f;
  }
  throw std::out_of_range("no run flag " + std::string(name));
}

std::string range_text(std::int64_t min, std::int64_t max) {
  return fmt::format("a whole number from {} to {}", min, max);
}

std::int64_t parse_integer_flag(const std::string& flag, const std::string& text, std::int64_t min,
                                std::int64_t max) {
  const char* s = text.c_str();
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s, &end, 10);
  const bool digits = !text.empty() && end == s + text.size() &&
                      text.find_first_not_of("+-0123456789") == std::string::npos;
  if (!digits) {
    throw UsageError(
        fmt::format("{} '{}' is not a whole number; give {}", flag, text, range_text(min, max)));
  }
  if (errno == ERANGE || v < min || v > max) {
    throw UsageError(
        fmt::format("{} {} is out of range; give {}", flag, text, range_text(min, max)));
  }
  return v;
}

std::uint64_t parse_unsigned_flag(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos ||
      end != text.c_str() + text.size()) {
    throw UsageError(fmt::format("{} '{}' is not a whole number; give one from 0 to {}", flag, text,
                                 std::numeric_limits<std::uint64_t>::max()));
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
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v) ||
      text.find_first_of("xXpPnN") != std::string::npos) {
    throw UsageError(
        fmt::format("{} '{}' is not a number of seconds; give e.g. 30 or 0.5 "
                    "(0 = no limit)",
                    flag, text));
  }
  if (v < 0 || v > max) {
    throw UsageError(
        fmt::format("{} {} is out of range; give 0 (no limit) to {:g} seconds", flag, text, max));
  }
  return v;
}

std::vector<std::int64_t> parse_integer_list(const std::string& flag, const std::string& text,
                                             std::int64_t min, std::int64_t max) {
  std::vector<std::int64_t> out;
  for (const std::string& item : split_list(text)) {
    if (item.empty()) {
      throw UsageError(
          fmt::format("{} '{}' has an empty value; give one number or a "
                      "comma-separated list such as 16777216,67108864",
                      flag, text));
    }
    const std::int64_t v = parse_integer_flag(flag, item, min, max);
    for (std::int64_t seen : out) {
      if (seen == v) {
        throw UsageError(fmt::format("{} lists {} twice; list each value once", flag, v));
      }
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace zob
