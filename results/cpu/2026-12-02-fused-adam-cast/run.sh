#!/usr/bin/env bash
# CPU Adam with the bf16 cast of the master, as two passes (Adam, then the cast) and fused into
# one (adam_step_cast), timed in the same repeats by the adam benchmark, once per ISA this CPU
# runs (ZOB_ADAM_ISA), interleaved with Adam alone and the same-run memory probe.
# Usage (repository root): results/cpu/2026-12-02-fused-adam-cast/run.sh build/release/zero3-offload-bench
set -uo pipefail
bench=${1:?usage: run.sh BINARY}
dir=$(dirname "$0")
grep -m1 'model name' /proc/cpuinfo > "$dir/cpu.txt"
nproc >> "$dir/cpu.txt"
for isa in avx512 avx2 scalar; do
  out="$dir/adam-$isa.txt"
  cmd=(env ZOB_ADAM_ISA=$isa "$bench" adam --params 100000000 --threads 2 --repeats 9
       --json "$dir/adam-$isa.json")
  echo "\$ ${cmd[*]}" > "$out"
  start=$(date +%s.%N)
  "${cmd[@]}" >> "$out" 2>&1
  rc=$?
  echo "exit code $rc, wall $(echo "$(date +%s.%N) - $start" | bc) s" >> "$out"
done
