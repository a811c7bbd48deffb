// The decoder's whole forward and backward (ModuleMath on the CPU device, bf16) against an
// independent double-precision forward written here: the loss, and each tensor's gradient
// along a fresh random direction against central finite differences of that forward. Tiny
// configs, tied and untied, with and without q/k/v biases, grouped-query attention; the fused
// decoder (stock) and the eager one (--schedule deepspeed: eager_decoder.hpp), each against
// the same double forward with the same tolerances.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_device.hpp"
#include "step/caching_pool.hpp"
#include "step/decoder/module_math.hpp"
#include "zob/bf16.hpp"
#include "zob/model.hpp"

namespace zob {
namespace {

using Vec = std::vector<double>;

ModelShape tiny(bool bias, bool tied) {
  ModelShape m(128, 64, 2);
  m.name = "tiny";
  DecoderArch& a = m.arch;
  a.model_type = bias ? "qwen2" : "llama";
  a.intermediate = 96;
  a.heads = 4;
  a.kv_heads = 2;
  a.head_dim = 16;
  a.attention_bias = bias;
  a.tie_embeddings = tied;
  a.rope_theta = 10000.0;
  a.rms_norm_eps = 1e-5;
  a.config_layers = 2;
  return m;
}

// The model's forward in double, straight from the definitions (Hugging Face's eager path).
class Reference {
 public:
  Reference(const ModelLayout& L, const std::vector<std::int32_t>& ids, std::int64_t batch,
            std::int64_t seq)
      : m_(L.shape), ids_(ids), B_(batch), S_(seq) {
    for (const auto& mod : L.modules) {
      for (const auto& t : mod.tensors) offset_[t.name] = t.offset;
    }
  }

  // The sum of the logits; *magnitude (if given) gets the sum of their absolute values.
  double loss(const Vec& p, double* magnitude = nullptr) const {
    const std::int64_t T = B_ * S_, h = m_.hidden, V = m_.vocab;
    Vec x(static_cast<std::size_t>(T * h));
    const double* emb = at(p, "model.embed_tokens.weight");
    for (std::int64_t t = 0; t < T; ++t) {
      for (std::int64_t c = 0; c < h; ++c) x[t * h + c] = emb[ids_[t] * h + c];
    }
    for (std::int64_t i = 0; i < m_.layers; ++i)
      layer(p, "model.layers." + std::to_string(i) + ".", x);
    const Vec xf = rms(x, at(p, "model.norm.weight"));
    const double* lm = m_.arch.tie_embeddings ? emb : at(p, "lm_head.weight");
    double sum = 0, abs_sum = 0;
    for (std::int64_t t = 0; t < T; ++t) {
      for (std::int64_t v = 0; v < V; ++v) {
        double logit = 0;
        for (std::int64_t c = 0; c < h; ++c) logit += xf[t * h + c] * lm[v * h + c];
        sum += logit;
        abs_sum += std::fabs(logit);
      }
    }
    if (magnitude != nullptr) *magnitude = abs_sum;
    return sum;
  }

