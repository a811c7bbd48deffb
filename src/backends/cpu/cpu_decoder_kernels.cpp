// CPU reference kernels of the decoder transformer (see cpu_decoder_kernels.hpp). Every
// output element is computed by one thread from its own inputs in a fixed order, so the pool's
// split never changes the bits (only OpenBLAS's sgemm inside gemm_strided_batched depends on
// its own thread count, as cpu::gemm does).
#include "backends/cpu/cpu_decoder_kernels.hpp"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backends/cpu/cpu_kernels.hpp"
#include "zob/device.hpp"
#include "zob/errors.hpp"
#include "zob/thread_pool.hpp"

namespace zob::cpu {
namespace {

constexpr std::int64_t kParallelMin = std::int64_t{1} << 15;

// Runs fn over [0, n) items on the pool when `work` (the elements behind them) is worth it.
void for_items(ThreadPool* pool, std::int64_t n, std::int64_t work,
               const std::function<void(std::int64_t, std::int64_t)>& fn) {
  if (n <= 0) return;
  if (pool == nullptr || pool->size() <= 1 || work < kParallelMin) {
    fn(0, n);
    return;
  }
  pool->parallel_for(n, fn, 1);
}

[[noreturn]] void shape_error(const char* kernel, const std::string& what) {
  throw DeviceError(DeviceErrorKind::runtime, std::string("cpu ") + kernel + ": " + what);
}

void check_nonnegative(const char* kernel, std::initializer_list<std::int64_t> values) {
  for (std::int64_t v : values) {
    if (v < 0) shape_error(kernel, "negative size " + std::to_string(v));
  }
}

inline float f(bf16 v) { return bf16_to_f32(v); }

// cos and sin of s * inv_freq[d] for d < half, per the device.hpp contract (double, then float).
struct RopeRow {
  std::vector<float> cos, sin;
  RopeRow(std::int64_t pos, std::int64_t head_dim, double theta) {
    const std::int64_t half = head_dim / 2;
    cos.resize(static_cast<std::size_t>(half));
    sin.resize(static_cast<std::size_t>(half));
    for (std::int64_t d = 0; d < half; ++d) {
      const double inv_freq =
          std::pow(theta, -2.0 * static_cast<double>(d) / static_cast<double>(head_dim));
      const double a = static_cast<double>(pos) * inv_freq;
      cos[static_cast<std::size_t>(d)] = static_cast<float>(std::cos(a));
      sin[static_cast<std::size_t>(d)] = static_cast<float>(std::sin(a));
    }
  }
};

void check_heads(const char* kernel, std::int64_t batch, std::int64_t seq, std::int64_t heads,
                 std::int64_t head_dim, std::int64_t repeat, double theta) {
  check_nonnegative(kernel, {batch, seq, heads, head_dim});
  if (repeat < 1) shape_error(kernel, "repeat " + std::to_string(repeat) + " < 1");
  if (theta < 0) shape_error(kernel, "rope theta must be >= 0");
  if (theta > 0 && head_dim % 2 != 0) {
    shape_error(kernel, "rotary embedding needs an even head_dim, got " + std::to_string(head_dim));
  }
}

}  // namespace

void gemm_strided_batched(const GemmArgs& args, std::int64_t count, std::int64_t stride_a,
                          std::int64_t stride_b, std::int64_t stride_c, ThreadPool* pool) {
  check_nonnegative("gemm_strided_batched", {count, stride_a, stride_b, stride_c});
  if (count > 1 && stride_c == 0) shape_error("gemm_strided_batched", "stride_c is 0");
  for (std::int64_t i = 0; i < count; ++i) {
    GemmArgs one = args;
    one.a = args.a + i * stride_a;
    one.b = args.b + i * stride_b;
    one.c = args.c + i * stride_c;
    gemm(one, pool);
  }
}

void rmsnorm_forward(const bf16* x, const bf16* weight, bf16* y, float* rstd, std::int64_t rows,
                     std::int64_t cols, float eps, ThreadPool* pool) {
  check_nonnegative("rmsnorm_forward", {rows, cols});
  if (cols == 0) shape_error("rmsnorm_forward", "cols is 0");
  for_items(pool, rows, rows * cols, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const bf16* xr = x + r * cols;
      float ss = 0.0f;
      for (std::int64_t c = 0; c < cols; ++c) ss += f(xr[c]) * f(xr[c]);
      const float rs = 1.0f / std::sqrt(ss / static_cast<float>(cols) + eps);
      rstd[r] = rs;
      for (std::int64_t c = 0; c < cols; ++c) {
        y[r * cols + c] = f32_to_bf16(f(weight[c]) * (f(xr[c]) * rs));
      }
    }
  });
}

