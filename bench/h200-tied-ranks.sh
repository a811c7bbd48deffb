#!/usr/bin/env bash
# A tied --model (the lm_head is the embedding table) with --gpus 2 on CUDA, ranks sharing the
# one GPU (ZOB_TEST_SHARE_DEVICE=1: exact results, meaningless timings), every schedule and
# loop; the three schedules must give the same checksum and losses (stock / overlap gather
# the table as the embedding module's shards, deepspeed as a per-tensor handle), and the tiny
# tied fixture's CUDA losses must match the CPU device's.
#   bench/h200-tied-ranks.sh BUNDLE OUTDIR
set -uo pipefail
bundle=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
. "$bundle/env.sh"
bin="$bundle/zero3-offload-bench"
"$bin" --version > "$out/version.txt" 2>&1
run() {  # run NAME FLAGS...
  local name=$1
  shift
  local t0=$EPOCHREALTIME
  { echo "\$ ZOB_TEST_SHARE_DEVICE=${ZOB_TEST_SHARE_DEVICE:-0} zero3-offload-bench $*"; "$bin" "$@" --json "$out/$name.json" 2>&1
    echo "exit code: $?"
    awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "wall clock: %.2f s\n", b - a }'; } > "$out/$name.txt"
  echo "== $name: $(grep -E '^(exit code|wall)' "$out/$name.txt" | tr '\n' ' ')" >&2
}
export ZOB_TEST_SHARE_DEVICE=1
for sch in deepspeed stock overlap; do
  for lp in copy_back offload_param; do
    extra=()
    [ "$lp" = offload_param ] && extra=(--offload-param)
    run "llama1b-l2-gpus2-$sch-$lp" --device cuda --model Llama-3.2-1B --layers 2 --gpus 2 --schedule "$sch" \
      --arms registered --steps 2 --warmup 1 --timeout 200 "${extra[@]}"
  done
done
run tiny-tied-gpus2-cuda --device cuda --model "$here/tests/models/tiny-llama-tied" --gpus 2 --steps 3 --warmup 1 --timeout 100
unset ZOB_TEST_SHARE_DEVICE
run tiny-tied-gpus2-cpu --device cpu --model "$here/tests/models/tiny-llama-tied" --gpus 2 --steps 3 --warmup 1 --timeout 100
python3 - "$out" > "$out/agree.txt" <<'PY'
import json, sys, glob, os
o = sys.argv[1]
runs = {}
for p in sorted(glob.glob(f"{o}/llama1b-l2-gpus2-*.json")):
    a = json.load(open(p))["registered"]
    runs[os.path.basename(p)[:-5]] = (a.get("ok"), a.get("param_checksum"), a.get("losses"))
first = next(iter(runs.values()))
for name, (ok, ck, losses) in runs.items():
    print(f"{name}: ok {ok} checksum {ck} same as the first: {'yes' if (ok and ck == first[1] and losses == first[2]) else 'NO'}")
cuda, cpu = (json.load(open(f"{o}/tiny-tied-gpus2-{d}.json")) for d in ("cuda", "cpu"))
for arm in ("registered", "unregistered"):
    a, b = cuda[arm]["losses"], cpu[arm]["losses"]
    scale = max(abs(x) for x in b)
    worst = max(abs(x - y) / scale for x, y in zip(a, b))
    print(f"tiny-llama-tied --gpus 2 {arm}: cuda {a} cpu {b} worst |diff|/max|loss| {worst:.2e} (tolerance 2e-2)")
print(f"arms agree (cuda): {cuda['validation']['ok']}")
PY
cat "$out/agree.txt" >&2
