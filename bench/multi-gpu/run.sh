#!/usr/bin/env bash
# --gpus 2 against --gpus 1 on one host (nvidia-h200-x2), interleaved in one call so both see
# the same machine: both loops, every schedule (deepspeed, stock, overlap), at the defaults and
# at h4096 l8 b4 s512. Runs from a bundle (scripts/gpu-bundle):
#   scripts/gpu-bundle build/release .xfer-cuda   # here, after building zero3-offload-bench
#   bench/multi-gpu/run.sh .xfer-cuda "$OUT"      # on the GPU machine (about 6 minutes)
# Writes OUT/multi-gpu/: machine.txt (nvidia-smi topo -m, the GPUs, the CPUs), NAME.txt (the
# command, its output, exit code and wall clock), NAME.json (--json), summary.txt (one line per
# run, from the JSON: bench/multi-gpu/summarize.py, which also checks that the schedules agree
# bit for bit), ranks-check/ (scripts/cuda-ranks-check: NCCL's ranks against the CPU device's).
# GPUS (default 2) sets the rank count.
set -uo pipefail
if [ $# -ne 2 ]; then
  echo "usage: bench/multi-gpu/run.sh <bundle> <out-dir>" >&2
  exit 2
fi
bundle=$(cd "$1" && pwd)
out=$2/multi-gpu
here=$(cd "$(dirname "$0")" && pwd)
gpus=${GPUS:-2}
mkdir -p "$out"
. "$bundle/env.sh"
bin="$bundle/zero3-offload-bench"

run() {  # run NAME ARGS...
  local name=$1
  shift
  local t0 t1 rc
  {
    echo "\$ zero3-offload-bench $*"
    t0=$EPOCHREALTIME
    timeout 120 "$bin" "$@" --json "$out/$name.json" 2>&1
    rc=$?
    t1=$EPOCHREALTIME
    echo "exit code: $rc"
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "wall clock, command to exit: %.2f s\n", b - a }'
  } > "$out/$name.txt" 2>&1
  echo "== $name"
  grep -E '^(registered|unregistered|speedup|exit code|wall)' "$out/$name.txt"
}

{
  nvidia-smi --query-gpu=index,name,driver_version,pcie.link.gen.current,pcie.link.width.current,memory.total --format=csv
  nvidia-smi topo -m
  lscpu | grep -E 'Model name|^CPU\(s\)|NUMA'
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

# First the numbers: NCCL's ranks against the CPU device's (a small model, ~20 s).
timeout 150 "$here/../../scripts/cuda-ranks-check" "$bundle" "$out/ranks-check" "$gpus" 2>&1 | tail -4

large=(--hidden 4096 --layers 8 --batch 4 --seq 512)
for size in defaults large; do
  extra=()
  [ "$size" = large ] && extra=("${large[@]}")
  for loop in copy_back offload_param; do
    lflag=()
    [ "$loop" = offload_param ] && lflag=(--offload-param)
    for sch in deepspeed stock overlap; do
      # --gpus 1 and --gpus N back to back: the pair sees the same machine state.
      run "$size-$loop-$sch-gpus1" --device cuda --gpus 1 --schedule "$sch" "${lflag[@]}" "${extra[@]}"
      run "$size-$loop-$sch-gpus$gpus" --device cuda --gpus "$gpus" --schedule "$sch" "${lflag[@]}" "${extra[@]}"
    done
  done
done
python3 "$here/summarize.py" "$out" > "$out/summary.txt" 2>&1 || echo "summarize.py failed" >> "$out/summary.txt"
cat "$out/summary.txt"
exit 0
