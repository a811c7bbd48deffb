// The settings' table (zob/settings.hpp): one declaration per setting, binding its RunConfig
// member to its flag, help, range, JSON key and docs words. Everything else about a setting
// (its JSON value, its --help default, its docs default, its parsing) is derived here from
// the member's type and its initializer in zob/config.hpp.
#include "zob/settings.hpp"

#include <fmt/format.h>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "zob/backends.hpp"
#include "zob/cpu_affinity.hpp"
#include "zob/errors.hpp"
#include "zob/thread_pool.hpp"

namespace zob {

namespace {

void parse_name(const std::string& text, DeviceKind& out) { out = parse_device_kind(text); }
void parse_name(const std::string& text, Loop& out) { out = parse_loop(text); }
void parse_name(const std::string& text, Schedule& out) { out = parse_schedule(text); }
void parse_name(const std::string& text, Compat& out) { out = parse_compat(text); }
void parse_name(const std::string& text, Arm& out) { out = parse_arm(text); }
void parse_name(const std::string& text, DecoderKernels& out) { out = parse_decoder_kernels(text); }

// A member's value in the JSON hand-over: enums and arms by name, the rest as they are.
template <class T>
nlohmann::json write_value(const T& v) {
  if constexpr (std::is_enum_v<T>) {
    return to_string(v);
  } else if constexpr (std::is_same_v<T, std::vector<Arm>>) {
    nlohmann::json names = nlohmann::json::array();
    for (Arm a : v) names.push_back(to_string(a));
    return names;
  } else {
    return v;
  }
}

template <class T>
T read_value(const nlohmann::json& j) {
  if constexpr (std::is_enum_v<T>) {
    T out{};
    parse_name(j.get<std::string>(), out);
    return out;
  } else if constexpr (std::is_same_v<T, std::vector<Arm>>) {
    std::vector<Arm> arms;
    for (const auto& a : j) arms.push_back(parse_arm(a.get<std::string>()));
    return arms;
  } else {
    return j.get<T>();
  }
}

// A member's value as --help and docs/usage.md show it.
template <class T>
std::string value_text(const T& v) {
  if constexpr (std::is_enum_v<T>) {
    return to_string(v);
  } else if constexpr (std::is_same_v<T, double>) {
    return fmt::format("{:g}", v);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v;
  } else if constexpr (std::is_integral_v<T>) {
    return std::to_string(v);
  } else {  // a list
    std::string out;
    for (const auto& e : v) {
      if (!out.empty()) out += ',';
      out += value_text(e);
    }
    return out;
  }
}

// A member of RunConfig, or of its ModelShape.
template <class T>
struct Member {
  T RunConfig::*top = nullptr;
  T ModelShape::*model = nullptr;
  T& operator()(RunConfig& c) const { return top != nullptr ? c.*top : c.model.*model; }
  const T& operator()(const RunConfig& c) const { return top != nullptr ? c.*top : c.model.*model; }
};

// A setting bound to member `m` under JSON key `key`: its value's reading, writing and text,
// and the setters its type allows (a whole number, a toggle, a file name).
template <class T>
Setting bind(Member<T> m, const char* key) {
  Setting s;
  s.json_key = key;
  s.write = [m](const RunConfig& c) { return write_value(m(c)); };
  s.read = [m](const nlohmann::json& j, RunConfig& c) { m(c) = read_value<T>(j); };
  s.text = [m](const RunConfig& c) { return value_text(m(c)); };
  if constexpr (std::is_same_v<T, bool>) {
    s.set = [m](RunConfig& c, std::int64_t v) { m(c) = v != 0; };
  } else if constexpr (std::is_integral_v<T>) {
    s.get = [m](const RunConfig& c) { return static_cast<std::int64_t>(m(c)); };
    s.set = [m](RunConfig& c, std::int64_t v) { m(c) = static_cast<T>(v); };
  } else if constexpr (std::is_same_v<T, std::string>) {
    s.parse = [m](RunConfig& c, const std::string& text) { m(c) = text; };
  }
  return s;
}

template <class T>
Setting member(T RunConfig::*m, const char* key) {
  return bind(Member<T>{m, nullptr}, key);
}
template <class T>
Setting member(T ModelShape::*m, const char* key) {
  return bind(Member<T>{nullptr, m}, key);
}

// The declaration's flag part, chained onto a bound setting.
class Decl {
 public:
  explicit Decl(Setting s) : s_(std::move(s)) {}
  Decl& integer(const char* flag, std::string help, std::int64_t min, std::int64_t max) {
    named(flag, "N", std::move(help), FlagKind::integer);
    return range(min, max, min);
  }
  Decl& toggle(const char* flag, std::string help) {
    return named(flag, "", std::move(help), FlagKind::toggle);
  }
  Decl& value(const char* flag, const char* value_name, std::string help,
              void (*parse)(RunConfig&, const std::string&)) {
    if (parse != nullptr) s_.parse = parse;
    return named(flag, value_name, std::move(help), FlagKind::value);
  }
  Decl& output_file(const char* flag, std::string help) {
    return named(flag, "FILE", std::move(help), FlagKind::output_file);
  }
  Decl& command(const char* flag, const char* value_name, std::string help, const char* def) {
    s_.command_default = def;
    return named(flag, value_name, std::move(help), FlagKind::command);
  }
  // The range validate_run_config checks: [config_min, max] (the CLI's [min, max]).
  Decl& range(std::int64_t min, std::int64_t max, std::int64_t config_min) {
    s_.min = min;
    s_.max = max;
    s_.config_min = config_min;
    return *this;
  }
  Decl& config_min(std::int64_t min) {
    s_.config_min = min;
    return *this;
  }
  Decl& set(void (*setter)(RunConfig&, std::int64_t)) {
    s_.set = setter;
    return *this;
  }
  Decl& doc_words(std::string words) {
    s_.doc_words = std::move(words);
    return *this;
  }
  Decl& resolved_default(std::string (*f)()) {
    s_.resolved_default = f;
    return *this;
  }
  Decl& accelerator_default(int value) {
    s_.accelerator_default = value;
    return *this;
  }
  Decl& workload() {
    s_.workload = true;
    return *this;
  }
  operator Setting() const { return s_; }