 private:
  const double* at(const Vec& p, const std::string& name) const {
    return p.data() + offset_.at(name);
  }
  Vec rms(const Vec& x, const double* w) const {
    const std::int64_t h = m_.hidden, T = B_ * S_;
    Vec y(x.size());
    for (std::int64_t t = 0; t < T; ++t) {
      double ss = 0;
      for (std::int64_t c = 0; c < h; ++c) ss += x[t * h + c] * x[t * h + c];
      const double r = 1 / std::sqrt(ss / h + m_.arch.rms_norm_eps);
      for (std::int64_t c = 0; c < h; ++c) y[t * h + c] = w[c] * x[t * h + c] * r;
    }
    return y;
  }
  // y[T,out] = x[T,in] W^T (+ b)
  Vec linear(const Vec& x, const double* w, const double* b, std::int64_t in,
             std::int64_t out) const {
    const std::int64_t T = B_ * S_;
    Vec y(static_cast<std::size_t>(T * out));
    for (std::int64_t t = 0; t < T; ++t) {
      for (std::int64_t o = 0; o < out; ++o) {
        double s = b ? b[o] : 0.0;
        for (std::int64_t i = 0; i < in; ++i) s += x[t * in + i] * w[o * in + i];
        y[t * out + o] = s;
      }
    }
    return y;
  }
  // Rotary embedding in place on [T, heads, D] (rotate_half form), position = t % seq.
  void rope(Vec& x, std::int64_t heads) const {
    const std::int64_t D = m_.arch.head_dim, half = D / 2;
    for (std::int64_t t = 0; t < B_ * S_; ++t) {
      for (std::int64_t hd = 0; hd < heads; ++hd) {
        double* v = &x[static_cast<std::size_t>((t * heads + hd) * D)];
        for (std::int64_t d = 0; d < half; ++d) {
          const double a = static_cast<double>(t % S_) * std::pow(m_.arch.rope_theta, -2.0 * d / D);
          const double lo = v[d], hi = v[d + half];
          v[d] = lo * std::cos(a) - hi * std::sin(a);
          v[d + half] = hi * std::cos(a) + lo * std::sin(a);
        }
      }
    }
  }
  void layer(const Vec& p, const std::string& pre, Vec& x) const {
    const DecoderArch& a = m_.arch;
    const std::int64_t h = m_.hidden, H = a.heads, K = a.kv_heads, D = a.head_dim;
    const auto bias = [&](const char* n) { return a.attention_bias ? at(p, pre + n) : nullptr; };
    const Vec xn = rms(x, at(p, pre + "input_layernorm.weight"));
    Vec q =
        linear(xn, at(p, pre + "self_attn.q_proj.weight"), bias("self_attn.q_proj.bias"), h, H * D);
    Vec k =
        linear(xn, at(p, pre + "self_attn.k_proj.weight"), bias("self_attn.k_proj.bias"), h, K * D);
    const Vec v =
        linear(xn, at(p, pre + "self_attn.v_proj.weight"), bias("self_attn.v_proj.bias"), h, K * D);
    rope(q, H);
    rope(k, K);
    Vec attn(static_cast<std::size_t>(B_ * S_ * H * D), 0.0);
    for (std::int64_t b = 0; b < B_; ++b) {
      for (std::int64_t hd = 0; hd < H; ++hd) {
        const std::int64_t kvh = hd / (H / K);
        for (std::int64_t i = 0; i < S_; ++i) {
          std::vector<double> s(static_cast<std::size_t>(i + 1));
          double mx = -INFINITY, z = 0;
          for (std::int64_t j = 0; j <= i; ++j) {
            double dot = 0;
            for (std::int64_t d = 0; d < D; ++d) {
              dot += q[((b * S_ + i) * H + hd) * D + d] * k[((b * S_ + j) * K + kvh) * D + d];
            }
            s[j] = dot / std::sqrt(static_cast<double>(D));
            mx = std::max(mx, s[j]);
          }
          for (auto& e : s) z += (e = std::exp(e - mx));
          for (std::int64_t j = 0; j <= i; ++j) {
            for (std::int64_t d = 0; d < D; ++d) {
              attn[((b * S_ + i) * H + hd) * D + d] +=
                  s[j] / z * v[((b * S_ + j) * K + kvh) * D + d];
            }
          }
        }
      }
    }
    const Vec o = linear(attn, at(p, pre + "self_attn.o_proj.weight"), nullptr, H * D, h);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    const Vec xn2 = rms(x, at(p, pre + "post_attention_layernorm.weight"));
    const Vec g = linear(xn2, at(p, pre + "mlp.gate_proj.weight"), nullptr, h, a.intermediate);
    Vec u = linear(xn2, at(p, pre + "mlp.up_proj.weight"), nullptr, h, a.intermediate);
    for (std::size_t i = 0; i < u.size(); ++i) u[i] *= g[i] / (1 + std::exp(-g[i]));
    const Vec down = linear(u, at(p, pre + "mlp.down_proj.weight"), nullptr, a.intermediate, h);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }

