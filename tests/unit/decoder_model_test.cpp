// The decoder transformer (--model): built-in configs and their Hugging Face parameter counts,
// config.json reading, the layout, and the whole model's gradient on the CPU device against
// finite differences of an independent double-precision forward written here.
#include <gtest/gtest.h>
#include "step/step_internal.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.hpp"
#include "step/decoder/module_math.hpp"
#include "step/deepspeed/deepspeed_plan.hpp"
#include "zob/bf16.hpp"
#include "zob/errors.hpp"
#include "zob/model.hpp"
#include "zob/step.hpp"

namespace zob {
namespace {

// Hugging Face's count for LlamaForCausalLM / MistralForCausalLM / Qwen2ForCausalLM, written
// from the modules' shapes (nn.Embedding, nn.Linear, RMSNorm), independently of model.cpp.
std::int64_t hf_count(std::int64_t V, std::int64_t h, std::int64_t F, std::int64_t n,
                      std::int64_t heads, std::int64_t kv, std::int64_t D, bool qkv_bias,
                      bool tied) {
  const std::int64_t q_proj = h * heads * D + (qkv_bias ? heads * D : 0);
  const std::int64_t k_proj = h * kv * D + (qkv_bias ? kv * D : 0);
  const std::int64_t o_proj = heads * D * h;
  const std::int64_t mlp = h * F + h * F + F * h;
  const std::int64_t layer = q_proj + 2 * k_proj + o_proj + mlp + h + h;
  return V * h + n * layer + h + (tied ? 0 : V * h);
}

TEST(DecoderModel, BuiltinCountsEqualHuggingFaces) {
  // name -> (the count by the formula above from the published config.json, and the count
  // Hugging Face's model cards / transformers report; bench/models/count_params.py checks).
  const std::map<std::string, std::int64_t> want = {
      {"Llama-3.2-1B", hf_count(128256, 2048, 8192, 16, 32, 8, 64, false, true)},
      {"Llama-3.2-3B", hf_count(128256, 3072, 8192, 28, 24, 8, 128, false, true)},
      {"Llama-3.1-8B", hf_count(128256, 4096, 14336, 32, 32, 8, 128, false, false)},
      {"Llama-3.1-70B", hf_count(128256, 8192, 28672, 80, 64, 8, 128, false, false)},
      {"Mistral-7B-v0.3", hf_count(32768, 4096, 14336, 32, 32, 8, 128, false, false)},
      {"Qwen2.5-0.5B", hf_count(151936, 896, 4864, 24, 14, 2, 64, true, true)},
      {"Qwen2.5-1.5B", hf_count(151936, 1536, 8960, 28, 12, 2, 128, true, true)},
      {"Qwen2.5-3B", hf_count(151936, 2048, 11008, 36, 16, 2, 128, true, true)},
      {"Qwen2.5-7B", hf_count(152064, 3584, 18944, 28, 28, 4, 128, true, false)},
      {"Qwen2.5-14B", hf_count(152064, 5120, 13824, 48, 40, 8, 128, true, false)},
      {"Qwen2.5-32B", hf_count(152064, 5120, 27648, 64, 40, 8, 128, true, false)},
      {"Qwen2.5-72B", hf_count(152064, 8192, 29568, 80, 64, 8, 128, true, false)},
  };
  // The totals as published (model cards; transformers' num_parameters()), pinned.
  const std::map<std::string, std::int64_t> published = {
      {"Llama-3.2-1B", 1235814400},   {"Llama-3.2-3B", 3212749824},    {"Llama-3.1-8B", 8030261248},
      {"Llama-3.1-70B", 70553706496}, {"Mistral-7B-v0.3", 7248023552}, {"Qwen2.5-0.5B", 494032768},
      {"Qwen2.5-1.5B", 1543714304},   {"Qwen2.5-3B", 3085938688},      {"Qwen2.5-7B", 7615616512},
      {"Qwen2.5-14B", 14770033664},   {"Qwen2.5-32B", 32763876352},    {"Qwen2.5-72B", 72706203648},
  };
  ASSERT_EQ(builtin_models().size(), want.size());
  for (const BuiltinModel& m : builtin_models()) {
    SCOPED_TRACE(m.name);
    ASSERT_TRUE(want.count(m.name));
    EXPECT_EQ(parameter_count(m.shape), want.at(m.name));
    EXPECT_EQ(parameter_count(m.shape), published.at(m.name));
    EXPECT_EQ(ModelLayout::build(m.shape).total, want.at(m.name));
    EXPECT_EQ(m.source, "https://huggingface.co/" + m.hf_id + "/blob/main/config.json");
  }
}

// bench/models/configs holds the published config.json files (the lead's, typed in from the
// hub): read through --model PATH, each equals the built-in of its name, field by field.
TEST(DecoderModel, BuiltinsAgreeWithThePublishedConfigFiles) {
  int files = 0;
  for (const BuiltinModel& m : builtin_models()) {
    const std::string path =
        std::string(ZOB_SOURCE_DIR) + "/bench/models/configs/" + m.name + ".json";
    if (!std::ifstream(path)) continue;  // not every built-in has its file there
    ++files;
    SCOPED_TRACE(path);
    const ModelShape f = resolve_model(path);
    const DecoderArch &a = f.arch, &b = m.shape.arch;
    EXPECT_EQ(f.vocab, m.shape.vocab);
    EXPECT_EQ(f.hidden, m.shape.hidden);
    EXPECT_EQ(f.layers, m.shape.layers);
    EXPECT_EQ(a.model_type, b.model_type);
    EXPECT_EQ(a.intermediate, b.intermediate);
    EXPECT_EQ(a.heads, b.heads);
    EXPECT_EQ(a.kv_heads, b.kv_heads);
    EXPECT_EQ(a.head_dim, b.head_dim);
    EXPECT_EQ(a.attention_bias, b.attention_bias);
    EXPECT_EQ(a.tie_embeddings, b.tie_embeddings);
    EXPECT_EQ(a.rope_theta, b.rope_theta);
    EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
    EXPECT_EQ(parameter_count(f), parameter_count(m.shape));
  }
  EXPECT_GE(files, 10);
}

TEST(DecoderModel, ResolvesNamesIdsAndPaths) {
  EXPECT_EQ(resolve_model("Qwen/Qwen2.5-7B").arch.model_type, "qwen2");
  EXPECT_EQ(resolve_model("qwen2.5-7b").name, "qwen2.5-7b");  // the text given
  EXPECT_EQ(resolve_model("mistral-7b-v0.3").vocab, 32768);
  const ModelShape folder = resolve_model(std::string(ZOB_SOURCE_DIR) + "/tests/models/tiny-qwen2");
  EXPECT_EQ(folder.hidden, 64);
  EXPECT_EQ(folder.arch.head_dim, 16);  // hidden / heads: config.json has no head_dim
  EXPECT_TRUE(folder.arch.attention_bias);
  const ModelShape file =
      resolve_model(std::string(ZOB_SOURCE_DIR) + "/tests/models/tiny-llama-tied/config.json");
  EXPECT_TRUE(file.arch.tie_embeddings);
  EXPECT_EQ(file.arch.head_dim, 16);
  try {
    resolve_model("Qwen2.5-7");
    ADD_FAILURE() << "no refusal";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean Qwen2.5-7B?"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("Llama-3.2-1B"), std::string::npos) << e.what();
  }
  EXPECT_THROW(resolve_model("gpt2-xl-not-a-model"), UsageError);
}

TEST(DecoderModel, ConfigJsonDefaultsAndRefusals) {
  const auto parse = [](const std::string& text) {
    return model_from_config_json(text, "m", "config.json");
  };
  const std::string base =
      R"("vocab_size": 50, "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 1,
         "num_attention_heads": 4)";
  const ModelShape llama = parse(R"({"model_type": "llama", )" + base + "}");
  EXPECT_EQ(llama.arch.kv_heads, 4);  // LlamaConfig: num_key_value_heads defaults to heads
  EXPECT_EQ(llama.arch.rope_theta, 10000.0);
  EXPECT_EQ(llama.arch.rms_norm_eps, 1e-6);
  EXPECT_FALSE(llama.arch.tie_embeddings);
  EXPECT_FALSE(llama.arch.attention_bias);
  // MistralConfig: 8 key-value heads unless given (here 16 query heads, so 8 divides them).
  EXPECT_EQ(parse(R"({"model_type": "mistral", "vocab_size": 50, "hidden_size": 32,
                      "intermediate_size": 40, "num_hidden_layers": 1,
                      "num_attention_heads": 16})")
                .arch.kv_heads,
            8);
  EXPECT_EQ(
      parse(R"({"model_type": "qwen2", "num_key_value_heads": 2, )" + base + "}").arch.kv_heads, 2);
  EXPECT_EQ(
      parse(R"({"model_type": "llama", "rope_parameters": {"rope_theta": 5.0}, )" + base + "}")
          .arch.rope_theta,
      5.0);
  for (const std::string& bad :
       {std::string(R"({"model_type": "gpt2", )") + base + "}",
        std::string(R"({"model_type": "llama", "vocab_size": 50})"),
        std::string(R"({"model_type": "llama", "num_key_value_heads": 3, )") + base + "}",
        std::string(R"({"model_type": "llama", "attention_bias": true, )") + base + "}",
        std::string(R"({"model_type": "llama", "hidden_act": "gelu", )") + base + "}",
        std::string(R"({"model_type": "llama", "vocab_size": 50, "hidden_size": 32.5,
                        "intermediate_size": 40, "num_hidden_layers": 1,
                        "num_attention_heads": 4})"),
        std::string("{not json"), std::string("[1, 2]")}) {
    EXPECT_THROW(parse(bad), UsageError) << bad;
  }
}

