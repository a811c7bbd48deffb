// CPU reference kernels (see cpu_kernels.hpp for the contract).
//
// Determinism: every elementwise kernel computes each output from its own inputs only, and
// every reduction has a fixed order that does not depend on how the pool splits the work
// (columns, embedding rows and sum blocks are each reduced by exactly one thread, in index
// order). So the thread count never changes the bits, except inside OpenBLAS's sgemm.
#include "backends/cpu/cpu_kernels.hpp"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "zob/device.hpp"
#include "zob/errors.hpp"
#include "zob/thread_pool.hpp"

namespace zob::cpu {
namespace {

// Below this many elements a parallel_for costs more than it saves.
constexpr std::int64_t kParallelMin = std::int64_t{1} << 15;

using RangeFn = std::function<void(std::int64_t, std::int64_t)>;

// Runs fn over [0, n) on the pool when the work is large enough; `work` is the element count
// behind the n items (rows * cols for row loops) and decides whether threading pays.
void for_range(ThreadPool* pool, std::int64_t n, std::int64_t work, const RangeFn& fn,
               std::int64_t align = 1) {
  if (n <= 0) return;
  if (pool == nullptr || pool->size() <= 1 || work < kParallelMin) {
    fn(0, n);
    return;
  }
  pool->parallel_for(n, fn, align);
}

[[noreturn]] void shape_error(const char* kernel, const std::string& what) {
  throw DeviceError(DeviceErrorKind::runtime, std::string("cpu ") + kernel + ": " + what);
}

void check_count(const char* kernel, const char* name, std::int64_t v) {
  if (v < 0) shape_error(kernel, std::string(name) + " = " + std::to_string(v) + " is negative");
}

inline float f(bf16 v) { return bf16_to_f32(v); }

inline float gelu(float x) {
  constexpr float kInvSqrt2 = 0.70710678118654752f;
  return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2));
}

inline float gelu_derivative(float x) {
  constexpr float kInvSqrt2 = 0.70710678118654752f;
  constexpr float kInvSqrt2Pi = 0.39894228040143268f;
  return 0.5f * (1.0f + std::erf(x * kInvSqrt2)) + x * std::exp(-0.5f * x * x) * kInvSqrt2Pi;
}

// Widens a [rows, cols] bf16 matrix with leading dimension ld into a packed fp32 one. bf16 to
// fp32 is exact, and so is every bf16 x bf16 product in fp32 (8 + 8 significant bits).
void widen(const bf16* src, std::int64_t ld, std::int64_t rows, std::int64_t cols, float* dst,
           ThreadPool* pool) {
  for_range(pool, rows, rows * cols, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const bf16* s = src + r * ld;
      float* d = dst + r * cols;
      for (std::int64_t c = 0; c < cols; ++c) d[c] = f(s[c]);
    }
  });
}

// Per-thread fp32 scratch for gemm, kept between calls: the step repeats the same shapes and
// re-faulting hundreds of MB of fresh pages per call would dominate the CPU device's time. It
// is bounded (gemm tiles C and K to fit), since on the CPU device it is host RAM that no plan
// counts: whole operands at a 152k vocabulary took 3.4 GB per thread.
float* grow(std::vector<float>& v, std::int64_t n) {
  if (static_cast<std::int64_t>(v.size()) < n) v.resize(static_cast<std::size_t>(n));
  return v.data();
}

// The tile of C (mt x nt) and of the sum (kt): the whole product where it fits the scratch,
// else the largest dimension halved until it does (small products keep their single call).
struct GemmTile {
  std::int64_t m, n, k;
};
GemmTile gemm_tile(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t scratch_floats) {
  GemmTile t{m, n, k};
  const auto need = [&] { return t.m * t.k + t.k * t.n + t.m * t.n; };
  while (need() > std::max<std::int64_t>(scratch_floats, 3)) {
    std::int64_t& big = t.m >= t.n && t.m >= t.k ? t.m : (t.n >= t.k ? t.n : t.k);
    big = (big + 1) / 2;
  }
  return t;
}

