#!/usr/bin/env bash
# Issue 38, where DeepSpeed 0.19.8's step goes at offload_optimizer.ratio < 1: one profiled
# step of the registered arm at ratio 1 and at ratio 0.5 (synthetic h4096 l8 b4 s512,
# --offload-param), with the optimizer step's functions ranged (bench/deepspeed/account.py
# OPTIMIZER_STEP); then DeepSpeed at ratio 0.5 under --device-memory (does it fit where the
# tool's pool did not?). Run on the GPU machine from the repository root with OUT set; carry .whl.
# Environment: DEVICE_MEMORY (default 25GB), BUDGET_S (default 540: what would start past it is
# skipped, said in skipped.txt).
# Output: $OUT/r.tar.gz (r/: ds-r1.txt, ds-r0.5.txt, ds-cap.txt, prof-r1/, prof-r0.5/,
# machine.txt, install.txt, skipped.txt), each .txt starting with its command.
set -uo pipefail
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16}
: "${OUT:?set OUT to the folder whose files come back}"
root=$PWD
t0=$SECONDS
PY=${PY:-/opt/torch/.venv/bin/python3}
H=$root/bench/deepspeed/harness.py
BUDGET_S=${BUDGET_S:-540}
DEVICE_MEMORY=${DEVICE_MEMORY:-25GB}
shape="--hidden 4096 --layers 8 --batch 4 --seq 512"
mkdir -p "$OUT/r"
cd "$OUT/r" || exit 1
pack() { ( cd "$OUT" && tar czf r.tar.gz r ); }
note() { echo "[gpu-ratio-profile +$((SECONDS - t0)) s] $*" >&2; }
left() { echo $((BUDGET_S - (SECONDS - t0))); }
{ nvidia-smi; lscpu; } > machine.txt 2>&1
"$root/bench/deepspeed/install-offline" > install.txt 2>&1 || { cat install.txt; pack; exit 1; }
note "install-offline done"

# run NAME MIN_S ARGS...: one harness run into NAME.txt, skipped when less than MIN_S is left.
run() {
  local name=$1 min=$2
  shift 2
  if [ "$(left)" -lt "$min" ]; then
    echo "$name: $(left) s left of the budget" >> skipped.txt
    return
  fi
  { echo "\$ $PY $H $*"
    local s=$SECONDS
    timeout -k 5 "$(left)" "$PY" "$H" "$@" 2>&1
    echo "exit code: $?  wall: $((SECONDS - s)) s"; } > "$name.txt"
  grep -E '^\[ds-ref\] (arm +avg|registered +[0-9])|exit code|out of memory' "$name.txt" | head -5 >&2
  pack
}

# shellcheck disable=SC2086
run ds-r0.5 100 $shape --offload-ratio 0.5 --arms registered --warmup 1 --steps 2 --profile \
  --account --no-profile-stack --profile-out "$OUT/r/prof-r0.5" --timeout 240
# shellcheck disable=SC2086
run ds-r1 100 $shape --offload-ratio 1 --arms registered --warmup 1 --steps 2 --profile \
  --account --no-profile-stack --profile-out "$OUT/r/prof-r1" --timeout 240
# shellcheck disable=SC2086
run ds-cap 90 $shape --offload-ratio 0.5 --arms registered --warmup 1 --steps 2 \
  --device-memory "$DEVICE_MEMORY" --timeout 200
note "done"
cd "$OUT" && tar czf r.tar.gz r && rm -rf r
