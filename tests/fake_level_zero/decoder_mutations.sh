#!/usr/bin/env bash
# Can the decoder-kernel tests (LevelZeroDecoder, level_zero_decoder_test.cpp) fail? Breaks one
# kernel at a time in a scratch copy of the tree (never in the checkout), rebuilds the Level
# Zero tests there and runs LevelZeroDecoder.* on the fake driver, with the SPIR-V on PoCL
# (kernels/*.cl mutants) or with the fake's CPU table (fake_decoder_kernels.cpp mutants).
# Prints one line per mutant:  <mutant> CAUGHT by: <failing tests> | MISSED
#   tests/fake_level_zero/decoder_mutations.sh [SCRATCH_DIR]   (default: a fresh mktemp -d)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
scratch=${1:-$(mktemp -d /tmp/zob-l0-decoder-mutants.XXXXXX)}
mkdir -p "$scratch/src"
(cd "$root" && tar --exclude=./build --exclude=./.git -cf - .) | tar -xf - -C "$scratch/src"
find "$scratch/src/src/backends/level_zero" "$scratch/src/tests/fake_level_zero" -type f -exec touch {} +
build="$scratch/build"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$scratch/src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DZOB_CUDA=OFF >/dev/null
fi

k=src/backends/level_zero/kernels
# name | executor | file | exact text | replacement
mutants=(
  "gemm_batched_ignores_stride_b|pocl|$k/gemm.cl|b + e * stride_b, ldb|b, ldb"
  "group_tree_drops_a_level|pocl|$k/decoder.cl|  ZOB_TREE_LEVEL(1, combine)|  barrier(CLK_LOCAL_MEM_FENCE)"
  "rmsnorm_dweight_skips_row_0|pocl|$k/decoder.cl|    for (long r = 0; r < rows; ++r)|    for (long r = 1; r < rows; ++r)"
  "to_heads_rope_sign|pocl|$k/decoder.cl|f32_to_bf16(x0 * c - x1 * sn)|f32_to_bf16(x0 * c + x1 * sn)"
  "from_heads_rope_sign|pocl|$k/decoder.cl|dst[hd2] = f32_to_bf16(a1 * c - a0 * sn);|dst[hd2] = f32_to_bf16(a1 * c + a0 * sn);"
  "softmax_mask_not_zero|pocl|$k/decoder.cl|j < seq; j += ZOB_WG) pr[j] = 0;|j < seq; j += ZOB_WG) pr[j] = 0x3c00;"
  "softmax_masked_columns_not_written|pocl|$k/decoder.cl|j < seq; j += ZOB_WG) pr[j] = 0;|j < seq; j += ZOB_WG) {}"
  "softmax_sum_skips_column_0|pocl|$k/decoder.cl|  for (long j = lane; j < end; j += ZOB_WG) sum += exp|  for (long j = lane + 1; j < end; j += ZOB_WG) sum += exp"
  "dsilu_sign|pocl|$k/decoder.cl|return s * (1.0f + x * (1.0f - s));|return s * (1.0f + x * (1.0f + s));"
  "fake_cpu_rope_sign|cpu|tests/fake_level_zero/fake_decoder_kernels.cpp|zob::f32_to_bf16(x0 * c - x1 * sn)|zob::f32_to_bf16(x0 * c + x1 * sn)"
)

run_tests() {  # <executor>: prints the failing tests
  local drv bin
  drv=$(find "$build" -name libfake_ze_driver.so -print -quit)
  bin=$(find "$build" -name zob_level_zero_tests -type f -print -quit)
  env ZE_ENABLE_ALT_DRIVERS="$drv" FAKE_ZE_KERNELS="$1" FAKE_ZE_HANG_SECONDS=5 \
    timeout 300 "$bin" --gtest_filter='LevelZeroDecoder.*' 2>&1 |
    awk '/^\[  FAILED  \] LevelZeroDecoder\.[A-Za-z]+ \(/{print $4}' | tr '\n' ' ' || true
}

for m in "${mutants[@]}"; do
  IFS='|' read -r name executor file text replacement <<<"$m"
  f="$scratch/src/$file"
  cp "$f" "$f.orig"
  python3 - "$f" "$text" "$replacement" <<'PY'
import sys
path, text, replacement = sys.argv[1:4]
s = open(path).read()
assert s.count(text) == 1, f"mutation text not found exactly once in {path}: {text}"
open(path, "w").write(s.replace(text, replacement, 1))
PY
  if cmake --build "$build" --target zob_level_zero_tests fake_ze_driver >"$scratch/$name.build.txt" 2>&1; then
    failed=$(run_tests "$executor")
    if [ -n "$failed" ]; then echo "$name CAUGHT by: $failed"; else echo "$name MISSED"; fi
  else
    echo "$name DID NOT BUILD (see $scratch/$name.build.txt)"
  fi
  mv "$f.orig" "$f"
  touch "$f"
done
cmake --build "$build" --target zob_level_zero_tests fake_ze_driver >/dev/null
for e in pocl cpu; do
  failed=$(run_tests "$e")
  echo "unmutated ($e): ${failed:-all LevelZeroDecoder tests pass}"
done