float block_sum(const bf16* x, std::int64_t n) {
  // 16 independent lanes (vectorisable), combined in a fixed tree.
  float lane[16] = {};
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) lane[l] += f(x[i + l]);
  }
  for (; i < n; ++i) lane[i % 16] += f(x[i]);
  for (int width = 8; width >= 1; width /= 2) {
    for (int l = 0; l < width; ++l) lane[l] += lane[l + width];
  }
  return lane[0];
}

// C = op(A) op(B) tile by tile: each tile's operands widened into the scratch, the partial
// sums over K accumulated in fp32 (beta 1 after the first K tile), one rounding to bf16 at the
// end, as the whole product does.
void gemm_tiles(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                const bf16* a, std::int64_t lda, const bf16* b, std::int64_t ldb, bf16* c,
                std::int64_t ldc, std::int64_t scratch_floats, ThreadPool* pool) {
  const GemmTile t = gemm_tile(m, n, k, scratch_floats);
  thread_local std::vector<float> scratch;  // A's tile, then B's, then C's: one bound for all
  float* a32 = grow(scratch, t.m * t.k + t.k * t.n + t.m * t.n);
  float* b32 = a32 + t.m * t.k;
  float* c32 = b32 + t.k * t.n;
  for (std::int64_t m0 = 0; m0 < m; m0 += t.m) {
    const std::int64_t mt = std::min(t.m, m - m0);
    for (std::int64_t n0 = 0; n0 < n; n0 += t.n) {
      const std::int64_t nt = std::min(t.n, n - n0);
      for (std::int64_t k0 = 0; k0 < k; k0 += t.k) {
        const std::int64_t kt = std::min(t.k, k - k0);
        // op(A)[m0.., k0..] and op(B)[k0.., n0..], packed: [mt,kt] or [kt,mt]; [kt,nt] or [nt,kt].
        if (trans_a) widen(a + k0 * lda + m0, lda, kt, mt, a32, pool);
        else widen(a + m0 * lda + k0, lda, mt, kt, a32, pool);
        if (trans_b) widen(b + n0 * ldb + k0, ldb, nt, kt, b32, pool);
        else widen(b + k0 * ldb + n0, ldb, kt, nt, b32, pool);
        cblas_sgemm(
            CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
            static_cast<blasint>(mt), static_cast<blasint>(nt), static_cast<blasint>(kt), 1.0f, a32,
            static_cast<blasint>(trans_a ? mt : kt), b32, static_cast<blasint>(trans_b ? kt : nt),
            k0 == 0 ? 0.0f : 1.0f, c32, static_cast<blasint>(nt));
      }
      for_range(pool, mt, mt * nt, [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r) {
          for (std::int64_t j = 0; j < nt; ++j)
            c[(m0 + r) * ldc + n0 + j] = f32_to_bf16(c32[r * nt + j]);
        }
      });
    }
  }
}

}  // namespace

void gemm_bounded(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                  const bf16* a, std::int64_t lda, const bf16* b, std::int64_t ldb, bf16* c,
                  std::int64_t ldc, std::int64_t scratch_floats, ThreadPool* pool) {
  const auto shape = [&] {
    return "m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
           " lda=" + std::to_string(lda) + " ldb=" + std::to_string(ldb) +
           " ldc=" + std::to_string(ldc) + (trans_a ? " trans_a" : "") +
           (trans_b ? " trans_b" : "");
  };
  if (m < 0 || n < 0 || k < 0) shape_error("gemm", "negative size: " + shape());
  const std::int64_t a_cols = trans_a ? m : k, b_cols = trans_b ? k : n;  // stored row widths
  if (lda < std::max<std::int64_t>(a_cols, 1) || ldb < std::max<std::int64_t>(b_cols, 1) ||
      ldc < std::max<std::int64_t>(n, 1)) {
    shape_error("gemm", "leading dimension smaller than the row width: " + shape());
  }
  if (m == 0 || n == 0) return;
  if (c == nullptr || (k > 0 && (a == nullptr || b == nullptr))) {
    shape_error("gemm", "null operand: " + shape());
  }
  if (k == 0) {  // an empty sum: C = 0
    for (std::int64_t r = 0; r < m; ++r) std::fill(c + r * ldc, c + r * ldc + n, bf16{0});
    return;
  }
  // Debian's OpenBLAS uses 32-bit blasint.
  if (std::max({m, n, k}) > INT_MAX) shape_error("gemm", "size beyond OpenBLAS's int: " + shape());

  gemm_tiles(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, scratch_floats, pool);
}