 private:
  Decl& named(const char* flag, const char* value_name, std::string help, FlagKind kind) {
    s_.flag = flag;
    s_.value_name = value_name;
    s_.help = std::move(help);
    s_.kind = kind;
    return *this;
  }
  Setting s_;
};

// --model: the name only; the CLI resolves it once every flag is in (it needs --layers). Its
// JSON is the architecture it resolved to (null: the synthetic model).
Setting model_setting() {
  Setting s;
  s.json_key = "model";
  s.write = [](const RunConfig& c) { return model_architecture_json(c.model); };
  s.read = [](const nlohmann::json& j, RunConfig& c) { model_from_json(j, c.model); };
  return Decl(std::move(s))
      .value("--model", "NAME|PATH",
             "a decoder transformer (docs/models.md): a built-in config such as Qwen2.5-7B or "
             "meta-llama/Llama-3.1-8B, or a config.json / a folder holding one; --layers N "
             "then overrides its layer count; default the synthetic model",
             [](RunConfig& c, const std::string& text) {
               if (text.empty()) throw UsageError("--model: empty; give a built-in name or a path");
               c.model.name = text;
             })
      .doc_words("synthetic");
}

// A command: no member, no JSON key.
Setting no_member() { return Setting{}; }

// "deepspeed|stock|overlap": the default first, then the others in their table's order.
std::string schedules_default_first() {
  const Schedule def = RunConfig{}.schedule;
  std::string out = to_string(def);
  for (Schedule s : kAllSchedules) {
    if (s != def) out += std::string("|") + to_string(s);
  }
  return out;
}

// --chunk-elems / --sub-group-size: the first value, and every value when the list sweeps,
// each in the flag's declared range.
void parse_sweep(const char* flag, const std::string& text, std::int64_t& first,
                 std::vector<std::int64_t>& sweep) {
  const Setting& s = setting_of_flag(flag);
  const auto v = parse_integer_list(flag, text, s.min, s.max);
  first = v.front();
  if (v.size() > 1) sweep = v;
}

// The declarations in --help order, in four groups (the model, the run, the step, the outputs).
std::vector<Setting> declare_model();
std::vector<Setting> declare_run();
std::vector<Setting> declare_step();
std::vector<Setting> declare_outputs();

std::vector<Setting> declare_settings() {
  std::vector<Setting> all;
  for (auto* group : {declare_model, declare_run, declare_step, declare_outputs}) {
    for (Setting& s : group()) all.push_back(std::move(s));
  }
  return all;
}

std::vector<Setting> declare_model() {
  return {
      model_setting(),
      Decl(member(&ModelShape::hidden, "hidden"))
          .integer("--hidden", "hidden size h", 1, limits::hidden)
          .workload(),
      Decl(member(&ModelShape::layers, "layers"))
          .integer("--layers", "number of blocks", 1, limits::layers)
          .workload(),
      Decl(member(&RunConfig::batch, "batch"))
          .integer("--batch", "batch size", 1, limits::batch)
          .workload(),
      Decl(member(&RunConfig::seq, "seq"))
          .integer("--seq", "sequence length", 1, limits::seq)
          .workload(),
      Decl(member(&RunConfig::steps, "steps"))
          .integer("--steps", "timed steps per arm run (>= 1)", 1, limits::steps)
          .accelerator_default(kAcceleratorRounds.steps)
          .workload(),
      Decl(member(&RunConfig::warmup, "warmup"))
          .integer("--warmup", "untimed steps before them (>= 0)", 0, limits::steps)
          .accelerator_default(kAcceleratorRounds.warmup)
          .workload(),
      Decl(member(&ModelShape::vocab, "vocab"))
          .integer("--vocab", "vocabulary size", 1, limits::vocab)
          .workload(),
  };
}

std::vector<Setting> declare_run() {
  return {
      Decl(member(&RunConfig::device, "device"))
          .value("--device", "NAME", backend_names("|", true),
                 [](RunConfig& c, const std::string& text) {
                   try {
                     c.device = parse_device_kind(text);
                   } catch (const UsageError&) {
                     throw UsageError("--device: unknown device '" + text + "'; use " +
                                      backend_names("or", true));
                   }
                 }),
      Decl(member(&RunConfig::device_index, "device_index"))
          .integer("--device-index", "which device of the backend", 0, limits::device_index),
      Decl(member(&RunConfig::arms, "arms"))
          .value("--arms", "LIST", "comma-separated: registered,unregistered,pageable,hostalloc",
                 [](RunConfig& c, const std::string& text) { c.arms = parse_arm_list(text); }),
      Decl(member(&RunConfig::loop, "loop"))
          .toggle("--offload-param", "ZeRO-3 offload_param loop (params on host)")
          .set([](RunConfig& c, std::int64_t on) {
            c.loop = on != 0 ? Loop::offload_param : Loop::copy_back;
          })
          .workload(),
      Decl(member(&RunConfig::compat, "compat"))
          .value("--compat", "VERSION",
                 "v1|v2: output of the upstream script's version: v1 registered / unregistered; "
                 "v2 unpinned / pinned, 'pinning speedup', the offload_param loop",
                 [](RunConfig& c, const std::string& text) { c.compat = parse_compat(text); }),
      Decl(member(&RunConfig::dry_run, "dry_run"))
          .toggle("--dry-run",
                  "validate, print the plan (parameters, modules, host and device bytes per arm) "
                  "and the pre-flight verdict; allocate nothing (exit 0 fits, 2 refused)"),
      Decl(member(&RunConfig::fit, "fit"))
          .toggle("--fit",
                  "--schedule deepspeed: search the --offload-ratio list (default "
                  "1,0.75,0.5,0.25,0) and --arms for the fastest step that fits, skipping what "
                  "the plan says does not fit; prints the DeepSpeed settings of the winner"),
      Decl(member(&RunConfig::fit_budget_s, "fit_budget_s"))
          .value("--fit-budget", "SECONDS",
                 "--fit: the most seconds of arm runs the search may take (what would run past it "
                 "is cut, and said so; 0 = no limit)",
                 [](RunConfig& c, const std::string& text) {
                   c.fit_budget_s = parse_seconds_flag("--fit-budget", text, limits::timeout_s);
                 }),
      Decl(member(&RunConfig::ablate_register, "ablate_register"))
          .toggle("--ablate-register",
                  "with --compat v2: also the pinned-unregistered arm (as the v2 script's flag)"),
  };
}

std::vector<Setting> declare_step() {
  const std::string numa_node = "the device's NUMA node";
  return {
      Decl(member(&RunConfig::chunk_elems, "chunk_elems"))
          .value("--chunk-elems", "N[,N...]", "elements per copy-back piece (a comma list sweeps)",
                 [](RunConfig& c, const std::string& text) {
                   parse_sweep("--chunk-elems", text, c.chunk_elems, c.chunk_elems_sweep);
                 })
          .range(1, limits::elems, 1)
          .workload(),
      Decl(member(&RunConfig::chunk_elems_sweep, "chunk_elems_sweep")),
      Decl(member(&RunConfig::sub_group_size, "sub_group_size"))
          .value("--sub-group-size", "N[,N...]",
                 "elements per Adam sub-group (a comma list sweeps)",
                 [](RunConfig& c, const std::string& text) {
                   parse_sweep("--sub-group-size", text, c.sub_group_size, c.sub_group_size_sweep);
                 })
          .range(1, limits::elems, 1)
          .workload(),
      Decl(member(&RunConfig::sub_group_size_sweep, "sub_group_size_sweep")),
      Decl(member(&RunConfig::offload_ratio, "offload_ratio"))
          .value("--offload-ratio", "R[,R...]",
                 "--schedule deepspeed: offload_optimizer.ratio, the fraction of the Adam "
                 "sub-groups updated on the CPU; the rest stay on the device (a comma list sweeps)",
                 [](RunConfig& c, const std::string& text) {
                   const std::vector<double> v = parse_fraction_list("--offload-ratio", text);
                   c.offload_ratio = v.front();
                   c.offload_ratio_sweep = v.size() > 1 ? v : std::vector<double>{};
                 })
          .workload(),
      Decl(member(&RunConfig::offload_ratio_sweep, "offload_ratio_sweep")),
      Decl(member(&RunConfig::schedule, "schedule"))
          .value("--schedule", "NAME",
                 schedules_default_first() +
                     ": the step's copies, waits and Adam as DeepSpeed 0.19.8 runs them, or the "
                     "what-ifs: the algorithm alone, Adam overlapped (default " +
                     to_string(RunConfig{}.schedule) + ", for any --gpus)",
                 [](RunConfig& c, const std::string& text) {
                   try {
                     c.schedule = parse_schedule(text);
                   } catch (const UsageError&) {
                     throw UsageError("--schedule: unknown schedule '" + text + "'; use " +
                                      schedule_names("or"));
                   }
                 })
          .workload(),
      Decl(member(&RunConfig::cpu_affinity, "cpu_affinity"))
          .value("--cpu-affinity", "LIST",
                 "CPUs of the Adam threads in order, e.g. 0-7,16-23 (default: " + numa_node +
                     "); with --gpus N rank r takes part r of N",
                 [](RunConfig& c, const std::string& text) {
                   c.cpu_affinity = parse_cpu_list(text, "--cpu-affinity");
                 })
          .doc_words(numa_node),
      // config_min 0: with --gpus N > 1 each rank sizes its own pool (validate_run_config).
      Decl(member(&RunConfig::threads, "threads"))
          .integer("--threads",
                   "CPU Adam threads (default: CPUs available, or as many as --cpu-affinity "
                   "lists; with --gpus N, per rank: the CPUs of its slice)",
                   1, limits::threads)
          .config_min(0)
          .resolved_default([] { return std::to_string(available_cpus()); })
          .doc_words("CPUs this process may use (with `--cpu-affinity`: as many as it lists; with "
                     "`--gpus N > 1`: per rank, the CPUs of its slice)"),
  };
}

std::vector<Setting> declare_outputs() {
  return {
      Decl(member(&RunConfig::seed, "seed"))
          .value("--seed", "N", "seed of the initial weights and token ids",
                 [](RunConfig& c, const std::string& text) {
                   c.seed = parse_unsigned_flag("--seed", text);
                 })
          .workload(),
      Decl(member(&RunConfig::json_path, "json_path"))
          .output_file("--json", "also write DRIVERRESULT (pretty) here"),
      Decl(member(&RunConfig::timeout_s, "timeout_s"))
          .value("--timeout", "SECONDS", "seconds per arm, 0 = no limit",
                 [](RunConfig& c, const std::string& text) {
                   c.timeout_s = parse_seconds_flag("--timeout", text, limits::timeout_s);
                 }),
      // config_min 0: "all", resolved by the driver.
      Decl(member(&RunConfig::gpus, "gpus"))
          .value("--gpus", "N|all", "ranks per arm, one per device (ZeRO-3 partitioned), or 'all'",
                 [](RunConfig& c, const std::string& text) {
                   const Setting& s = setting_of_flag("--gpus");
                   c.gpus = text == "all"
                                ? 0
                                : static_cast<int>(parse_integer_flag(s.flag, text, s.min, s.max));
                 })
          .range(1, limits::gpus, 0)
          .workload(),
      Decl(member(&RunConfig::repeats, "repeats"))
          .integer("--repeats", "rounds of all arms, interleaved, each a fresh process", 1,
                   limits::repeats)
          .accelerator_default(kAcceleratorRounds.repeats),
      Decl(member(&RunConfig::deepspeed_step_s, "deepspeed_step_s"))
          .value("--deepspeed-step", "SECONDS",
                 "the step you see in DeepSpeed today (its wall_clock_breakdown or your trainer's "
                 "log): the verdict projects it across the saving measured here; 0 = none",
                 [](RunConfig& c, const std::string& text) {
                   c.deepspeed_step_s = parse_seconds_flag("--deepspeed-step", text,
                                                           limits::timeout_s, "no projection");
                 }),
      Decl(member(&RunConfig::deepspeed_arm, "deepspeed_arm"))
          .value("--deepspeed-arm", "ARM",
                 "which arm that DeepSpeed step is: unregistered (pin_memory true, not "
                 "registered), registered, or pageable (pin_memory false)",
                 [](RunConfig& c, const std::string& text) {
                   try {
                     c.deepspeed_arm = parse_arm(text);
                   } catch (const UsageError&) {
                     throw UsageError("--deepspeed-arm: unknown arm '" + text +
                                      "'; use unregistered, registered or pageable");
                   }
                 }),
      Decl(member(&RunConfig::trace_path, "trace_path"))
          .output_file("--trace", "write a Chrome trace (Perfetto) of every arm run here"),
      Decl(member(&RunConfig::plot_path, "plot_path"))
          .output_file("--plot",
                       "draw the chart here (.svg, or .png with Cairo): phases stacked per arm, "
                       "every step's time"),
      Decl(member(&RunConfig::csv_path, "csv_path"))
          .output_file("--csv",
                       "also write the phases and step times here as CSV (one row per arm x "
                       "phase and per arm x step)"),
      Decl(member(&RunConfig::decoder, "decoder"))
          .value("--decoder", "KIND",
                 "auto|eager|fused: the kernels a --model decoder launches; auto: eager "
                 "PyTorch's sequence per module under --schedule deepspeed (what DeepSpeed "
                 "runs), the fused kernels under stock and overlap; eager needs --schedule "
                 "deepspeed (docs/deepspeed.md)",
                 [](RunConfig& c, const std::string& text) {
                   c.decoder = parse_decoder_kernels(text);
                 }),
      Decl(member(&RunConfig::device_memory_bytes, "device_memory_bytes"))
          .value("--device-memory", "SIZE",
                 "the device memory one rank may use, e.g. 24GB or 80GiB: the dry run, the "
                 "pre-flight and the arms' caching pool hold to it, to ask about a GPU you do "
                 "not have; 0 = the device's own",
                 [](RunConfig& c, const std::string& text) {
                   c.device_memory_bytes =
                       parse_bytes_flag("--device-memory", text, "the device's own");
                 })
          .workload(),
      Decl(member(&RunConfig::skip_preflight, "skip_preflight"))
          .toggle("--skip-preflight",
                  "skip the memory / memlock checks made before any arm starts"),
      Decl(no_member())
          .command("--launcher", "NAME",
                   "fork|mpi: fork the --gpus ranks here, or be one rank started by mpirun (one "
                   "arm per mpirun; see README)",
                   "fork"),
      Decl(no_member())
          .command("--list-devices", "",
                   "probe " + backend_names("and") + " and say what is available (or why not)", ""),
  };
}

}  // namespace

std::string Setting::help_default() const {
  switch (kind) {
    case FlagKind::integer:
    case FlagKind::value:
      if (resolved_default != nullptr) return resolved_default();
      if (accelerator_default >= 0) {
        return fmt::format("{} on cpu, {} on cuda/xpu", text(RunConfig{}), accelerator_default);
      }
      return doc_words.empty() ? text(RunConfig{}) : "";
    case FlagKind::command: return command_default;
    case FlagKind::none:
    case FlagKind::toggle:
    case FlagKind::output_file: break;
  }
  return "";
}

std::string Setting::doc_default() const {
  if (!doc_words.empty()) return doc_words;
  if (kind == FlagKind::toggle) return "off";
  if (kind == FlagKind::output_file) return "none";
  return help_default();
}

std::span<const Setting> settings() {
  static const std::vector<Setting> table = declare_settings();
  return table;
}

const Setting& setting_of_flag(std::string_view flag) {
  for (const Setting& s : settings()) {
    if (s.has_flag() && flag == s.flag) return s;
  }
  throw std::out_of_range("no setting of flag " + std::string(flag));
}

const Setting& setting_of_key(std::string_view key) {
  for (const Setting& s : settings()) {
    if (!s.json_key.empty() && key == s.json_key) return s;
  }
  throw std::out_of_range("no setting of key " + std::string(key));
}

}  // namespace zob
