// --model: the built-in table of published decoder configs, and the reader of a local
// Hugging Face config.json (docs/models.md).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "zob/errors.hpp"
#include "zob/model.hpp"
#include "zob/settings.hpp"

namespace zob {
namespace {

// intermediate_size's ceiling: 16 x --hidden's, far above any published MLP (4-8 x hidden).
constexpr std::int64_t kMaxIntermediate = limits::hidden * 16;

struct Published {
  const char* hf_id;
  const char* model_type;
  std::int64_t vocab, hidden, intermediate, layers, heads, kv_heads, head_dim;
  bool bias, tied;
  double rope_theta, rms_norm_eps;
};

// The values of each model's config.json, https://huggingface.co/<hf_id>/blob/main/config.json
// (head_dim 0: config.json has none, hidden / heads). Qwen2 always has q/k/v biases.
constexpr Published kPublished[] = {
    {"meta-llama/Llama-3.2-1B", "llama", 128256, 2048, 8192, 16, 32, 8, 64, false, true, 500000.0,
     1e-5},
    {"meta-llama/Llama-3.2-3B", "llama", 128256, 3072, 8192, 28, 24, 8, 128, false, true, 500000.0,
     1e-5},
    {"meta-llama/Llama-3.1-8B", "llama", 128256, 4096, 14336, 32, 32, 8, 0, false, false, 500000.0,
     1e-5},
    {"meta-llama/Llama-3.1-70B", "llama", 128256, 8192, 28672, 80, 64, 8, 0, false, false, 500000.0,
     1e-5},
    {"mistralai/Mistral-7B-v0.3", "mistral", 32768, 4096, 14336, 32, 32, 8, 0, false, false,
     1000000.0, 1e-5},
    {"Qwen/Qwen2.5-0.5B", "qwen2", 151936, 896, 4864, 24, 14, 2, 0, true, true, 1000000.0, 1e-6},
    {"Qwen/Qwen2.5-1.5B", "qwen2", 151936, 1536, 8960, 28, 12, 2, 0, true, true, 1000000.0, 1e-6},
    {"Qwen/Qwen2.5-3B", "qwen2", 151936, 2048, 11008, 36, 16, 2, 0, true, true, 1000000.0, 1e-6},
    {"Qwen/Qwen2.5-7B", "qwen2", 152064, 3584, 18944, 28, 28, 4, 0, true, false, 1000000.0, 1e-6},
    {"Qwen/Qwen2.5-14B", "qwen2", 152064, 5120, 13824, 48, 40, 8, 0, true, false, 1000000.0, 1e-5},
    {"Qwen/Qwen2.5-32B", "qwen2", 152064, 5120, 27648, 64, 40, 8, 0, true, false, 1000000.0, 1e-5},
    {"Qwen/Qwen2.5-72B", "qwen2", 152064, 8192, 29568, 80, 64, 8, 0, true, false, 1000000.0, 1e-5},
};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// Levenshtein distance, for "did you mean".
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1u : 0u)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

ModelShape shape_of(const Published& p) {
  ModelShape s(p.vocab, p.hidden, p.layers);
  const std::string id = p.hf_id;
  s.name = id.substr(id.find('/') + 1);
  DecoderArch& a = s.arch;
  a.model_type = p.model_type;
  a.intermediate = p.intermediate;
  a.heads = p.heads;
  a.kv_heads = p.kv_heads;
  a.head_dim = p.head_dim > 0 ? p.head_dim : p.hidden / p.heads;
  a.attention_bias = p.bias;
  a.tie_embeddings = p.tied;
  a.rope_theta = p.rope_theta;
  a.rms_norm_eps = p.rms_norm_eps;
  a.config_layers = p.layers;
  return s;
}

[[noreturn]] void unknown_name(const std::string& given) {
  std::string names, closest;
  std::size_t best = std::string::npos;
  for (const BuiltinModel& m : builtin_models()) {
    names += (names.empty() ? "" : ", ") + m.name;
    for (const std::string& candidate : {m.name, m.hf_id}) {
      const std::size_t d = edit_distance(lower(given), lower(candidate));
      if (d < best) best = d, closest = candidate;
    }
  }
  const bool close = best <= std::max<std::size_t>(3, given.size() / 4);
  throw UsageError("--model '" + given + "': no such file or folder, and not a built-in model" +
                   (close ? " (did you mean " + closest + "?)" : "") + "; built-in: " + names +
                   ", or a path to a config.json");
}

// Reads the fields of one config.json, naming the file in every refusal.
class ConfigFields {
 public:
  ConfigFields(const nlohmann::json& j, std::string origin) : j_(j), origin_(std::move(origin)) {}
  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  // A whole number (1e3 written as a float counts) within [min, max]; a refusal names the key,
  // its value as the file has it and the range.
  std::int64_t integer(const char* key, std::int64_t min, std::int64_t max) const {
    if (!has(key)) fail(std::string("has no ") + key + "; it is required: " + range(min, max));
    const nlohmann::json& v = j_.at(key);
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(max)) {
      fail_key(key, v, "is out of range; give " + range(min, max));
    }
    std::int64_t n = 0;
    if (v.is_number_integer()) {
      n = v.get<std::int64_t>();
    } else if (v.is_number_float() && v.get<double>() == std::floor(v.get<double>())) {
      const double d = v.get<double>();
      if (!(d >= static_cast<double>(min) && d <= static_cast<double>(max))) {
        fail_key(key, v, "is out of range; give " + range(min, max));
      }
      n = static_cast<std::int64_t>(d);
    } else {
      fail_key(key, v, "is not a whole number; give " + range(min, max));
    }
    if (n < min || n > max) fail_key(key, v, "is out of range; give " + range(min, max));
    return n;
  }
  std::int64_t integer_or(const char* key, std::int64_t fallback, std::int64_t min,
                          std::int64_t max) const {
    return has(key) ? integer(key, min, max) : fallback;
  }
  double number_or(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_number()) fail(std::string(key) + " is not a number");
    return j_.at(key).get<double>();
  }
  bool boolean_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_boolean()) fail(std::string(key) + " is not true or false");
    return j_.at(key).get<bool>();
  }
  std::string text_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_string()) fail(std::string(key) + " is not a string");
    return j_.at(key).get<std::string>();
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw UsageError("--model: " + origin_ + " " + what);
  }
  // "--model: FILE: hidden_size 1e12 is out of range; give ...; edit that key in FILE".
  [[noreturn]] void fail_key(const char* key, const nlohmann::json& value,
                             const std::string& what) const {
    throw UsageError("--model: " + origin_ + ": " + key + " " + value.dump() + " " + what +
                     "; edit " + key + " in " + origin_);
  }
  static std::string range(std::int64_t min, std::int64_t max) {
    return "a whole number from " + std::to_string(min) + " to " + std::to_string(max);
  }

 private:
  const nlohmann::json& j_;
  std::string origin_;
};

