// The validated run configuration: what the CLI produces, what the parent hands each child
// (as JSON), what the step consumes. Plain data, and its checks (validate_run_config, in
// src/common/config_check.cpp). Each member's initializer is its default, written nowhere
// else; its flag, help, range and JSON key are declared in zob/settings.hpp.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace zob {

// Which kind of host memory backs the pinned offload buffers (fp32 master, fp32 grads, and
// the bf16 parameter buffer under --offload-param). Adam states are plain memory in every arm.
enum class Arm {
  registered,  // page-aligned + mlock + registered with the device (cudaHostRegister / zex import)
  unregistered,  // page-aligned + mlock only: DeepSpeed's "native" pin backend
  pageable,      // page-aligned, neither locked nor registered
  hostalloc,     // allocated by the device runtime (cudaMallocHost / zeMemAllocHost)
};

inline constexpr Arm kAllArms[] = {Arm::registered, Arm::unregistered, Arm::pageable,
                                   Arm::hostalloc};

enum class DeviceKind { automatic, cpu, cuda, xpu };

enum class Loop {
  copy_back,      // default: params resident on the device; copy the fp32 master back after Adam
  offload_param,  // --offload-param: bf16 params live in pinned host memory, fetched per module
};

// Order of the optimizer phase (--schedule). Both give bitwise identical results.
enum class Schedule {
  stock,      // docs/anatomy.md §3: all grads land, then per sub-group Adam, then its copy-back
  overlap,    // Adam per piece as its grads land; copy-back of piece i under Adam of piece i+1
  deepspeed,  // DeepSpeed 0.19.8's ZeRO-3 operations, sizes, queues and waits (docs/schedules.md)
};

// In the order the texts list them; src/step runs each as a case (step/schedule_case.hpp). Its
// name and the report's words for it are vocabulary, here; what it does is its case's.
inline constexpr Schedule kAllSchedules[] = {Schedule::stock, Schedule::overlap,
                                             Schedule::deepspeed};

// Which version of the upstream Python script the output imitates (--compat).
enum class Compat {
  v1,  // DeepSpeed PR #8618: arms registered / unregistered, speedup = unregistered / registered
  v2,  // DeepSpeedExamples benchmarks/pin_memory: unpinned / pinned (+ pinned-unregistered),
       // speedup = unpinned / pinned, "pinning speedup:" line, pin_memory + register keys
};

// A decoder-only transformer of the Llama shape (--model; docs/models.md): the fields of its
// Hugging Face config.json beyond vocab, hidden and layers.
struct DecoderArch {
  std::string model_type;         // "llama", "mistral" or "qwen2"
  std::int64_t intermediate = 0;  // intermediate_size: the gated MLP's width
  std::int64_t heads = 0;         // num_attention_heads
  std::int64_t kv_heads = 0;      // num_key_value_heads (grouped-query attention)
  std::int64_t head_dim = 0;      // head_dim (config.json's, else hidden / heads)
  bool attention_bias = false;    // q/k/v projections carry biases (Qwen2), o_proj never
  bool tie_embeddings = false;    // tie_word_embeddings: lm_head is the embedding table
  double rope_theta = 0;
  double rms_norm_eps = 0;
  std::int64_t config_layers = 0;  // num_hidden_layers as published (--layers may override)
};

// The kernels a decoder model's modules launch (--decoder).
enum class DecoderKernels { automatic, eager, fused };

// The model: the synthetic MLP stack (docs/anatomy.md) when `name` is empty, else the decoder
// transformer `arch` that --model NAME|PATH resolved to.
struct ModelShape {
  std::int64_t vocab = 32000;
  std::int64_t hidden = 2048;
  std::int64_t layers = 12;
  std::string name;  // --model as given; empty: the synthetic model
  DecoderArch arch;  // meaningful only when decoder()

  ModelShape() = default;
  ModelShape(std::int64_t vocab_, std::int64_t hidden_, std::int64_t layers_)
      : vocab(vocab_), hidden(hidden_), layers(layers_) {}
  bool decoder() const { return !name.empty(); }
};

