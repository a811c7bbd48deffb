// validate_run_config: the checks of a RunConfig, next to the config (zob/config.hpp). The
// ranges come from the settings' table (zob/settings.hpp).
#include <fmt/format.h>
#include <cmath>
#include <limits>
#include <optional>
#include <set>

#include "zob/config.hpp"
#include "zob/cpu_affinity.hpp"
#include "zob/errors.hpp"
#include "zob/settings.hpp"
#include "zob/thread_pool.hpp"

namespace zob {

namespace {

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

void check_range(const std::string& flag, std::int64_t v, std::int64_t min, std::int64_t max) {
  if (v < min || v > max) {
    throw UsageError(fmt::format("{} {} is out of range; give {}", flag, v, range_text(min, max)));
  }
}

void check_fraction(const std::string& flag, double v) {
  if (!(v >= 0.0 && v <= 1.0)) {
    throw UsageError(fmt::format("{} {} is out of range; give a fraction from 0 to 1", flag, v));
  }
}

// Every setting's value against its range; the sweeps' values like their first.
void check_ranges(const RunConfig& c) {
  for (const Setting& s : settings()) {
    if (s.max > 0) check_range(s.flag, s.get(c), s.config_min, s.max);
  }
  const Setting& chunk = setting_of_key("chunk_elems");
  const Setting& sub_group = setting_of_key("sub_group_size");
  for (std::int64_t v : c.chunk_elems_sweep)
    check_range(chunk.flag, v, chunk.config_min, chunk.max);
  for (std::int64_t v : c.sub_group_size_sweep) {
    check_range(sub_group.flag, v, sub_group.config_min, sub_group.max);
  }
  if (!c.chunk_elems_sweep.empty() && c.chunk_elems_sweep.front() != c.chunk_elems) {
    throw UsageError("--chunk-elems: the sweep's first value must be the configured one");
  }
  if (!c.sub_group_size_sweep.empty() && c.sub_group_size_sweep.front() != c.sub_group_size) {
    throw UsageError("--sub-group-size: the sweep's first value must be the configured one");
  }
  for (double r : c.offload_ratio_sweep) check_fraction("--offload-ratio", r);
  check_fraction("--offload-ratio", c.offload_ratio);
  if (!c.offload_ratio_sweep.empty() && c.offload_ratio_sweep.front() != c.offload_ratio) {
    throw UsageError("--offload-ratio: the sweep's first value must be the configured one");
  }
  // 0 with several ranks: one thread per CPU of the rank's slice (chosen by each rank).
  const Setting& threads = setting_of_key("threads");
  if (c.gpus == 1) check_range(threads.flag, c.threads, threads.min, threads.max);
  if (!(c.timeout_s >= 0) || !std::isfinite(c.timeout_s) || c.timeout_s > limits::timeout_s) {
    throw UsageError(
        fmt::format("--timeout {} is out of range; give 0 (no limit) to {:g} "
                    "seconds",
                    c.timeout_s, limits::timeout_s));
  }
  if (!(c.deepspeed_step_s >= 0) || !std::isfinite(c.deepspeed_step_s) ||
      c.deepspeed_step_s > limits::timeout_s) {
    throw UsageError(fmt::format(
        "--deepspeed-step {} is out of range; give the seconds of one DeepSpeed step (0 = none)",
        c.deepspeed_step_s));
  }
}

// What several ranks do not implement yet, the CPU list, the arms.
void check_combinations(const RunConfig& c) {
  if (c.gpus == 1) {
    validate_cpu_affinity(c.cpu_affinity, c.threads, allowed_cpu_list());
  } else {  // each rank takes its part of the list (choose_rank_placement)
    validate_rank_cpu_affinity(c.cpu_affinity, c.gpus, allowed_cpu_list());
  }
  if (c.arms.empty()) {
    throw UsageError("--arms is empty; give e.g. registered,unregistered");
  }
  if (c.decoder == DecoderKernels::eager && !eager_decoder_applies(c)) {
    throw UsageError(
        "--decoder eager applies to --schedule deepspeed with --model NAME; add both or drop it");
  }
  if (c.fit && c.schedule != Schedule::deepspeed) {
    throw UsageError(
        "--fit searches DeepSpeed's settings (offload_optimizer.ratio, pinning, registration): "
        "add --schedule deepspeed");
  }
  if (ratio_shown(c) && c.schedule != Schedule::deepspeed) {
    throw UsageError(
        "--offload-ratio applies to --schedule deepspeed (DeepSpeed's offload_optimizer.ratio); "
        "stock and overlap update every sub-group on the CPU: drop it or use --schedule "
        "deepspeed");
  }
  if (c.fit && (!c.chunk_elems_sweep.empty() || !c.sub_group_size_sweep.empty())) {
    throw UsageError(
        "--fit searches the offload ratio and the arms at one --chunk-elems and one "
        "--sub-group-size: give one value of each");
  }
  if (c.chunk_elems_sweep.size() > 1 && c.schedule == Schedule::deepspeed) {
    throw UsageError(
        "--chunk-elems sweeps the copy-back pieces of --schedule stock and overlap; the deepspeed "
        "schedule copies each sub-group whole, as PyTorch's copy_ does, so its runs would not "
        "differ: give one value, or add --schedule stock");
  }
  if (c.fit && c.compat == Compat::v2) {
    throw UsageError(
        "--fit names the arms as v1 does (registered, unregistered, pageable, "
        "hostalloc): drop --compat v2");
  }
  std::set<Arm> seen(c.arms.begin(), c.arms.end());
  if (seen.size() != c.arms.size()) {
    throw UsageError("--arms lists an arm twice; list each arm once");
  }
}

// A decoder's parameter count (model.cpp's parameter_count), in checked arithmetic.
std::optional<std::uint64_t> decoder_params(const ModelShape& m) {
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  const DecoderArch& a = m.arch;
  const auto q = mul(u(a.heads), u(a.head_dim)), kv = mul(u(a.kv_heads), u(a.head_dim));
  if (!q || !kv) return std::nullopt;
  const std::uint64_t h = u(m.hidden);
  auto layer = add(add(mul(mul(h, *q), 2), mul(mul(h, *kv), 2)), mul(mul(h, u(a.intermediate)), 3));
  layer = add(layer, add(mul(h, 2), a.attention_bias ? add(*q, mul(*kv, 2)) : 0));
  return add(add(mul(mul(u(m.vocab), h), a.tie_embeddings ? 1 : 2), h), mul(layer, u(m.layers)));
}

// The byte counts every part computes must fit in 64 bits.
void check_sizes(const RunConfig& c) {
  const auto V = static_cast<std::uint64_t>(c.model.vocab);
  const auto h = static_cast<std::uint64_t>(c.model.hidden);
  const auto n = static_cast<std::uint64_t>(c.model.layers);
  const auto tokens = mul(static_cast<std::uint64_t>(c.batch), static_cast<std::uint64_t>(c.seq));
  // A --model config's keys are named as its file names them, not as flags never given.
  const std::string shape =
      c.model.decoder()
          ? fmt::format(
                "--model {} (hidden_size {}, layers {}, vocab_size {}, intermediate_size "
                "{}, num_attention_heads {}, head_dim {}) --batch {} --seq {}",
                c.model.name, h, n, V, c.model.arch.intermediate, c.model.arch.heads,
                c.model.arch.head_dim, c.batch, c.seq)
          : fmt::format("--hidden {} --layers {} --vocab {} --batch {} --seq {}", h, n, V, c.batch,
                        c.seq);
  // The parameter formula of docs/anatomy.md (parameter_count), in checked arithmetic.
  auto per_layer = add(mul(mul(h, h), 8), mul(h, 5));
  auto params = add(mul(mul(V, h), 2), mul(per_layer, n));
  if (c.model.decoder()) {
    params = decoder_params(c.model);
    // The attention probabilities [batch*heads, seq, seq] and their gradient, per layer.
    const auto probs = mul(mul(mul(tokens, static_cast<std::uint64_t>(c.seq)),
                               static_cast<std::uint64_t>(c.model.arch.heads)),
                           4 * (n + 1));
    if (!probs) {
      throw UsageError(
          fmt::format("--model {} --batch {} --seq {}: the attention scores overflow "
                      "64-bit byte counts; choose a smaller batch or seq",
                      c.model.name, c.batch, c.seq));
    }
  }
  if (!params || *params > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    throw UsageError("the model " + shape + " has more parameters than fit in 64 bits; " +
                     (c.model.decoder() ? "choose a smaller model or --layers"
                                        : "choose a smaller --hidden, --layers or --vocab"));
  }
  // 28 B/param of Adam traffic is the largest per-parameter byte count any part computes.
  if (!mul(*params, 28)) {
    throw UsageError(
        fmt::format("the model {} has {} parameters; its byte counts (28 B/param) "
                    "overflow 64 bits; choose a smaller model",
                    shape, *params));
  }
  if (!tokens || *tokens > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max())) {
    throw UsageError(
        fmt::format("--batch {} x --seq {} tokens exceeds {} (token positions are "
                    "32-bit); choose a smaller batch or seq",
                    c.batch, c.seq, std::numeric_limits<std::int32_t>::max()));
  }
  // Activations: logits [T, V] and the fc1 outputs [T, 4h] per layer, bf16, plus fp32 copies.
  const auto activations = add(mul(mul(*tokens, V), 4), mul(mul(mul(*tokens, h), 16), n + 1));
  if (!activations || !mul(*activations, 4)) {
    throw UsageError(
        fmt::format("the activations of {} overflow 64-bit byte counts; choose a "
                    "smaller batch, seq, hidden or vocab",
                    shape));
  }
  if (!mul(static_cast<std::uint64_t>(c.chunk_elems), 4)) {
    throw UsageError("--chunk-elems is too large; give at most 2**50");
  }
}

}  // namespace

void resolve_default_threads(RunConfig& c) {
  if (c.threads != 0 || c.gpus != 1) return;  // several ranks: each sizes its own pool
  // One Adam thread per --cpu-affinity CPU, else per CPU this process may use.
  c.threads = c.cpu_affinity.empty() ? available_cpus() : static_cast<int>(c.cpu_affinity.size());
}

void validate_run_config(const RunConfig& c) {
  check_ranges(c);
  check_combinations(c);
  check_sizes(c);
}

}  // namespace zob
