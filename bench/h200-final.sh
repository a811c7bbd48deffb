#!/usr/bin/env bash
# The session's last H200 call: the merged main's GPU tests, the NCCL path of the one-plan
# rank step (ranks sharing the one GPU), the default run with the verdict, bars, chart and CSV,
# and the one-GPU schedules after the step refactor.
#   bench/h200-final.sh BUNDLE OUTDIR
set -uo pipefail
bundle=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
. "$bundle/env.sh"
bin="$bundle/zero3-offload-bench"
run() {  # run NAME FLAGS...: NAME.txt starts with the command, ends with exit code and wall clock
  local name=$1
  shift
  local t0=$EPOCHREALTIME rc
  { echo "\$ zero3-offload-bench $*"; "$bin" "$@" 2>&1; rc=$?
    echo "exit code: $rc"
    awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "wall clock: %.2f s\n", b - a }'; } > "$out/$name.txt"
  echo "== $name: $(grep -E '^(verdict|exit code|wall)' "$out/$name.txt" | tr '\n' ' ' | cut -c1-300)" >&2
}
{ ldd "$bin" | grep "not found"; "$bin" --version; } > "$out/version.txt" 2>&1
{ timeout 200 "$bundle/zob_gpu_tests"; echo "exit code: $?"; } > "$out/gpu-tests.txt" 2>&1
tail -4 "$out/gpu-tests.txt" >&2
run default --device cuda
run repeats --device cuda --arms registered,unregistered,hostalloc --repeats 3 \
  --plot "$out/repeats.png" --csv "$out/repeats.csv" --json "$out/repeats.json"
run overlap --device cuda --schedule overlap --json "$out/overlap.json"
run stock-offload --device cuda --schedule stock --offload-param --json "$out/stock-offload.json"
run overlap-offload --device cuda --schedule overlap --offload-param --json "$out/overlap-offload.json"
{ timeout 240 "$(dirname "$0")/../scripts/cuda-ranks-check" "$bundle" "$out/ranks" 2 3; echo "exit code: $?"; } \
  > "$out/cuda-ranks-check.txt" 2>&1
tail -5 "$out/cuda-ranks-check.txt" >&2
{ RANKS_FLAGS="--schedule overlap --offload-param" timeout 150 "$(dirname "$0")/../scripts/cuda-ranks-check" \
    "$bundle" "$out/ranks-overlap-offload" 2; echo "exit code: $?"; } > "$out/cuda-ranks-check-overlap.txt" 2>&1
{ RANKS_FLAGS="--schedule stock --offload-param" timeout 150 "$(dirname "$0")/../scripts/cuda-ranks-check" \
    "$bundle" "$out/ranks-stock-offload" 2; echo "exit code: $?"; } > "$out/cuda-ranks-check-stock.txt" 2>&1
python3 - "$out" > "$out/ranks-schedules-agree.txt" <<'PY'
import json, sys
o = sys.argv[1]
a = json.load(open(f"{o}/ranks-overlap-offload/ranks2_cuda.json"))
b = json.load(open(f"{o}/ranks-stock-offload/ranks2_cuda.json"))
for arm in ("registered", "unregistered"):
    same = a[arm]["param_checksum"] == b[arm]["param_checksum"] and a[arm]["losses"] == b[arm]["losses"]
    print(f"--gpus 2 cuda --offload-param {arm}: overlap {a[arm]['param_checksum']} stock {b[arm]['param_checksum']} schedules agree: {'yes' if same else 'NO'}")
PY
cat "$out/ranks-schedules-agree.txt" >&2