// --repeats / --warmup / --steps on an accelerator (cuda, xpu) when the command line leaves
// them out (issue 26): interleaved rounds, so that the default answer is a median with an
// interval, not one draw. From the recorded H200 runs
// (results/h200/2026-12-02-default-rounds): the per-round speedup moves by ~10 % from round to
// round, as much as one step's own noise, so rounds are worth more than steps; each arm run
// costs 1.1-2.2 s besides its steps, so 3 rounds of 1 warmup + 1 timed step take 14-18 s
// (1 + 2 steps up to 21.5 s, 4 rounds up to 24 s; the budget is 20 s). One warmup step is
// enough: the second step already runs at the steady time. The CPU device keeps RunConfig's
// own one round of 2 + 4: registration does not exist there, so its verdict is "not
// applicable" however many rounds run, and its default model already takes minutes.
struct RoundPlan {
  int repeats, warmup, steps;
};
inline constexpr RoundPlan kAcceleratorRounds{3, 1, 1};

struct RunConfig {
  ModelShape model;
  std::int64_t batch = 4;
  std::int64_t seq = 128;
  int steps = 4;
  int warmup = 2;
  DeviceKind device = DeviceKind::automatic;
  int device_index = 0;
  std::vector<Arm> arms{Arm::registered, Arm::unregistered};
  Loop loop = Loop::copy_back;
  std::int64_t chunk_elems = std::int64_t{1} << 26;
  std::int64_t sub_group_size = 1000000000;
  Schedule schedule = Schedule::deepspeed;  // what a DeepSpeed user runs, for any --gpus
  // --cpu-affinity: CPU of each Adam thread, in order (size >= threads); empty = the default
  // placement (the device's NUMA node when known, else unpinned).
  std::vector<int> cpu_affinity;
  // Sweeps (--chunk-elems / --sub-group-size given as comma lists): every value, in the order
  // given; chunk_elems / sub_group_size hold the first. Empty or one value: no sweep. The
  // driver runs every combination and hands each child a config with the lists cleared.
  std::vector<std::int64_t> chunk_elems_sweep;
  std::vector<std::int64_t> sub_group_size_sweep;
  // --offload-ratio: DeepSpeed's zero_optimization.offload_optimizer.ratio, the fraction of the
  // sub-groups CPU Adam updates; sub-group i stays on the device (torch's AdamW there) when
  // i < int((1 - ratio) * sub-groups), as stage3.py decides. --schedule deepspeed only. A comma
  // list sweeps, as --chunk-elems does (offload_ratio holds the first).
  double offload_ratio = 1.0;
  std::vector<double> offload_ratio_sweep;
  int threads = 0;  // CPU Adam threads; 0 = the CPUs this process may use (resolved by the CLI)
  std::uint64_t seed = 42;
  std::string json_path;  // empty: no file
  double timeout_s = 0;   // per arm; 0 = no limit
  // Ranks per arm, one per device (indices device_index, device_index + 1, ...; on the CPU
  // device every rank uses the CPU). 0 = all devices of the backend, resolved by the driver.
  int gpus = 1;
  int repeats = 1;  // rounds of all arms, interleaved (A B A B ...), each arm a fresh child
  // --deepspeed-step S / --deepspeed-arm: the step a user sees in DeepSpeed today and its arm;
  // the verdict projects it across the saving measured here (src/report/deepspeed_gap.cpp).
  double deepspeed_step_s = 0;
  Arm deepspeed_arm = Arm::unregistered;
  std::string trace_path;       // --trace FILE: Chrome trace of every arm run; empty: none
  std::string plot_path;        // --plot FILE (.svg / .png): the chart of the run; empty: none
  std::string csv_path;         // --csv FILE: phases and step times for spreadsheets; empty: none
  bool skip_preflight = false;  // --skip-preflight
  // --device-memory: the most device memory one rank's arm may reserve (its caching pool's
  // segments), as a device of that size would allow; 0 = the device's own memory.
  std::uint64_t device_memory_bytes = 0;
  // --decoder: which kernels a --model decoder launches. auto: eager PyTorch's kernel sequence
  // per module (src/step/decoder/eager_decoder.hpp) under --schedule deepspeed, which reproduces
  // what DeepSpeed runs; the fused kernels under stock and overlap, which are the what-ifs. eager
  // is refused elsewhere; fused is the fewer-launch what-if under deepspeed too.
  DecoderKernels decoder = DecoderKernels::automatic;
  Compat compat = Compat::v1;  // --compat
  bool dry_run = false;        // --dry-run: print the plan and the pre-flight verdict, run nothing
  // --fit: search the --offload-ratio list (fit_ratios) and the arms for the fastest step that
  // fits (src/driver/fit_search.cpp), within fit_budget_s seconds of arm runs.
  bool fit = false;
  double fit_budget_s = 600;
  bool ablate_register = false;  // --ablate-register (v2): also the pinned-unregistered arm
  // Which of --repeats / --warmup / --steps the command line left to the device: the driver
  // gives them kAcceleratorRounds once the probe has named an accelerator
  // (apply_device_round_defaults). Set by the CLI only; not part of the JSON hand-over.
  struct LeftToDevice {
    bool repeats = false, warmup = false, steps = false;
  } left_to_device;

