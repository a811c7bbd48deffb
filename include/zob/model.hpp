// The synthetic model of docs/anatomy.md §2: its parameter layout in one flat array, its size,
// and its deterministic initial values and token ids.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "zob/config.hpp"

namespace zob {

// params = 2*V*h + n*(8*h*h + 5*h) (docs/anatomy.md §2)
std::int64_t parameter_count(const ModelShape& shape);
// "synthetic-h{hidden}-l{layers}": the model's name in results.
std::string model_name(const ModelShape& shape);
// Parameters in billions, rounded to 3 decimals (DRIVERRESULT's params_b).
double params_billions(std::int64_t params);

struct TensorSlice {
  std::string name;        // "layer3.fc1.weight"
  std::int64_t offset = 0; // element offset in the flat parameter array
  std::int64_t rows = 0;   // weight [out, in]; a bias is [1, out]
  std::int64_t cols = 0;
  std::int64_t count() const { return rows * cols; }
};

// A module is the unit of fetch / release / gradient offload: the embedding, each block,
// the head. Its tensors are contiguous in the flat array.
struct ModuleSlice {
  std::string name;        // "embedding", "layer3", "head"
  std::int64_t offset = 0;
  std::int64_t count = 0;
  std::vector<TensorSlice> tensors;
};

// Flat order: embedding [V,h]; per layer fc1.weight [4h,h], fc1.bias [4h], fc2.weight [h,4h],
// fc2.bias [h]; head [V,h].
struct ModelLayout {
  ModelShape shape;
  std::vector<ModuleSlice> modules;  // embedding, layer0..layer{n-1}, head
  std::int64_t total = 0;
  static ModelLayout build(const ModelShape& shape);
};

// Deterministic initial fp32 values, a function of (seed, element index) only, so any thread
// split gives the same array. Weights uniform in ±1/sqrt(fan_in); biases likewise.
void initial_parameters(const ModelLayout& layout, std::uint64_t seed, float* out);
// Token ids in [0, vocab), a function of (seed, position): the same every step and arm.
std::vector<std::int32_t> token_ids(std::int64_t tokens, std::int64_t vocab, std::uint64_t seed);

// 64-bit checksum of an fp32 array's bits, independent of thread count; as 16 hex digits.
std::string checksum_hex(const float* data, std::int64_t n);

}  // namespace zob