void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const bf16* a,
          std::int64_t lda, const bf16* b, std::int64_t ldb, bf16* c, std::int64_t ldc,
          ThreadPool* pool) {
  gemm_bounded(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, kGemmScratchFloats, pool);
}

void gemm(const GemmArgs& g, ThreadPool* pool) {
  gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, g.a, g.lda, g.b, g.ldb, g.c, g.ldc, pool);
}

void embedding_forward(const std::int32_t* ids, const bf16* table, bf16* out, std::int64_t tokens,
                       std::int64_t hidden, ThreadPool* pool) {
  check_count("embedding_forward", "tokens", tokens);
  check_count("embedding_forward", "hidden", hidden);
  for_range(pool, tokens, tokens * hidden, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      const bf16* row = table + static_cast<std::int64_t>(ids[t]) * hidden;
      std::copy(row, row + hidden, out + t * hidden);
    }
  });
}

void embedding_backward(const std::int32_t* unique_ids, const std::int32_t* offsets,
                        const std::int32_t* positions, std::int64_t n_unique, const bf16* dout,
                        bf16* dtable, std::int64_t hidden, ThreadPool* pool) {
  check_count("embedding_backward", "n_unique", n_unique);
  check_count("embedding_backward", "hidden", hidden);
  if (n_unique == 0 || hidden == 0) return;
  const std::int64_t work = static_cast<std::int64_t>(offsets[n_unique]) * hidden;
  for_range(pool, n_unique, work, [&](std::int64_t i0, std::int64_t i1) {
    std::vector<float> acc(static_cast<std::size_t>(hidden));
    for (std::int64_t i = i0; i < i1; ++i) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (std::int32_t p = offsets[i]; p < offsets[i + 1]; ++p) {
        const bf16* row = dout + static_cast<std::int64_t>(positions[p]) * hidden;
        for (std::int64_t h = 0; h < hidden; ++h) acc[static_cast<std::size_t>(h)] += f(row[h]);
      }
      bf16* dst = dtable + static_cast<std::int64_t>(unique_ids[i]) * hidden;
      for (std::int64_t h = 0; h < hidden; ++h)
        dst[h] = f32_to_bf16(acc[static_cast<std::size_t>(h)]);
    }
  });
}

void bias_add(bf16* y, const bf16* bias, std::int64_t rows, std::int64_t cols, ThreadPool* pool) {
  check_count("bias_add", "rows", rows);
  check_count("bias_add", "cols", cols);
  for_range(pool, rows, rows * cols, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      bf16* row = y + r * cols;
      for (std::int64_t c = 0; c < cols; ++c) row[c] = f32_to_bf16(f(row[c]) + f(bias[c]));
    }
  });
}

void bias_gelu_forward(bf16* pre, const bf16* bias, bf16* act, std::int64_t rows, std::int64_t cols,
                       ThreadPool* pool) {
  check_count("bias_gelu_forward", "rows", rows);
  check_count("bias_gelu_forward", "cols", cols);
  for_range(pool, rows, rows * cols, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      bf16* p = pre + r * cols;
      bf16* a = act + r * cols;
      for (std::int64_t c = 0; c < cols; ++c) {
        const bf16 rounded = f32_to_bf16(f(p[c]) + f(bias[c]));
        p[c] = rounded;
        a[c] = f32_to_bf16(gelu(f(rounded)));  // of the stored pre, which backward sees
      }
    }
  });
}

