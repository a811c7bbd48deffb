#include "zob/config.hpp"

#include <iterator>
#include <nlohmann/json.hpp>
#include <string_view>

#include "zob/backends.hpp"
#include "zob/errors.hpp"

namespace zob {

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

namespace {
constexpr Schedule kSchedules[] = {Schedule::stock, Schedule::overlap, Schedule::deepspeed};
}  // namespace

std::string schedule_names(const char* conjunction) {
  std::string out;
  const std::size_t n = std::size(kSchedules);
  for (std::size_t i = 0; i < n; ++i) {
    const bool bar = std::string_view(conjunction) == "|";
    if (i > 0 && (bar || i + 1 < n)) {
      out += bar ? "|" : ", ";
    } else if (i > 0) {
      out += ' ';
      out += conjunction;
      out += ' ';
    }
    out += to_string(kSchedules[i]);
  }
  return out;
}

Schedule parse_schedule(const std::string& name) {
  for (Schedule s : kSchedules) {
    if (name == to_string(s)) return s;
  }
  throw UsageError("unknown schedule '" + name + "': use " + schedule_names("or"));
}

const char* to_string(Compat compat) { return compat == Compat::v2 ? "v2" : "v1"; }

Compat parse_compat(const std::string& name) {
  if (name == "v1") return Compat::v1;
  if (name == "v2") return Compat::v2;
  throw UsageError("unknown --compat '" + name + "': use v1 (registered / unregistered) or v2 "
                   "(unpinned / pinned)");
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

namespace {

void model_from_json(const nlohmann::json& j, ModelShape& m) {
  m.name.clear();
  m.arch = DecoderArch{};
  if (!j.contains("model") || j.at("model").is_null()) return;
  const nlohmann::json& d = j.at("model");
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

}  // namespace

void to_json(nlohmann::json& j, const RunConfig& c) {
  std::vector<std::string> arms;
  for (Arm a : c.arms) arms.emplace_back(to_string(a));
  j = nlohmann::json{
      {"vocab", c.model.vocab},       {"hidden", c.model.hidden},
      {"layers", c.model.layers},     {"batch", c.batch},
      {"seq", c.seq},                 {"steps", c.steps},
      {"warmup", c.warmup},           {"device", to_string(c.device)},
      {"device_index", c.device_index}, {"arms", arms},
      {"loop", to_string(c.loop)},    {"chunk_elems", c.chunk_elems},
      {"sub_group_size", c.sub_group_size}, {"threads", c.threads},
      {"seed", c.seed},               {"json_path", c.json_path},
      {"timeout_s", c.timeout_s},
      {"gpus", c.gpus},
      {"schedule", to_string(c.schedule)},
      {"cpu_affinity", c.cpu_affinity},
      {"chunk_elems_sweep", c.chunk_elems_sweep},
      {"sub_group_size_sweep", c.sub_group_size_sweep},
      {"repeats", c.repeats},         {"trace_path", c.trace_path},
      {"skip_preflight", c.skip_preflight},
      {"compat", to_string(c.compat)},
      {"ablate_register", c.ablate_register},
      {"dry_run", c.dry_run},
      {"model", model_architecture_json(c.model)},
  };
}

void from_json(const nlohmann::json& j, RunConfig& c) {
  c.model.vocab = j.at("vocab").get<std::int64_t>();
  c.model.hidden = j.at("hidden").get<std::int64_t>();
  c.model.layers = j.at("layers").get<std::int64_t>();
  model_from_json(j, c.model);
  c.batch = j.at("batch").get<std::int64_t>();
  c.seq = j.at("seq").get<std::int64_t>();
  c.steps = j.at("steps").get<int>();
  c.warmup = j.at("warmup").get<int>();
  c.device = parse_device_kind(j.at("device").get<std::string>());
  c.device_index = j.at("device_index").get<int>();
  c.arms.clear();
  for (const auto& a : j.at("arms")) c.arms.push_back(parse_arm(a.get<std::string>()));
  const auto loop = j.at("loop").get<std::string>();
  if (loop == "copy_back") c.loop = Loop::copy_back;
  else if (loop == "offload_param") c.loop = Loop::offload_param;
  else throw UsageError("unknown loop '" + loop + "'");
  c.chunk_elems = j.at("chunk_elems").get<std::int64_t>();
  c.sub_group_size = j.at("sub_group_size").get<std::int64_t>();
  c.threads = j.at("threads").get<int>();
  c.seed = j.at("seed").get<std::uint64_t>();
  c.json_path = j.at("json_path").get<std::string>();
  c.timeout_s = j.at("timeout_s").get<double>();
  c.gpus = j.value("gpus", 1);
  // Keys added after the first schema: absent means the old behaviour.
  c.schedule = parse_schedule(j.value("schedule", std::string("stock")));
  c.cpu_affinity = j.value("cpu_affinity", std::vector<int>{});
  c.chunk_elems_sweep = j.value("chunk_elems_sweep", std::vector<std::int64_t>{});
  c.sub_group_size_sweep = j.value("sub_group_size_sweep", std::vector<std::int64_t>{});
  // Optional: added after the first release of the format.
  c.repeats = j.value("repeats", 1);
  c.trace_path = j.value("trace_path", std::string());
  c.skip_preflight = j.value("skip_preflight", false);
  c.compat = parse_compat(j.value("compat", std::string("v1")));
  c.ablate_register = j.value("ablate_register", false);
  c.dry_run = j.value("dry_run", false);
}

}  // namespace zob
