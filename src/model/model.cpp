// The synthetic model: flat parameter layout, deterministic initial values, token ids and a
// thread-count-independent checksum. Every random value is a pure function of (seed, index),
// so any split of the work over threads produces the same bits.
#include "zob/model.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <tuple>
#include <vector>

#include "zob/errors.hpp"
#include "zob/thread_pool.hpp"

namespace zob {
namespace {

// splitmix64's finaliser: a bijective 64-bit mix with good avalanche.
constexpr std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ull;
// Distinct streams for the two uses of the seed, so token ids and weights are unrelated.
constexpr std::uint64_t kParamStream = 0x5041524d53ull;    // "PARMS"
constexpr std::uint64_t kTokenStream = 0x544f4b454e53ull;  // "TOKENS"

std::uint64_t counter_hash(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  return mix64(mix64(seed ^ stream) + (index + 1) * kGolden);
}

// Below this many elements a pool costs more than it saves.
constexpr std::int64_t kParallelThreshold = std::int64_t{1} << 20;

void check_shape(const ModelShape& s) {
  if (s.vocab <= 0 || s.hidden <= 0 || s.layers < 0) {
    throw UsageError("model shape must have vocab > 0, hidden > 0, layers >= 0 (got vocab " +
                     std::to_string(s.vocab) + ", hidden " + std::to_string(s.hidden) +
                     ", layers " + std::to_string(s.layers) + ")");
  }
}

// One module of a layout under construction: its tensors laid out from `offset` on.
ModuleSlice make_module(
    std::string name, std::int64_t& offset,
    const std::vector<std::tuple<std::string, std::int64_t, std::int64_t>>& ts) {
  ModuleSlice m;
  m.name = std::move(name);
  m.offset = offset;
  for (const auto& [tname, rows, cols] : ts) {
    TensorSlice t;
    t.name = tname;
    t.offset = offset;
    t.rows = rows;
    t.cols = cols;
    offset += t.count();
    m.tensors.push_back(std::move(t));
  }
  m.count = offset - m.offset;
  return m;
}

// Hugging Face's named_parameters order of LlamaForCausalLM / MistralForCausalLM /
// Qwen2ForCausalLM, cut into the modules embedding, layerN, head (final norm + lm_head).
ModelLayout build_decoder_layout(const ModelShape& shape) {
  const DecoderArch& a = shape.arch;
  check_decoder_arch(shape);
  ModelLayout layout;
  layout.shape = shape;
  const std::int64_t V = shape.vocab, h = shape.hidden, F = a.intermediate;
  const std::int64_t q = a.heads * a.head_dim, kv = a.kv_heads * a.head_dim;
  std::int64_t offset = 0;
  layout.modules.push_back(make_module("embedding", offset, {{"model.embed_tokens.weight", V, h}}));
  for (std::int64_t i = 0; i < shape.layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    std::vector<std::tuple<std::string, std::int64_t, std::int64_t>> ts;
    for (const auto& [proj, out] :
         {std::pair<const char*, std::int64_t>{"q_proj", q}, {"k_proj", kv}, {"v_proj", kv}}) {
      ts.emplace_back(p + "self_attn." + proj + ".weight", out, h);
      if (a.attention_bias) ts.emplace_back(p + "self_attn." + proj + ".bias", 1, out);
    }
    ts.emplace_back(p + "self_attn.o_proj.weight", h, q);
    ts.emplace_back(p + "mlp.gate_proj.weight", F, h);
    ts.emplace_back(p + "mlp.up_proj.weight", F, h);
    ts.emplace_back(p + "mlp.down_proj.weight", h, F);
    ts.emplace_back(p + "input_layernorm.weight", 1, h);
    ts.emplace_back(p + "post_attention_layernorm.weight", 1, h);
    layout.modules.push_back(make_module("layer" + std::to_string(i), offset, ts));
  }
  std::vector<std::tuple<std::string, std::int64_t, std::int64_t>> head{
      {"model.norm.weight", 1, h}};
  if (!a.tie_embeddings) head.emplace_back("lm_head.weight", V, h);
  layout.modules.push_back(make_module("head", offset, head));
  if (a.tie_embeddings) layout.modules.back().shared.push_back(layout.modules.front().tensors[0]);
  layout.total = offset;
  return layout;
}

}  // namespace

std::int64_t parameter_count(const ModelShape& s) {
  const std::int64_t h = s.hidden;
  if (s.decoder()) {
    const DecoderArch& a = s.arch;
    const std::int64_t q = a.heads * a.head_dim, kv = a.kv_heads * a.head_dim;
    const std::int64_t attention = h * q + 2 * h * kv + q * h + (a.attention_bias ? q + 2 * kv : 0);
    const std::int64_t mlp = 3 * h * a.intermediate;
    const std::int64_t per_layer = attention + mlp + 2 * h;
    return s.vocab * h + s.layers * per_layer + h + (a.tie_embeddings ? 0 : s.vocab * h);
  }
  return 2 * s.vocab * h + s.layers * (8 * h * h + 5 * h);
}

std::string model_name(const ModelShape& s) {
  if (s.decoder()) return s.name;
  return fmt::format("synthetic-h{}-l{}", s.hidden, s.layers);
}

double params_billions(std::int64_t params) {
  return std::round(static_cast<double>(params) / 1e6) / 1e3;
}

ModelLayout ModelLayout::build(const ModelShape& shape) {
  check_shape(shape);
  if (shape.decoder()) return build_decoder_layout(shape);
  ModelLayout layout;
  layout.shape = shape;
  const std::int64_t V = shape.vocab, h = shape.hidden, F = 4 * h;
  std::int64_t offset = 0;
  auto add_module = [&](std::string name,
                        std::vector<std::tuple<std::string, std::int64_t, std::int64_t>> ts) {
    ModuleSlice m;
    m.name = std::move(name);
    m.offset = offset;
    for (auto& [tname, rows, cols] : ts) {
      TensorSlice t;
      t.name = m.name + "." + tname;
      t.offset = offset;
      t.rows = rows;
      t.cols = cols;
      offset += t.count();
      m.tensors.push_back(std::move(t));
    }
    m.count = offset - m.offset;
    layout.modules.push_back(std::move(m));
  };
  add_module("embedding", {{"weight", V, h}});
  for (std::int64_t i = 0; i < shape.layers; ++i) {
    add_module(
        "layer" + std::to_string(i),
        {{"fc1.weight", F, h}, {"fc1.bias", 1, F}, {"fc2.weight", h, F}, {"fc2.bias", 1, h}});
  }
  add_module("head", {{"weight", V, h}});
  layout.total = offset;
  return layout;
}

void initial_parameters(const ModelLayout& layout, std::uint64_t seed, float* out) {
  initial_parameters_range(layout, seed, 0, layout.total, out);
}

void initial_parameters_range(const ModelLayout& layout, std::uint64_t seed, std::int64_t begin,
                              std::int64_t end, float* out, ThreadPool* pool) {
  const std::int64_t h = layout.shape.hidden;
  std::unique_ptr<ThreadPool> own;
  if (pool == nullptr && end - begin >= kParallelThreshold) {
    own = std::make_unique<ThreadPool>(available_cpus());
    pool = own.get();
  }
  for (const auto& module : layout.modules) {
    for (const auto& t : module.tensors) {
      // The tensor's elements inside [begin, end), as indices into the tensor.
      const std::int64_t lo = std::max<std::int64_t>(begin - t.offset, 0);
      const std::int64_t hi = std::min<std::int64_t>(end - t.offset, t.count());
      if (lo >= hi) continue;
      // fan_in of a weight [out, in] is `in`; a bias takes the fan_in of its layer's weight
      // (PyTorch's Linear init); the embedding and head tables have rows of length h.
      std::int64_t fan_in = t.cols;
      if (t.rows == 1) fan_in = (t.name.ends_with("fc2.bias")) ? 4 * h : h;
      const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
      // A decoder's RMSNorm weights start at 1, as Hugging Face initialises them.
      const bool ones = layout.shape.decoder() && t.name.ends_with("norm.weight");
      const std::int64_t at = t.offset - begin;  // out[at + i]: element t.offset + i (>= 0)
      auto fill = [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = lo + b; i < lo + e; ++i) {
          if (ones) {
            out[at + i] = 1.0f;
            continue;
          }
          const std::uint64_t g = static_cast<std::uint64_t>(t.offset + i);
          const double u = static_cast<double>(counter_hash(seed, kParamStream, g) >> 40) *
                           (1.0 / 16777216.0);  // [0, 1), 24 bits
          out[at + i] = static_cast<float>(bound * (2.0 * u - 1.0));
        }
      };
      if (pool != nullptr && hi - lo >= kParallelThreshold) {
        pool->parallel_for(hi - lo, fill);
      } else {
        fill(0, hi - lo);
      }
    }
  }
}

