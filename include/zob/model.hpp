// The synthetic model of docs/anatomy.md §2: its parameter layout in one flat array, its size,
// and its deterministic initial values and token ids.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "zob/config.hpp"

namespace zob {

// Synthetic: params = 2*V*h + n*(8*h*h + 5*h) (docs/anatomy.md §2). Decoder: Hugging Face's
// count, sum(p.numel() for p in model.parameters()) (docs/models.md).
std::int64_t parameter_count(const ModelShape& shape);
// The model's name in results: --model as given, else "synthetic-h{hidden}-l{layers}".
std::string model_name(const ModelShape& shape);
// Parameters in billions, rounded to 3 decimals (DRIVERRESULT's params_b).
double params_billions(std::int64_t params);

struct TensorSlice {
  std::string name;         // "layer3.fc1.weight"
  std::int64_t offset = 0;  // element offset in the flat parameter array
  std::int64_t rows = 0;    // weight [out, in]; a bias is [1, out]
  std::int64_t cols = 0;
  std::int64_t count() const { return rows * cols; }
};

// A module is the unit of fetch / release / gradient offload: the embedding, each block,
// the head. Its tensors are contiguous in the flat array.
struct ModuleSlice {
  std::string name;  // "embedding", "layer3", "head"
  std::int64_t offset = 0;
  std::int64_t count = 0;
  std::vector<TensorSlice> tensors;
  // Tensors another module owns that this one also computes with: a decoder's tied lm_head
  // (the embedding table, in the head). Fetched with the module, after its own tensors, as
  // ZeRO-3 fetches a shared parameter again; their gradient goes to the owner.
  std::vector<TensorSlice> shared;
  std::int64_t shared_count() const {
    std::int64_t n = 0;
    for (const auto& t : shared) n += t.count();
    return n;
  }
  std::int64_t fetch_count() const { return count + shared_count(); }
};

// Synthetic flat order: embedding [V,h]; per layer fc1.weight [4h,h], fc1.bias [4h],
// fc2.weight [h,4h], fc2.bias [h]; head [V,h]. Decoder: Hugging Face's named_parameters order
// (docs/models.md): embed_tokens; per layer q/k/v (+biases), o, gate, up, down, the two norms;
// the final norm and lm_head (absent when tied) in the head.
struct ModelLayout {
  ModelShape shape;
  std::vector<ModuleSlice> modules;  // embedding, layer0..layer{n-1}, head
  std::int64_t total = 0;
  static ModelLayout build(const ModelShape& shape);
};

// ---- decoder transformers (--model; src/model/decoder_configs.cpp, docs/models.md) ----

// A built-in config: published values of the model's config.json on the Hugging Face hub.
struct BuiltinModel {
  std::string name;    // "Qwen2.5-7B"
  std::string hf_id;   // "Qwen/Qwen2.5-7B" (also accepted by --model)
  std::string source;  // the config.json URL the values come from
  ModelShape shape;
};
const std::vector<BuiltinModel>& builtin_models();

// --model NAME|PATH: an existing file (config.json) or folder holding config.json is read;
// otherwise a built-in name or Hugging Face id, case-insensitive. UsageError (one line: the
// accepted names, the closest one) otherwise. The result's `name` is the text given.
ModelShape resolve_model(const std::string& name_or_path);
// A Hugging Face config.json's text -> the decoder it describes, named `name`; `origin` names
// the file in errors. UsageError on an unknown model_type, a missing or inconsistent field.
ModelShape model_from_config_json(const std::string& json_text, const std::string& name,
                                  const std::string& origin);
// UsageError unless the decoder's sizes are consistent (heads divisible by kv_heads, an even
// head_dim for the rotary embedding, everything positive).
void check_decoder_arch(const ModelShape& shape);

// Deterministic initial fp32 values, a function of (seed, element index) only, so any thread
// split gives the same array. Weights uniform in ±1/sqrt(fan_in); biases likewise.
void initial_parameters(const ModelLayout& layout, std::uint64_t seed, float* out);
// Elements [begin, end) of that array into out[0 .. end - begin): a rank makes only its part
// (no whole array per rank). `pool`, if given, is used for large ranges.
class ThreadPool;
void initial_parameters_range(const ModelLayout& layout, std::uint64_t seed, std::int64_t begin,
                              std::int64_t end, float* out, ThreadPool* pool = nullptr);
// Token ids in [0, vocab), a function of (seed, position): the same every step and arm.
std::vector<std::int32_t> token_ids(std::int64_t tokens, std::int64_t vocab, std::uint64_t seed);

// 64-bit checksum of an fp32 array's bits, independent of thread count; as 16 hex digits.
std::string checksum_hex(const float* data, std::int64_t n);

}  // namespace zob