// rope_theta: the top-level key, or newer transformers' rope_parameters.rope_theta.
double rope_theta_of(const nlohmann::json& j, const ConfigFields& f) {
  if (f.has("rope_parameters") && j.at("rope_parameters").is_object()) {
    const ConfigFields rope(j.at("rope_parameters"), "rope_parameters");
    if (rope.has("rope_theta")) return rope.number_or("rope_theta", 0);
  }
  return f.number_or("rope_theta", 10000.0);
}

// "--model: FILE: JSON syntax error at line 3, column 5: <the parser's words>; fix ...".
[[noreturn]] void json_syntax_error(const std::string& text, const std::string& origin,
                                    const nlohmann::json::parse_error& e) {
  const std::size_t end = std::min(e.byte > 0 ? e.byte - 1 : 0, text.size());
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < end; ++i) {
    if (text[i] == '\n') ++line, column = 1;
    else ++column;
  }
  std::string detail = e.what();
  const std::size_t colon = detail.find(": ", detail.find("parse error"));
  if (colon != std::string::npos) detail = detail.substr(colon + 2);
  throw UsageError(fmt::format(
      "--model: {}: JSON syntax error at line {}, column {}: {}; fix the JSON there (a missing "
      "comma, quote or bracket, a trailing comma, a comment: JSON has none)",
      origin, line, column, detail));
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) throw UsageError("--model: cannot read " + path.string() + "; check its permissions");
  return text.str();
}

}  // namespace

const std::vector<BuiltinModel>& builtin_models() {
  static const std::vector<BuiltinModel> table = [] {
    std::vector<BuiltinModel> t;
    for (const Published& p : kPublished) {
      const std::string id = p.hf_id;
      t.push_back({id.substr(id.find('/') + 1), id,
                   "https://huggingface.co/" + id + "/blob/main/config.json", shape_of(p)});
    }
    return t;
  }();
  return table;
}