TEST(DecoderModel, LayoutIsHuggingFacesNamedParametersOrder) {
  const ModelShape m = resolve_model(std::string(ZOB_SOURCE_DIR) + "/tests/models/tiny-qwen2");
  const ModelLayout L = ModelLayout::build(m);
  ASSERT_EQ(L.modules.size(), 4u);
  std::vector<std::string> names;
  std::int64_t next = 0;
  for (const auto& mod : L.modules) {
    EXPECT_EQ(mod.offset, next);
    for (const auto& t : mod.tensors) {
      EXPECT_EQ(t.offset, next) << t.name;
      next += t.count();
      names.push_back(t.name);
    }
  }
  EXPECT_EQ(next, L.total);
  const std::vector<std::string> layer0 = {
      "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.bias",
      "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.k_proj.bias",
      "model.layers.0.self_attn.v_proj.weight", "model.layers.0.self_attn.v_proj.bias",
      "model.layers.0.self_attn.o_proj.weight", "model.layers.0.mlp.gate_proj.weight",
      "model.layers.0.mlp.up_proj.weight",      "model.layers.0.mlp.down_proj.weight",
      "model.layers.0.input_layernorm.weight",  "model.layers.0.post_attention_layernorm.weight"};
  ASSERT_GE(names.size(), 1 + layer0.size());
  EXPECT_EQ(names.front(), "model.embed_tokens.weight");
  for (std::size_t i = 0; i < layer0.size(); ++i) EXPECT_EQ(names[1 + i], layer0[i]);
  EXPECT_EQ(names[names.size() - 2], "model.norm.weight");
  EXPECT_EQ(names.back(), "lm_head.weight");
  EXPECT_TRUE(L.modules.back().shared.empty());
  const ModelLayout tied = ModelLayout::build(
      resolve_model(std::string(ZOB_SOURCE_DIR) + "/tests/models/tiny-llama-tied"));
  ASSERT_EQ(tied.modules.back().tensors.size(), 1u);  // model.norm.weight only
  ASSERT_EQ(tied.modules.back().shared.size(), 1u);
  EXPECT_EQ(tied.modules.back().shared[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(tied.modules.back().fetch_count(), 48 + 96 * 48);
}

// The device plan (what --dry-run and the pre-flight report) holds what a decoder step
// really allocates, in both loops and under every schedule; offload_param fetches the tied
// table with the head.
TEST(DecoderModel, DevicePlanHoldsTheStep) {
  for (const char* fixture : {"tiny-qwen2", "tiny-llama-tied"}) {
    for (const Schedule schedule : {Schedule::stock, Schedule::overlap, Schedule::deepspeed}) {
      for (const Loop loop : {Loop::copy_back, Loop::offload_param}) {
        SCOPED_TRACE(std::string(fixture) + " " + to_string(schedule) + " " + to_string(loop));
        RunConfig c;
        c.model = resolve_model(std::string(ZOB_SOURCE_DIR) + "/tests/models/" + fixture);
        c.batch = 2;
        c.seq = 5;
        c.steps = 1;
        c.warmup = 0;
        c.threads = 2;
        c.schedule = schedule;
        c.loop = loop;
        const MemoryPlan m = plan_memory(c);
        CpuDevice dev(2);
        const ArmResult r = run_arm(c, Arm::pageable, dev);
        // deepspeed allocates through its caching pool: the plan is its allocated bytes (the
        // device sees the pool's segments, reserved, at least as many).
        const double peak = schedule == Schedule::deepspeed
                                ? r.gpu_peak_gb * 1e9
                                : static_cast<double>(dev.memory_peak());
        if (schedule == Schedule::deepspeed) {
          // Beside the reduce bucket (1 GB whatever the model), within 5 %: a tiny model's
          // parameters, gradients and flushes must be planned too.
          const auto bucket = static_cast<double>(
              step_detail::device_sizes(c, ModelLayout::build(c.model)).reduce_bucket);
          const double planned = static_cast<double>(m.device_bytes) - bucket;
          EXPECT_NEAR(peak - bucket, planned, 0.05 * planned);
          EXPECT_GE(r.gpu_reserved_peak_gb, r.gpu_peak_gb);
          EXPECT_EQ(r.gpu_reserved_peak_gb * 1e9, static_cast<double>(dev.memory_peak()));
        }
        EXPECT_LE(peak, static_cast<double>(m.device_bytes + 64 * 256));
        EXPECT_GE(peak, static_cast<double>(m.device_bytes * 9 / 10));
      }
    }
  }
  RunConfig tied;
  tied.model = resolve_model(std::string(ZOB_SOURCE_DIR) + "/tests/models/tiny-llama-tied");
  tied.loop = Loop::offload_param;
  tied.schedule = Schedule::stock;
  const ModelLayout L = ModelLayout::build(tied.model);
  const std::uint64_t P = static_cast<std::uint64_t>(L.total), table = 96 * 48, head = 48;
  // Forward: every module, the head with the table; backward: all but the head again.
  EXPECT_EQ(step_traffic(tied).param_fetch_h2d, 2 * ((P + table) + (P - head)));
}

// --schedule deepspeed with a tied lm_head: the table is a leaf of the head too (the
// coordinator fetches it there if it was released), and its gradient hook fires once, at the
// embedding.
TEST(DecoderModel, DeepSpeedPlanListsTheTiedTableInBothLeafModules) {
  const ModelLayout L = ModelLayout::build(
      resolve_model(std::string(ZOB_SOURCE_DIR) + "/tests/models/tiny-llama-tied"));
  const std::int64_t head = static_cast<std::int64_t>(L.modules.size()) - 1;
  step_detail::DeepSpeedKnobs knobs;
  knobs.persistence_threshold = 0;  // nothing persistent: every use is a fetch
  for (const Loop loop : {Loop::copy_back, Loop::offload_param}) {
    const step_detail::DeepSpeedPlan p = step_detail::build_deepspeed_plan(L, loop, knobs);
    ASSERT_EQ(p.tensors.front().name, "model.embed_tokens.weight");
    int table_uses = 0, table_grads = 0;
    std::map<int, int> grads;
    for (const auto& v : p.visits) {
      const bool uses_table = std::find(v.tensors.begin(), v.tensors.end(), 0) != v.tensors.end();
      if (v.forward && uses_table) {
        ++table_uses;
        EXPECT_TRUE(v.module == 0 || v.module == head) << v.module;
      }
      for (int t : v.grads) {
        ++grads[t];
        if (t == 0) {
          ++table_grads;
          EXPECT_EQ(v.module, 0) << "the table's gradient hook outside the embedding";
        }
      }
    }
    EXPECT_EQ(table_uses, 2);
    EXPECT_EQ(table_grads, 1);
    for (std::size_t t = 0; t < p.tensors.size(); ++t)
      EXPECT_EQ(grads[static_cast<int>(t)], 1) << t;
  }
}

}  // namespace
}  // namespace zob