void gelu_backward(const bf16* dact, const bf16* pre, bf16* dpre, std::int64_t n,
                   ThreadPool* pool) {
  check_count("gelu_backward", "n", n);
  for_range(
      pool, n, n,
      [&](std::int64_t i0, std::int64_t i1) {
        for (std::int64_t i = i0; i < i1; ++i)
          dpre[i] = f32_to_bf16(f(dact[i]) * gelu_derivative(f(pre[i])));
      },
      1024);
}

void column_sum(const bf16* x, bf16* out, std::int64_t rows, std::int64_t cols, ThreadPool* pool) {
  check_count("column_sum", "rows", rows);
  check_count("column_sum", "cols", cols);
  // Split over columns so each column is summed by one thread, rows in ascending order.
  for_range(
      pool, cols, rows * cols,
      [&](std::int64_t c0, std::int64_t c1) {
        std::vector<float> acc(static_cast<std::size_t>(c1 - c0), 0.0f);
        for (std::int64_t r = 0; r < rows; ++r) {
          const bf16* row = x + r * cols;
          for (std::int64_t c = c0; c < c1; ++c) acc[static_cast<std::size_t>(c - c0)] += f(row[c]);
        }
        for (std::int64_t c = c0; c < c1; ++c)
          out[c] = f32_to_bf16(acc[static_cast<std::size_t>(c - c0)]);
      },
      64);
}

void residual_add(bf16* x, const bf16* y, std::int64_t n, ThreadPool* pool) {
  check_count("residual_add", "n", n);
  for_range(
      pool, n, n,
      [&](std::int64_t i0, std::int64_t i1) {
        for (std::int64_t i = i0; i < i1; ++i) x[i] = f32_to_bf16(f(x[i]) + f(y[i]));
      },
      1024);
}

void fill(bf16* x, float value, std::int64_t n, ThreadPool* pool) {
  check_count("fill", "n", n);
  const bf16 v = f32_to_bf16(value);
  for_range(
      pool, n, n, [&](std::int64_t i0, std::int64_t i1) { std::fill(x + i0, x + i1, v); }, 1024);
}

void sum(const bf16* x, std::int64_t n, float* result, ThreadPool* pool) {
  check_count("sum", "n", n);
  const std::int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<float> partial(static_cast<std::size_t>(blocks));
  for_range(pool, blocks, n, [&](std::int64_t b0, std::int64_t b1) {
    for (std::int64_t b = b0; b < b1; ++b) {
      const std::int64_t begin = b * kSumBlock;
      partial[static_cast<std::size_t>(b)] = block_sum(x + begin, std::min(kSumBlock, n - begin));
    }
  });
  float total = 0.0f;
  for (float p : partial) total += p;
  *result = total;
}

void cast_f32_to_bf16(const float* src, bf16* dst, std::int64_t n, ThreadPool* pool) {
  check_count("cast_f32_to_bf16", "n", n);
  for_range(
      pool, n, n,
      [&](std::int64_t i0, std::int64_t i1) {
        for (std::int64_t i = i0; i < i1; ++i) dst[i] = f32_to_bf16(src[i]);
      },
      1024);
}

void cast_bf16_to_f32(const bf16* src, float* dst, std::int64_t n, ThreadPool* pool) {
  check_count("cast_bf16_to_f32", "n", n);
  for_range(
      pool, n, n,
      [&](std::int64_t i0, std::int64_t i1) {
        for (std::int64_t i = i0; i < i1; ++i) dst[i] = bf16_to_f32(src[i]);
      },
      1024);
}

}  // namespace zob::cpu