void check_decoder_arch(const ModelShape& s) {
  const DecoderArch& a = s.arch;
  const auto bad = [&](const std::string& what) {
    throw UsageError("--model " + s.name + ": " + what);
  };
  const std::pair<const char*, std::int64_t> positive[] = {{"vocab_size", s.vocab},
                                                           {"hidden_size", s.hidden},
                                                           {"intermediate_size", a.intermediate},
                                                           {"num_attention_heads", a.heads},
                                                           {"num_key_value_heads", a.kv_heads},
                                                           {"head_dim", a.head_dim}};
  for (const auto& [key, value] : positive) {
    if (value <= 0) bad(std::string(key) + " " + std::to_string(value) + " must be at least 1");
  }
  if (s.layers < 0) bad("num_hidden_layers " + std::to_string(s.layers) + " must be at least 0");
  if (a.heads % a.kv_heads != 0) {
    bad("num_attention_heads " + std::to_string(a.heads) + " is not a multiple of " +
        "num_key_value_heads " + std::to_string(a.kv_heads) + "; give a divisor of it");
  }
  if (a.head_dim % 2 != 0) {
    bad("head_dim " + std::to_string(a.head_dim) +
        " is odd (RoPE rotates pairs; without head_dim in config.json it is hidden_size / "
        "num_attention_heads); give an even head_dim");
  }
  if (!(a.rope_theta > 0)) bad("rope_theta must be > 0");
  if (!(a.rms_norm_eps > 0)) bad("rms_norm_eps must be > 0");
}

ModelShape model_from_config_json(const std::string& json_text, const std::string& name,
                                  const std::string& origin) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    json_syntax_error(json_text, origin, e);
  }
  if (!j.is_object()) {
    throw UsageError("--model: " + origin + " is not a JSON object; a config.json is one " +
                     "{...} of keys such as \"model_type\" and \"hidden_size\"");
  }
  const ConfigFields f(j, origin);
  const std::string type = f.text_or("model_type", "");
  if (type != "llama" && type != "mistral" && type != "qwen2") {
    f.fail("has model_type '" + type +
           "'; accepted: llama, mistral, qwen2 (decoders of the "
           "Llama shape, docs/models.md)");
  }
  if (f.text_or("hidden_act", "silu") != "silu") f.fail("has hidden_act other than silu");
  if (f.boolean_or("mlp_bias", false)) f.fail("has mlp_bias true, which is not modelled");
  if (type == "llama" && f.boolean_or("attention_bias", false)) {
    f.fail("has attention_bias true (biases on o_proj too), which is not modelled");
  }
  // Each key within the range its flag has (--vocab, --hidden, --layers), the others within
  // what the sizes around them allow, so no refusal later names a flag the user never gave.
  // One at a time, in the file's usual order (a constructor's arguments have none).
  const std::int64_t vocab = f.integer("vocab_size", 1, limits::vocab);
  const std::int64_t hidden = f.integer("hidden_size", 1, limits::hidden);
  const std::int64_t layers = f.integer("num_hidden_layers", 1, limits::layers);
  ModelShape s(vocab, hidden, layers);
  s.name = name;
  DecoderArch& a = s.arch;
  a.model_type = type;
  a.intermediate = f.integer("intermediate_size", 1, kMaxIntermediate);
  a.heads = f.integer("num_attention_heads", 1, s.hidden);
  // Each config class's own default when the key is absent or null (transformers' __init__).
  const std::int64_t kv_default = type == "llama" ? a.heads : type == "mistral" ? 8 : 32;
  a.kv_heads = f.integer_or("num_key_value_heads", kv_default, 1, a.heads);
  a.head_dim = f.integer_or("head_dim", s.hidden / a.heads, 1, limits::hidden);
  a.attention_bias = type == "qwen2";
  a.tie_embeddings = f.boolean_or("tie_word_embeddings", false);
  a.rope_theta = rope_theta_of(j, f);
  a.rms_norm_eps = f.number_or("rms_norm_eps", 1e-6);
  a.config_layers = s.layers;
  check_decoder_arch(s);
  return s;
}

ModelShape resolve_model(const std::string& given) {
  if (given.empty()) throw UsageError("--model: empty name; give a built-in name or a path");
  std::error_code ec;
  std::filesystem::path path(given);
  if (std::filesystem::is_directory(path, ec)) path /= "config.json";
  if (std::filesystem::exists(path, ec)) {
    if (!std::filesystem::is_regular_file(path, ec)) {
      throw UsageError("--model " + given + ": " + path.string() + " is not a file");
    }
    return model_from_config_json(read_text(path), given, path.string());
  }
  if (std::filesystem::is_directory(given, ec)) {
    throw UsageError("--model " + given + ": the folder holds no config.json");
  }
  for (const BuiltinModel& m : builtin_models()) {
    if (lower(given) == lower(m.name) || lower(given) == lower(m.hf_id)) {
      ModelShape s = m.shape;
      s.name = given;
      return s;
    }
  }
  unknown_name(given);
}

}  // namespace zob