  ModelShape m_;
  std::vector<std::int32_t> ids_;
  std::int64_t B_, S_;
  std::map<std::string, std::int64_t> offset_;
};

// Fresh weights: N(0, 1/fan_in) for matrices, N(0, 0.01) for biases, 1 + N(0, 0.04) for the
// norms.
std::vector<bf16> fresh_weights(const ModelLayout& L, std::mt19937_64& gen) {
  std::vector<bf16> w(static_cast<std::size_t>(L.total));
  for (const auto& mod : L.modules) {
    for (const auto& t : mod.tensors) {
      const bool norm = t.name.ends_with("norm.weight");
      const double sd =
          norm ? 0.2 : (t.rows == 1 ? 0.1 : 1 / std::sqrt(static_cast<double>(t.cols)));
      std::normal_distribution<double> nd(0.0, sd);
      for (std::int64_t i = 0; i < t.count(); ++i) {
        w[static_cast<std::size_t>(t.offset + i)] =
            f32_to_bf16(static_cast<float>((norm ? 1.0 : 0.0) + nd(gen)));
      }
    }
  }
  return w;
}

class DecoderGradient : public ::testing::TestWithParam<std::tuple<bool, bool, Schedule>> {};

TEST_P(DecoderGradient, MatchesFiniteDifferencesOfADoubleForward) {
  const auto [bias, tied, schedule] = GetParam();
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937_64 gen(seed);
  RunConfig c;
  c.model = tiny(bias, tied);
  c.batch = 2;
  c.seq = 6;
  c.schedule = schedule;
  const ModelLayout L = ModelLayout::build(c.model);
  const std::vector<bf16> w = fresh_weights(L, gen);
  CpuDevice cpu(2);
  // deepspeed's per-layer activation blocks come from its caching pool (the others' too here).
  step_detail::CachingPoolDevice dev(cpu, 0);
  const std::uint64_t token_seed = gen();
  step_detail::ModuleMath math(dev, c, L, token_seed, &dev);
  std::vector<bf16> g(w.size());
  const auto M = static_cast<std::int64_t>(L.modules.size());
  const bf16* table = w.data();  // the embedding: the tied head's shared tensor
  for (std::int64_t j = 0; j < M; ++j) {
    const auto& mod = L.modules[static_cast<std::size_t>(j)];
    math.forward(j, w.data() + mod.offset, mod.shared.empty() ? nullptr : table);
  }
  for (std::int64_t j = M - 1; j >= 0; --j) {
    const auto& mod = L.modules[static_cast<std::size_t>(j)];
    math.backward(j, w.data() + mod.offset, g.data() + mod.offset, nullptr,
                  mod.shared.empty() ? nullptr : table);
  }
  const Reference ref(L, token_ids(c.tokens(), c.model.vocab, token_seed), c.batch, c.seq);
  Vec p(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) p[i] = bf16_to_f32(w[i]);
  double magnitude = 0;
  const double loss = ref.loss(p, &magnitude);
  // The sum cancels: its error is a small fraction of the logits' absolute sum.
  EXPECT_NEAR(*math.loss(), loss, 2e-3 * magnitude);
  for (const auto& mod : L.modules) {
    for (const auto& t : mod.tensors) {
      SCOPED_TRACE(t.name);
      Vec dir(static_cast<std::size_t>(t.count()));
      std::normal_distribution<double> nd(0.0, 1.0);
      double along = 0, scale = 0;
      for (std::int64_t i = 0; i < t.count(); ++i) {
        dir[i] = nd(gen);
        const double gi = bf16_to_f32(g[static_cast<std::size_t>(t.offset + i)]);
        along += gi * dir[i];
        scale += gi * gi;
      }
      const double eps = 1e-3;
      Vec up = p, down = p;
      for (std::int64_t i = 0; i < t.count(); ++i) {
        up[t.offset + i] += eps * dir[i];
        down[t.offset + i] -= eps * dir[i];
      }
      const double fd = (ref.loss(up) - ref.loss(down)) / (2 * eps);
      // bf16 activations and probabilities: errors of a few percent of the gradient's norm
      // (under 7% over many seeds, attention's q/k the largest). A wrong gradient misses by
      // about its whole norm along a random direction.
      EXPECT_NEAR(along, fd, 0.02 * std::fabs(fd) + 0.15 * std::sqrt(scale)) << "fd " << fd;
      EXPECT_GT(scale, 0.0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BiasTied, DecoderGradient,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            ::testing::Values(Schedule::stock,
                                                              Schedule::deepspeed)));

}  // namespace
}  // namespace zob
