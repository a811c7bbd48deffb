// Decoder-transformer kernels (--model): RMSNorm, the head permutes with rotary embedding,
// causal softmax and the gated MLP's SiLU. Deterministic: every row reduction is one
// work-group of ZOB_WG with a fixed shape (work-item l takes elements l, l + ZOB_WG, ... in
// order, then a fixed binary tree in local memory), and the column sum of RMSNorm's weight
// gradient is one work-item per column, rows in order - the CPU reference's own order.
// The fp32 expressions are those of the CPU reference (src/backends/cpu/cpu_decoder_kernels.hpp)
// with contraction off, so a product is rounded before the add that follows it, as there.
// Rotary cos / sin come from a table the host computes in double (level_zero_decoder.cpp):
// OpenCL 1.2 without cl_khr_fp64 has no double, and the table makes them the reference's bits.
#include "bf16.h"

#pragma OPENCL FP_CONTRACT OFF

// Before each loop over a row in steps of ZOB_WG: clang would vectorize it into a gather loop
// plus a fallback chosen at run time, a shape llvm-spirv-15 lays out with one block merging two
// headers (spirv-val rejects it); a GPU gains nothing from it anyway (IGC vectorizes across
// work-items). Loop conditions are written `index < bound` for the same translator: when the
// exit is the branch's true edge, it emits a loop whose merge block is its continue target.
#define ZOB_NO_VECTORIZE _Pragma("clang loop vectorize(disable)")
// Every helper: a C99 `inline` function that clang leaves as a call has no definition in the
// module (PoCL: "Cannot find symbol ... in kernel library"; IGC would fail the same way).
#define ZOB_INLINE __attribute__((always_inline)) inline

// Every work-item passes its value; every work-item gets the sum (max) of all ZOB_WG (256)
// values, by a fixed tree. `partial` is ZOB_WG floats of local memory, free again on return.
// The eight levels are written out: as a loop next to the kernels' other loops, llvm-spirv-15
// emits blocks that are merge blocks of two headers (spirv-val rejects it).
#define ZOB_TREE_LEVEL(stride, combine)                                           \
  if (lane < (stride)) partial[lane] = combine(partial[lane], partial[lane + (stride)]); \
  barrier(CLK_LOCAL_MEM_FENCE)
#define ZOB_TREE(combine)              \
  ZOB_TREE_LEVEL(128, combine);        \
  ZOB_TREE_LEVEL(64, combine);         \
  ZOB_TREE_LEVEL(32, combine);         \
  ZOB_TREE_LEVEL(16, combine);         \
  ZOB_TREE_LEVEL(8, combine);          \
  ZOB_TREE_LEVEL(4, combine);          \
  ZOB_TREE_LEVEL(2, combine);          \
  ZOB_TREE_LEVEL(1, combine)

ZOB_INLINE float add_f(float a, float b) { return a + b; }

