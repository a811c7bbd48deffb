// Embedding forward (a gather) and backward (a deterministic segmented sum over a CSR index
// built on the host: no atomics, positions summed in ascending order, one rounding).
// Launch: global (roundup(hidden, ZOB_WG), rows), local (ZOB_WG, 1).
#include "bf16.h"

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void embedding_forward(global const int* ids, global const ushort* table,
                              global ushort* out, long tokens, long hidden) {
  const long col = get_global_id(0);
  const long t = get_global_id(1);
  if (col >= hidden || t >= tokens) return;
  out[t * hidden + col] = table[(long)ids[t] * hidden + col];
}

__attribute__((reqd_work_group_size(ZOB_WG, 1, 1)))
kernel void embedding_backward(global const int* unique_ids, global const int* offsets,
                               global const int* positions, long n_unique,
                               global const ushort* dout, global ushort* dtable, long hidden) {
  const long col = get_global_id(0);
  const long i = get_global_id(1);
  if (col >= hidden || i >= n_unique) return;
  float acc = 0.0f;
  for (int p = offsets[i]; p < offsets[i + 1]; ++p)
    acc += bf16_to_f32(dout[(long)positions[p] * hidden + col]);
  dtable[(long)unique_ids[i] * hidden + col] = f32_to_bf16(acc);
}