  std::int64_t tokens() const { return batch * seq; }  // one rank's micro-batch
  // Tokens one step of the arm trains: every rank trains its own micro-batch (data parallel).
  std::int64_t tokens_per_step() const { return tokens() * (gpus > 1 ? gpus : 1); }
};

// --offload-ratio was given (below 1, or a list): the reports name each configuration's ratio.
inline bool ratio_shown(const RunConfig& c) {
  return c.offload_ratio != 1.0 || !c.offload_ratio_sweep.empty();
}

// The ratios --fit searches without --offload-ratio (the CLI puts them in the sweep), and the
// ones a config's fit searches: its --offload-ratio list, or its one ratio.
inline constexpr double kFitRatios[] = {1.0, 0.75, 0.5, 0.25, 0.0};
std::vector<double> fit_ratios(const RunConfig& config);

// Every configuration of the sweep (--chunk-elems x --sub-group-size x --offload-ratio lists;
// one without lists), each with its lists cleared: what one child runs.
std::vector<RunConfig> sweep_points(const RunConfig& config);

const char* to_string(Arm);
const char* to_string(DeviceKind);
const char* to_string(Loop);
const char* to_string(Schedule);
const char* to_string(Compat);
const char* to_string(DecoderKernels);                     // "auto" / "eager" / "fused"
DecoderKernels parse_decoder_kernels(const std::string&);  // UsageError naming the choices
Compat parse_compat(const std::string&);                   // "v1" / "v2"; UsageError otherwise
Loop parse_loop(const std::string&);  // "copy_back" / "offload_param"; UsageError otherwise
// "stock" / "overlap" / "deepspeed"; UsageError otherwise.
Schedule parse_schedule(const std::string&);
// The report header's words for a schedule: "DeepSpeed 0.19.8's ZeRO-3 operations".
const char* schedule_description(Schedule);
// The one place of the eager decoder's rule: it exists for --schedule deepspeed with --model
// (validate_run_config refuses --decoder eager elsewhere; the step runs it there unless
// --decoder fused).
bool eager_decoder_applies(const RunConfig& config);
// The schedules for a sentence: "stock, overlap or deepspeed"; conjunction "|":
// "stock|overlap|deepspeed".
std::string schedule_names(const char* conjunction);
// Parse the names above; throw UsageError naming the accepted values.
Arm parse_arm(const std::string&);
DeviceKind parse_device_kind(const std::string&);

// --model's architecture, config.json's key names plus name and config_layers (null for the
// synthetic model): the hand-over's "model" and the results' workload.architecture.
nlohmann::json model_architecture_json(const ModelShape& model);
// The reverse: name and arch from that object (null: the synthetic model); the sizes stay.
void model_from_json(const nlohmann::json& architecture, ModelShape& model);

// Lossless round trip, used for the parent -> child hand-over: the keys of zob/settings.hpp; a
// key absent from the document reads as its default.
void to_json(nlohmann::json&, const RunConfig&);
void from_json(const nlohmann::json&, RunConfig&);

// ---- Checks (src/common/config_check.cpp) ----

// --threads not given (threads 0) with one rank: one per --cpu-affinity CPU, else per CPU
// available. Several ranks keep 0: each rank runs one thread per CPU of its slice.
void resolve_default_threads(RunConfig& config);
// The device's round plan for what left_to_device names, once `device` is resolved: on cuda
// and xpu kAcceleratorRounds' values, on the CPU device the RunConfig defaults as they are.
// Clears left_to_device. (src/common/round_defaults.cpp)
void apply_device_round_defaults(RunConfig& config);
// Every check of the command line on a RunConfig however it was built (the CLI's, and the
// child's re-check of the config it receives): the settings' ranges (zob/settings.hpp), the
// combinations not implemented, the CPU list against the allowed CPUs, and byte counts that
// would overflow 64 bits. Throws UsageError ("<what>; <fix>").
void validate_run_config(const RunConfig& config);

}  // namespace zob
