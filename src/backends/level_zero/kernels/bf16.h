// bf16 as ushort bits, with the exact conversions of include/zob/bf16.hpp: round to nearest
// even; a NaN stays a quiet NaN with its sign. Shared by every kernel file.
#ifndef ZOB_L0_BF16_H
#define ZOB_L0_BF16_H

#define ZOB_WG 256          // work-group size of every 1-D kernel; the host launches with the same
#define ZOB_VEC 4           // elements per work-item of the element-wise kernels (lanes.cpp kVec)
#define ZOB_SUM_GROUPS 512  // most work-groups of sum_bf16_partial (lanes.cpp kSumGroups)

inline float bf16_to_f32(ushort v) { return as_float(((uint)v) << 16); }

// Branch-free (a select): one block less for llvm-spirv-15 to lay out (see CMakeLists.txt on
// why the build also limits loop rotation).
inline ushort f32_to_bf16(float f) {
  const uint u = as_uint(f);
  const uint quiet_nan = (u >> 16) | 0x0040u;
  const uint rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return (ushort)(((u & 0x7fffffffu) > 0x7f800000u) ? quiet_nan : rounded);
}

// Four adjacent bf16 (8 bytes, one load) as float4. vload4 needs only ushort alignment.
inline float4 vload_bf16x4(global const ushort* p) {
  const uint4 u = convert_uint4(vload4(0, p)) << 16;
  return as_float4(u);
}
inline void vstore_bf16x4(float4 v, global ushort* p) {
  vstore4((ushort4)(f32_to_bf16(v.x), f32_to_bf16(v.y), f32_to_bf16(v.z), f32_to_bf16(v.w)), 0, p);
}

#endif