std::vector<std::int32_t> token_ids(std::int64_t tokens, std::int64_t vocab, std::uint64_t seed) {
  if (tokens < 0 || vocab <= 0 || vocab > INT32_MAX) {
    throw UsageError("token_ids: need tokens >= 0 and 0 < vocab <= 2^31-1 (got tokens " +
                     std::to_string(tokens) + ", vocab " + std::to_string(vocab) + ")");
  }
  std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens));
  for (std::int64_t t = 0; t < tokens; ++t) {
    ids[static_cast<std::size_t>(t)] =
        static_cast<std::int32_t>(counter_hash(seed, kTokenStream, static_cast<std::uint64_t>(t)) %
                                  static_cast<std::uint64_t>(vocab));
  }
  return ids;
}

std::string checksum_hex(const float* data, std::int64_t n) {
  // Fixed-size blocks hashed independently (in parallel for big arrays), then combined in
  // block order: the result depends on the data only, never on the thread count.
  constexpr std::int64_t kBlock = std::int64_t{1} << 16;
  const std::int64_t blocks = n <= 0 ? 0 : (n + kBlock - 1) / kBlock;
  std::vector<std::uint64_t> block_hash(static_cast<std::size_t>(blocks));
  auto hash_blocks = [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      const std::int64_t begin = b * kBlock;
      const std::int64_t end = std::min(n, begin + kBlock);
      std::uint64_t acc = 0x27d4eb2f165667c5ull ^ static_cast<std::uint64_t>(end - begin);
      for (std::int64_t i = begin; i < end; ++i) {
        std::uint32_t bits;
        std::memcpy(&bits, data + i, sizeof bits);
        acc = (acc ^ bits) * 0x100000001b3ull;  // FNV-1a step on 32-bit words
        acc ^= acc >> 29;
      }
      block_hash[static_cast<std::size_t>(b)] = mix64(acc);
    }
  };
  if (n >= kParallelThreshold) {
    ThreadPool pool(available_cpus());
    pool.parallel_for(blocks, hash_blocks, 1);
  } else {
    hash_blocks(0, blocks);
  }
  std::uint64_t total = mix64(static_cast<std::uint64_t>(n) ^ 0xc2b2ae3d27d4eb4full);
  for (std::uint64_t bh : block_hash) total = mix64(total * kGolden + bh);
  static const char* digits = "0123456789abcdef";
  std::string hex(16, '0');
  for (int i = 15; i >= 0; --i) {
    hex[static_cast<std::size_t>(i)] = digits[total & 0xf];
    total >>= 4;
  }
  return hex;
}

}  // namespace zob