void rmsnorm_backward(const bf16* dy, const bf16* x, const bf16* weight, const float* rstd,
                      bf16* dx, bf16* dweight, std::int64_t rows, std::int64_t cols,
                      ThreadPool* pool) {
  check_nonnegative("rmsnorm_backward", {rows, cols});
  if (cols == 0) shape_error("rmsnorm_backward", "cols is 0");
  for_items(pool, rows, rows * cols, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t o = r * cols;
      float dot = 0.0f;
      for (std::int64_t c = 0; c < cols; ++c) {
        dot += (f(dy[o + c]) * f(weight[c])) * (f(x[o + c]) * rstd[r]);
      }
      const float mean = dot / static_cast<float>(cols);
      for (std::int64_t c = 0; c < cols; ++c) {
        const float g = f(dy[o + c]) * f(weight[c]);
        const float xhat = f(x[o + c]) * rstd[r];
        dx[o + c] = f32_to_bf16(rstd[r] * (g - xhat * mean));
      }
    }
  });
  for_items(pool, cols, rows * cols, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      float acc = 0.0f;
      for (std::int64_t r = 0; r < rows; ++r) {
        acc += f(dy[r * cols + c]) * (f(x[r * cols + c]) * rstd[r]);
      }
      dweight[c] = f32_to_bf16(acc);
    }
  });
}

void to_heads(const bf16* x, bf16* out, std::int64_t batch, std::int64_t seq, std::int64_t heads,
              std::int64_t head_dim, std::int64_t repeat, double theta, ThreadPool* pool) {
  check_heads("to_heads", batch, seq, heads, head_dim, repeat, theta);
  const std::int64_t half = head_dim / 2, out_heads = heads * repeat;
  for_items(pool, batch * seq, batch * seq * out_heads * head_dim,
            [&](std::int64_t t0, std::int64_t t1) {
              for (std::int64_t t = t0; t < t1; ++t) {
                const std::int64_t b = t / seq, s = t % seq;
                const RopeRow rope(theta > 0 ? s : 0, theta > 0 ? head_dim : 0, theta);
                for (std::int64_t h = 0; h < heads; ++h) {
                  const bf16* src = x + (t * heads + h) * head_dim;
                  for (std::int64_t r = 0; r < repeat; ++r) {
                    bf16* dst = out + ((b * out_heads + h * repeat + r) * seq + s) * head_dim;
                    if (theta == 0) {
                      for (std::int64_t d = 0; d < head_dim; ++d) dst[d] = src[d];
                      continue;
                    }
                    for (std::int64_t d = 0; d < half; ++d) {
                      const float c = rope.cos[static_cast<std::size_t>(d)];
                      const float sn = rope.sin[static_cast<std::size_t>(d)];
                      dst[d] = f32_to_bf16(f(src[d]) * c - f(src[d + half]) * sn);
                      dst[d + half] = f32_to_bf16(f(src[d + half]) * c + f(src[d]) * sn);
                    }
                  }
                }
              }
            });
}

