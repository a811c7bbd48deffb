#include "zob/config.hpp"

#include <fmt/format.h>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string_view>

#include "zob/backends.hpp"
#include "zob/errors.hpp"
#include "zob/result.hpp"
#include "zob/settings.hpp"

namespace zob {

std::string SweepPoint::label(bool ratio_shown) const {
  std::string out = fmt::format("chunk_elems={} sub_group_size={}", chunk_elems, sub_group_size);
  if (ratio_shown) out += fmt::format(" offload_ratio={:g}", offload_ratio);
  return out;
}

std::vector<double> fit_ratios(const RunConfig& config) {
  if (!config.offload_ratio_sweep.empty()) return config.offload_ratio_sweep;
  return {config.offload_ratio};
}

// Chunk-major, then sub-group size, then ratio: the order the reports list them in.
std::vector<RunConfig> sweep_points(const RunConfig& config) {
  const std::vector<std::int64_t> chunks = config.chunk_elems_sweep.empty()
                                               ? std::vector<std::int64_t>{config.chunk_elems}
                                               : config.chunk_elems_sweep;
  const std::vector<std::int64_t> groups = config.sub_group_size_sweep.empty()
                                               ? std::vector<std::int64_t>{config.sub_group_size}
                                               : config.sub_group_size_sweep;
  const std::vector<double> ratios = config.offload_ratio_sweep.empty()
                                         ? std::vector<double>{config.offload_ratio}
                                         : config.offload_ratio_sweep;
  std::vector<RunConfig> out;
  for (std::int64_t chunk : chunks) {
    for (std::int64_t group : groups) {
      for (double ratio : ratios) {
        RunConfig c = config;
        c.chunk_elems = chunk;
        c.sub_group_size = group;
        c.offload_ratio = ratio;
        c.chunk_elems_sweep.clear();  // a child runs one configuration
        c.sub_group_size_sweep.clear();
        c.offload_ratio_sweep.clear();
        out.push_back(std::move(c));
      }
    }
  }
  return out;
}

const char* to_string(Arm arm) {
  switch (arm) {
    case Arm::registered: return "registered";
    case Arm::unregistered: return "unregistered";
    case Arm::pageable: return "pageable";
    case Arm::hostalloc: return "hostalloc";
  }
  return "?";
}

const char* to_string(DeviceKind kind) {
  if (kind == DeviceKind::automatic) return "auto";
  const BackendInfo* b = find_backend(kind);
  return b != nullptr ? b->name : "?";
}

const char* to_string(Loop loop) {
  switch (loop) {
    case Loop::copy_back: return "copy_back";
    case Loop::offload_param: return "offload_param";
  }
  return "?";
}

const char* to_string(Schedule schedule) {
  switch (schedule) {
    case Schedule::stock: return "stock";
    case Schedule::overlap: return "overlap";
    case Schedule::deepspeed: return "deepspeed";
  }
  return "?";
}

const char* schedule_description(Schedule schedule) {
  switch (schedule) {
    case Schedule::stock: return "what-if: the algorithm's operations, no framework";
    case Schedule::overlap: return "what-if: Adam overlapped with the copies";
    case Schedule::deepspeed: return "DeepSpeed 0.19.8's ZeRO-3 operations";
  }
  return "?";
}

bool eager_decoder_applies(const RunConfig& config) {
  return config.schedule == Schedule::deepspeed && config.model.decoder();
}

std::string schedule_names(const char* conjunction) {
  std::string out;
  const std::size_t n = std::size(kAllSchedules);
  for (std::size_t i = 0; i < n; ++i) {
    const bool bar = std::string_view(conjunction) == "|";
    if (i > 0 && (bar || i + 1 < n)) {
      out += bar ? "|" : ", ";
    } else if (i > 0) {
      out += ' ';
      out += conjunction;
      out += ' ';
    }
    out += to_string(kAllSchedules[i]);
  }
  return out;
}

Schedule parse_schedule(const std::string& name) {
  for (Schedule s : kAllSchedules) {
    if (name == to_string(s)) return s;
  }
  throw UsageError("unknown schedule '" + name + "': use " + schedule_names("or"));
}

const char* to_string(Compat compat) { return compat == Compat::v2 ? "v2" : "v1"; }

const char* to_string(DecoderKernels d) {
  switch (d) {
    case DecoderKernels::automatic: return "auto";
    case DecoderKernels::eager: return "eager";
    case DecoderKernels::fused: return "fused";
  }
  return "?";
}

DecoderKernels parse_decoder_kernels(const std::string& name) {
  for (DecoderKernels d : {DecoderKernels::automatic, DecoderKernels::eager, DecoderKernels::fused})
    if (name == to_string(d)) return d;
  throw UsageError("--decoder: unknown kind '" + name + "'; use auto, eager or fused");
}

Compat parse_compat(const std::string& name) {
  if (name == "v1") return Compat::v1;
  if (name == "v2") return Compat::v2;
  throw UsageError("unknown --compat '" + name +
                   "': use v1 (registered / unregistered) or v2 "
                   "(unpinned / pinned)");
}

Loop parse_loop(const std::string& name) {
  if (name == to_string(Loop::copy_back)) return Loop::copy_back;
  if (name == to_string(Loop::offload_param)) return Loop::offload_param;
  throw UsageError("unknown loop '" + name + "'");
}

Arm parse_arm(const std::string& name) {
  for (Arm a : kAllArms) {
    if (name == to_string(a)) return a;
  }
  throw UsageError("unknown arm '" + name +
                   "': use registered, unregistered, pageable or hostalloc");
}

DeviceKind parse_device_kind(const std::string& name) {
  if (name == to_string(DeviceKind::automatic)) return DeviceKind::automatic;
  if (const BackendInfo* b = find_backend(name)) return b->kind;
  throw UsageError("unknown device '" + name + "': use " + backend_names("or", true));
}

nlohmann::json model_architecture_json(const ModelShape& m) {
  if (!m.decoder()) return nullptr;
  const DecoderArch& a = m.arch;
  return {{"name", m.name},
          {"model_type", a.model_type},
          {"intermediate_size", a.intermediate},
          {"num_attention_heads", a.heads},
          {"num_key_value_heads", a.kv_heads},
          {"head_dim", a.head_dim},
          {"attention_bias", a.attention_bias},
          {"tie_word_embeddings", a.tie_embeddings},
          {"rope_theta", a.rope_theta},
          {"rms_norm_eps", a.rms_norm_eps},
          {"config_layers", a.config_layers}};
}

void model_from_json(const nlohmann::json& d, ModelShape& m) {
  m.name.clear();
  m.arch = DecoderArch{};
  if (d.is_null()) return;
  m.name = d.at("name").get<std::string>();
  DecoderArch& a = m.arch;
  a.model_type = d.at("model_type").get<std::string>();
  a.intermediate = d.at("intermediate_size").get<std::int64_t>();
  a.heads = d.at("num_attention_heads").get<std::int64_t>();
  a.kv_heads = d.at("num_key_value_heads").get<std::int64_t>();
  a.head_dim = d.at("head_dim").get<std::int64_t>();
  a.attention_bias = d.at("attention_bias").get<bool>();
  a.tie_embeddings = d.at("tie_word_embeddings").get<bool>();
  a.rope_theta = d.at("rope_theta").get<double>();
  a.rms_norm_eps = d.at("rms_norm_eps").get<double>();
  a.config_layers = d.at("config_layers").get<std::int64_t>();
}

void to_json(nlohmann::json& j, const RunConfig& c) {
  j = nlohmann::json::object();
  for (const Setting& s : settings()) {
    if (!s.json_key.empty()) j[s.json_key] = s.write(c);
  }
}

void from_json(const nlohmann::json& j, RunConfig& c) {
  c = RunConfig{};
  for (const Setting& s : settings()) {
    if (!s.json_key.empty() && j.contains(s.json_key)) s.read(j.at(s.json_key), c);
  }
}

}  // namespace zob