ZOB_INLINE float group_sum(local float* partial, int lane, float v) {
  partial[lane] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  ZOB_TREE(add_f);
  const float r = partial[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}
ZOB_INLINE float group_max(local float* partial, int lane, float v) {
  partial[lane] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  ZOB_TREE(fmax);
  const float r = partial[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return r;
}

// ---- RMSNorm. Launch: one work-group per row (rows groups). ----
__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void rmsnorm_forward(global const ushort* x, global const ushort* w, global ushort* y,
                            global float* rstd, long rows, long cols, float eps) {
  local float partial[ZOB_WG];
  const int lane = (int)get_local_id(0);
  const long r = get_group_id(0);
  global const ushort* xr = x + r * cols;
  float ss = 0.0f;
  ZOB_NO_VECTORIZE
  for (long c = lane; c < cols; c += ZOB_WG) {
    const float v = bf16_to_f32(xr[c]);
    ss += v * v;
  }
  ss = group_sum(partial, lane, ss);
  const float rs = 1.0f / sqrt(ss / (float)cols + eps);
  if (lane == 0) rstd[r] = rs;
  ZOB_NO_VECTORIZE
  for (long c = lane; c < cols; c += ZOB_WG)
    y[r * cols + c] = f32_to_bf16(bf16_to_f32(w[c]) * (bf16_to_f32(xr[c]) * rs));
}

// Both gradients in one launch of rows + ceil(cols / ZOB_WG) groups: group g < rows computes
// row g of dx (a reduction over the row), the groups after it one column of dweight per
// work-item (rows in order). The branch is uniform in a group, so its barriers are legal.
__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void rmsnorm_backward(global const ushort* dy, global const ushort* x,
                             global const ushort* w, global const float* rstd,
                             global ushort* dx, global ushort* dweight, long rows, long cols) {
  local float partial[ZOB_WG];
  const int lane = (int)get_local_id(0);
  const long group = get_group_id(0);
  if (group < rows) {
    const long base = group * cols;
    const float rs = rstd[group];
    float dot = 0.0f;
    ZOB_NO_VECTORIZE
    for (long c = lane; c < cols; c += ZOB_WG) {
      const float g = bf16_to_f32(dy[base + c]) * bf16_to_f32(w[c]);
      dot += g * (bf16_to_f32(x[base + c]) * rs);
    }
    dot = group_sum(partial, lane, dot);
    const float mean = dot / (float)cols;
    ZOB_NO_VECTORIZE
    for (long c = lane; c < cols; c += ZOB_WG) {
      const float g = bf16_to_f32(dy[base + c]) * bf16_to_f32(w[c]);
      const float xhat = bf16_to_f32(x[base + c]) * rs;
      dx[base + c] = f32_to_bf16(rs * (g - xhat * mean));
    }
  } else {
    const long c = (group - rows) * ZOB_WG + lane;
    if (c >= cols) return;
    float acc = 0.0f;
    for (long r = 0; r < rows; ++r)
      acc += bf16_to_f32(dy[r * cols + c]) * (bf16_to_f32(x[r * cols + c]) * rstd[r]);
    dweight[c] = f32_to_bf16(acc);
  }
}

// ---- head permutes. x: [batch, seq, heads, head_dim] (token-major); out: [batch,
// heads * repeat, seq, head_dim] (head-major), source head h to heads h*repeat .. +repeat-1.
// Launch: 1-D, one work-item per source element (or per rotated pair), ZOB_WG per group.

// x / y into *q, and returns x % y, as a multiply-subtract: clang pairs a `/` and a `%` of the
// same operands into a form with `freeze`, which llvm-spirv-15 cannot translate.
ZOB_INLINE long split(long x, long y, long* q) {
  const long quotient = x / y;
  *q = quotient;
  return x - quotient * y;
}

// Offset of (b, s, h, 0) in token-major and of (b, h * repeat, s, 0) in head-major layout.
ZOB_INLINE long token_major(long b, long s, long h, long seq, long heads, long head_dim) {
  return ((b * seq + s) * heads + h) * head_dim;
}
ZOB_INLINE long head_major(long b, long s, long h, long seq, long heads, long head_dim, long repeat) {
  return ((b * heads + h) * repeat * seq + s) * head_dim;
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void to_heads(global const ushort* x, global ushort* out, long batch, long seq,
                     long heads, long head_dim, long repeat) {
  const long i = get_global_id(0);
  if (i >= batch * seq * heads * head_dim) return;
  long t, u, b;
  const long d = split(i, head_dim, &t), h = split(t, heads, &u), s = split(u, seq, &b);
  const ushort v = x[i];
  global ushort* dst = out + head_major(b, s, h, seq, heads, head_dim, repeat) + d;
  ZOB_NO_VECTORIZE
  for (long k = 0; k < repeat; ++k) dst[k * seq * head_dim] = v;
}

// table: cos at [s * hd2 + d], sin at [(seq + s) * hd2 + d], hd2 = head_dim / 2 (`half` is a
// type in OpenCL C).
__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void to_heads_rope(global const ushort* x, global ushort* out, global const float* table,
                          long batch, long seq, long heads, long head_dim, long repeat) {
  const long hd2 = head_dim / 2;
  const long i = get_global_id(0);
  if (i >= batch * seq * heads * hd2) return;
  long t, u, b;
  const long d = split(i, hd2, &t), h = split(t, heads, &u), s = split(u, seq, &b);
  const float c = table[s * hd2 + d], sn = table[(seq + s) * hd2 + d];
  global const ushort* src = x + token_major(b, s, h, seq, heads, head_dim);
  const float x0 = bf16_to_f32(src[d]), x1 = bf16_to_f32(src[d + hd2]);
  const ushort y0 = f32_to_bf16(x0 * c - x1 * sn), y1 = f32_to_bf16(x1 * c + x0 * sn);
  global ushort* dst = out + head_major(b, s, h, seq, heads, head_dim, repeat) + d;
  ZOB_NO_VECTORIZE
  for (long k = 0; k < repeat; ++k) {
    dst[k * seq * head_dim] = y0;
    dst[k * seq * head_dim + hd2] = y1;
  }
}

// The adjoints: one work-item per element (pair) of the token-major output; the `repeat`
// heads summed in order (fp32), then rotated back (sin -> -sin).
__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void from_heads(global const ushort* g, global ushort* out, long batch, long seq,
                       long heads, long head_dim, long repeat) {
  const long i = get_global_id(0);
  if (i >= batch * seq * heads * head_dim) return;
  long t, u, b;
  const long d = split(i, head_dim, &t), h = split(t, heads, &u), s = split(u, seq, &b);
  global const ushort* src = g + head_major(b, s, h, seq, heads, head_dim, repeat) + d;
  float acc = 0.0f;
  ZOB_NO_VECTORIZE
  for (long k = 0; k < repeat; ++k) acc += bf16_to_f32(src[k * seq * head_dim]);
  out[i] = f32_to_bf16(acc);
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void from_heads_rope(global const ushort* g, global ushort* out, global const float* table,
                            long batch, long seq, long heads, long head_dim, long repeat) {
  const long hd2 = head_dim / 2;
  const long i = get_global_id(0);
  if (i >= batch * seq * heads * hd2) return;
  long t, u, b;
  const long d = split(i, hd2, &t), h = split(t, heads, &u), s = split(u, seq, &b);
  const float c = table[s * hd2 + d], sn = table[(seq + s) * hd2 + d];
  global const ushort* src = g + head_major(b, s, h, seq, heads, head_dim, repeat) + d;
  float a0 = 0.0f, a1 = 0.0f;
  ZOB_NO_VECTORIZE
  for (long k = 0; k < repeat; ++k) {
    a0 += bf16_to_f32(src[k * seq * head_dim]);
    a1 += bf16_to_f32(src[k * seq * head_dim + hd2]);
  }
  global ushort* dst = out + token_major(b, s, h, seq, heads, head_dim) + d;
  dst[0] = f32_to_bf16(a0 * c + a1 * sn);
  dst[hd2] = f32_to_bf16(a1 * c - a0 * sn);
}

// ---- causal softmax over [n * seq, seq]: one work-group per row; row i of its matrix sees
// columns j <= i, the rest get +0. probs may be scores (dscores may be dprobs): each work-item
// writes only the columns it read, after the group's last reduction has seen every read.
__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void causal_softmax_forward(global const ushort* scores, global ushort* probs, long n,
                                   long seq, float scale) {
  local float partial[ZOB_WG];
  const int lane = (int)get_local_id(0);
  // Row i sees j < i + 1; min() keeps clang from turning `j < i + 1` into `!(j > i)`.
  const long row = get_group_id(0), end = min(row % seq + 1, seq);
  global const ushort* sr = scores + row * seq;
  global ushort* pr = probs + row * seq;
  float m = -INFINITY;
  ZOB_NO_VECTORIZE
  for (long j = lane; j < end; j += ZOB_WG) m = fmax(m, scale * bf16_to_f32(sr[j]));
  m = group_max(partial, lane, m);
  float sum = 0.0f;
  ZOB_NO_VECTORIZE
  for (long j = lane; j < end; j += ZOB_WG) sum += exp(scale * bf16_to_f32(sr[j]) - m);
  sum = group_sum(partial, lane, sum);
  ZOB_NO_VECTORIZE
  for (long j = lane; j < end; j += ZOB_WG)
    pr[j] = f32_to_bf16(exp(scale * bf16_to_f32(sr[j]) - m) / sum);
  ZOB_NO_VECTORIZE
  for (long j = end + lane; j < seq; j += ZOB_WG) pr[j] = 0;
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void causal_softmax_backward(global const ushort* probs, global const ushort* dprobs,
                                    global ushort* dscores, long n, long seq, float scale) {
  local float partial[ZOB_WG];
  const int lane = (int)get_local_id(0);
  // Row i sees j < i + 1; min() keeps clang from turning `j < i + 1` into `!(j > i)`.
  const long row = get_group_id(0), end = min(row % seq + 1, seq);
  global const ushort* pr = probs + row * seq;
  global const ushort* dpr = dprobs + row * seq;
  global ushort* dsr = dscores + row * seq;
  float dot = 0.0f;
  ZOB_NO_VECTORIZE
  for (long j = lane; j < end; j += ZOB_WG) dot += bf16_to_f32(pr[j]) * bf16_to_f32(dpr[j]);
  dot = group_sum(partial, lane, dot);
  ZOB_NO_VECTORIZE
  for (long j = lane; j < end; j += ZOB_WG)
    dsr[j] = f32_to_bf16(scale * (bf16_to_f32(pr[j]) * (bf16_to_f32(dpr[j]) - dot)));
  ZOB_NO_VECTORIZE
  for (long j = end + lane; j < seq; j += ZOB_WG) dsr[j] = 0;
}

// ---- SiLU-mul, element-wise: ZOB_VEC (4) adjacent elements per work-item, one vector load
// and store; the last work-item finishes a tail of n % 4 (written out, as in elementwise.cl).
#define ZOB_TAIL(stmt)   \
  do {                   \
    long j = i;          \
    if (j < n) { stmt; } \
    j = i + 1;           \
    if (j < n) { stmt; } \
    j = i + 2;           \
    if (j < n) { stmt; } \
  } while (0)

ZOB_INLINE float silu_f(float x) { return x / (1.0f + exp(-x)); }
ZOB_INLINE float dsilu_f(float x) {
  const float s = 1.0f / (1.0f + exp(-x));
  return s * (1.0f + x * (1.0f - s));
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void silu_mul_forward(global const ushort* gate, global const ushort* up,
                             global ushort* out, long n) {
  const long i = ZOB_VEC * (long)get_global_id(0);
  if (i + ZOB_VEC <= n) {
    const float4 x = vload_bf16x4(gate + i);
    const float4 s = (float4)(silu_f(x.x), silu_f(x.y), silu_f(x.z), silu_f(x.w));
    vstore_bf16x4(s * vload_bf16x4(up + i), out + i);
  } else {
    ZOB_TAIL(out[j] = f32_to_bf16(silu_f(bf16_to_f32(gate[j])) * bf16_to_f32(up[j])));
  }
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void silu_mul_backward(global const ushort* dout, global const ushort* gate,
                              global const ushort* up, global ushort* dgate, global ushort* dup,
                              long n) {
  const long i = ZOB_VEC * (long)get_global_id(0);
  if (i + ZOB_VEC <= n) {
    const float4 d = vload_bf16x4(dout + i), x = vload_bf16x4(gate + i);
    const float4 ds = (float4)(dsilu_f(x.x), dsilu_f(x.y), dsilu_f(x.z), dsilu_f(x.w));
    const float4 s = (float4)(silu_f(x.x), silu_f(x.y), silu_f(x.z), silu_f(x.w));
    vstore_bf16x4((d * vload_bf16x4(up + i)) * ds, dgate + i);
    vstore_bf16x4(d * s, dup + i);
  } else {
    ZOB_TAIL(const float x = bf16_to_f32(gate[j]); const float d = bf16_to_f32(dout[j]);
             dgate[j] = f32_to_bf16((d * bf16_to_f32(up[j])) * dsilu_f(x));
             dup[j] = f32_to_bf16(d * silu_f(x)));
  }
}