void from_heads(const bf16* g, bf16* out, std::int64_t batch, std::int64_t seq, std::int64_t heads,
                std::int64_t head_dim, std::int64_t repeat, double theta, ThreadPool* pool) {
  check_heads("from_heads", batch, seq, heads, head_dim, repeat, theta);
  const std::int64_t half = head_dim / 2, in_heads = heads * repeat;
  for_items(pool, batch * seq, batch * seq * in_heads * head_dim,
            [&](std::int64_t t0, std::int64_t t1) {
              std::vector<float> acc(static_cast<std::size_t>(head_dim));
              for (std::int64_t t = t0; t < t1; ++t) {
                const std::int64_t b = t / seq, s = t % seq;
                const RopeRow rope(theta > 0 ? s : 0, theta > 0 ? head_dim : 0, theta);
                for (std::int64_t h = 0; h < heads; ++h) {
                  for (std::int64_t d = 0; d < head_dim; ++d)
                    acc[static_cast<std::size_t>(d)] = 0.0f;
                  for (std::int64_t r = 0; r < repeat; ++r) {
                    const bf16* src = g + ((b * in_heads + h * repeat + r) * seq + s) * head_dim;
                    for (std::int64_t d = 0; d < head_dim; ++d)
                      acc[static_cast<std::size_t>(d)] += f(src[d]);
                  }
                  bf16* dst = out + (t * heads + h) * head_dim;
                  if (theta == 0) {
                    for (std::int64_t d = 0; d < head_dim; ++d) {
                      dst[d] = f32_to_bf16(acc[static_cast<std::size_t>(d)]);
                    }
                    continue;
                  }
                  for (std::int64_t d = 0; d < half; ++d) {
                    const float c = rope.cos[static_cast<std::size_t>(d)];
                    const float sn = rope.sin[static_cast<std::size_t>(d)];
                    const float lo = acc[static_cast<std::size_t>(d)];
                    const float hi = acc[static_cast<std::size_t>(d + half)];
                    dst[d] = f32_to_bf16(lo * c + hi * sn);
                    dst[d + half] = f32_to_bf16(hi * c - lo * sn);
                  }
                }
              }
            });
}

void causal_softmax_forward(const bf16* scores, bf16* probs, std::int64_t n, std::int64_t seq,
                            float scale, ThreadPool* pool) {
  check_nonnegative("causal_softmax_forward", {n, seq});
  for_items(pool, n * seq, n * seq * seq, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t row = r0; row < r1; ++row) {
      const std::int64_t i = row % seq;
      const bf16* s = scores + row * seq;
      bf16* p = probs + row * seq;
      float m = scale * f(s[0]);
      for (std::int64_t j = 1; j <= i; ++j) m = std::fmax(m, scale * f(s[j]));
      float sum = 0.0f;
      for (std::int64_t j = 0; j <= i; ++j) sum += std::exp(scale * f(s[j]) - m);
      for (std::int64_t j = 0; j <= i; ++j) p[j] = f32_to_bf16(std::exp(scale * f(s[j]) - m) / sum);
      for (std::int64_t j = i + 1; j < seq; ++j) p[j] = bf16{0};
    }
  });
}

void causal_softmax_backward(const bf16* probs, const bf16* dprobs, bf16* dscores, std::int64_t n,
                             std::int64_t seq, float scale, ThreadPool* pool) {
  check_nonnegative("causal_softmax_backward", {n, seq});
  for_items(pool, n * seq, n * seq * seq, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t row = r0; row < r1; ++row) {
      const std::int64_t i = row % seq;
      const bf16* p = probs + row * seq;
      const bf16* dp = dprobs + row * seq;
      bf16* ds = dscores + row * seq;
      float dot = 0.0f;
      for (std::int64_t j = 0; j <= i; ++j) dot += f(p[j]) * f(dp[j]);
      for (std::int64_t j = 0; j <= i; ++j)
        ds[j] = f32_to_bf16(scale * (f(p[j]) * (f(dp[j]) - dot)));
      for (std::int64_t j = i + 1; j < seq; ++j) ds[j] = bf16{0};
    }
  });
}

void silu_mul_forward(const bf16* gate, const bf16* up, bf16* out, std::int64_t n,
                      ThreadPool* pool) {
  check_nonnegative("silu_mul_forward", {n});
  for_items(pool, n, n, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      const float x = f(gate[i]);
      const float silu = x / (1.0f + std::exp(-x));
      out[i] = f32_to_bf16(silu * f(up[i]));
    }
  });
}

void silu_mul_backward(const bf16* dout, const bf16* gate, const bf16* up, bf16* dgate, bf16* dup,
                       std::int64_t n, ThreadPool* pool) {
  check_nonnegative("silu_mul_backward", {n});
  for_items(pool, n, n, [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      const float x = f(gate[i]);
      const float e = 1.0f + std::exp(-x);
      const float s = 1.0f / e;
      const float silu = x / e;
      const float d = f(dout[i]);
      dgate[i] = f32_to_bf16((d * f(up[i])) * (s * (1.0f + x * (1.0f - s))));
      dup[i] = f32_to_bf16(d * silu);
    }
  });
}

}  // namespace zob::cpu
