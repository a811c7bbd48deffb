#!/usr/bin/env bash
# Issue 38, the --fit proof: the tool's search on the synthetic h4096 l8 b4 s512 under
# --offload-param with --device-memory below the peak of ratio 0 (every sub-group on the device,
# nothing offloaded), then DeepSpeed 0.19.8 (bench/deepspeed/harness.py) run with the winner's
# settings beside its default (pageable, ratio 1), to check the winner's margin; then, if time
# is left, one DeepSpeed step at ratio 0.5 under torch.profiler (where its optimizer step goes).
# Run on the GPU machine from the repository root with OUT set; carry .whl and .xfer-pack.
# Environment: DEVICE_MEMORY (default 25GB), FIT_BUDGET (default 240), BUDGET_S (default 560:
# what would start past it is skipped, said in skipped.txt), BIN (default .xfer-cuda's).
# Output: $OUT/r.tar.gz (r/: fit.txt, fit.json, ds-winner.txt, dsref.jsonl, ds-profile/,
# machine.txt, install.txt, skipped.txt), each .txt starting with its command.
set -uo pipefail
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16}
: "${OUT:?set OUT to the folder whose files come back}"
root=$PWD
t0=$SECONDS
PY=${PY:-/opt/torch/.venv/bin/python3}
H=$root/bench/deepspeed/harness.py
BUDGET_S=${BUDGET_S:-560}
DEVICE_MEMORY=${DEVICE_MEMORY:-25GB}
FIT_BUDGET=${FIT_BUDGET:-240}
shape="--hidden 4096 --layers 8 --batch 4 --seq 512"
mkdir -p "$OUT/r"
cd "$OUT/r" || exit 1
pack() { ( cd "$OUT" && tar czf r.tar.gz r ); }
note() { echo "[h200-fit +$((SECONDS - t0)) s] $*" >&2; }
left() { echo $((BUDGET_S - (SECONDS - t0))); }
if [ -z "${BIN:-}" ]; then
  [ -f "$root/.xfer-pack/cuda.tar.xz" ] && tar xJf "$root/.xfer-pack/cuda.tar.xz" -C "$root"
  BIN=$root/.xfer-cuda/zero3-offload-bench
fi
case $BIN in /*) ;; *) BIN=$root/$BIN ;; esac
# shellcheck disable=SC1091
[ -f "$(dirname "$BIN")/env.sh" ] && . "$(dirname "$BIN")/env.sh"
{ nvidia-smi; lscpu; } > machine.txt 2>&1
"$root/bench/deepspeed/install-offline" > install.txt 2>&1 || { cat install.txt; pack; exit 1; }
note "install-offline done"

# 1. The tool's search.
# shellcheck disable=SC2086
{ echo "\$ $BIN --device cuda --schedule deepspeed --offload-param $shape --fit" \
       "--device-memory $DEVICE_MEMORY --repeats 2 --steps 3 --warmup 1 --fit-budget $FIT_BUDGET" \
       "--timeout 150 --json $OUT/r/fit.json"
  s=$SECONDS
  timeout -k 5 "$(left)" "$BIN" --device cuda --schedule deepspeed --offload-param $shape --fit \
    --device-memory "$DEVICE_MEMORY" --repeats 2 --steps 3 --warmup 1 --fit-budget "$FIT_BUDGET" \
    --timeout 150 --json "$OUT/r/fit.json" 2>&1
  echo "exit code: $?  wall: $((SECONDS - s)) s"; } > fit.txt
grep -E '^(fit|settings):|exit code' fit.txt >&2
pack

# 2. DeepSpeed with the winner's settings beside its default (pageable, ratio 1).
winner=$("$PY" -c '
import json, sys
f = json.load(open(sys.argv[1]))["fit"]
if f["winner"] is not None:
    w = f["candidates"][f["winner"]]
    print("%g %s" % (w["offload_ratio"], {"unregistered": "pinned-unregistered"}.get(w["arm"], w["arm"])))
' "$OUT/r/fit.json" 2>/dev/null)
if [ -z "$winner" ]; then
  echo "ds-winner: no winner in fit.json" >> skipped.txt
elif [ "$(left)" -lt 120 ]; then
  echo "ds-winner: $(left) s left of the budget" >> skipped.txt
else
  read -r ratio arm <<< "$winner"
  # The baseline runs at ratio 1: one harness run where the winner's ratio is 1, else two.
  runs=("$ratio $arm")
  if [ "$ratio" = 1 ]; then
    [ "$arm" != pageable ] && runs=("1 $arm,pageable")
  else
    runs+=("1 pageable")
  fi
  for run in "${runs[@]}"; do
    read -r r a <<< "$run"
    name=ds-winner-r$r-${a//,/-}
    # shellcheck disable=SC2086
    { echo "\$ $PY $H $shape --offload-ratio $r --arms $a --warmup 2 --steps 3 --timeout 200"
      s=$SECONDS
      timeout -k 5 "$(left)" "$PY" "$H" $shape --offload-ratio "$r" --arms "$a" --warmup 2 \
        --steps 3 --timeout 200 2>&1
      echo "exit code: $?  wall: $((SECONDS - s)) s"; } > "$name.txt"
    grep -E '^\[ds-ref\] (arm +avg|(registered|pinned-unregistered|pageable) +[0-9])|exit code' \
      "$name.txt" >&2
    grep -h '^DSREF=' "$name.txt" >> dsref.jsonl
    pack
    [ "$(left)" -lt 90 ] && break
  done
fi

# 3. Where DeepSpeed's optimizer step goes at ratio 0.5 (one profiled step).
if [ "$(left)" -ge 90 ]; then
  # shellcheck disable=SC2086
  { echo "\$ $PY $H $shape --offload-ratio 0.5 --arms registered --warmup 1 --steps 1 --profile" \
         "--no-profile-stack --profile-out $OUT/r/ds-profile"
    s=$SECONDS
    timeout -k 5 "$(left)" "$PY" "$H" $shape --offload-ratio 0.5 --arms registered --warmup 1 \
      --steps 1 --profile --no-profile-stack --profile-out "$OUT/r/ds-profile" 2>&1
    echo "exit code: $?  wall: $((SECONDS - s)) s"; } > ds-profile.txt
  tail -3 ds-profile.txt >&2
else
  echo "ds-profile: $(left) s left of the budget" >> skipped.txt
fi
pack
note "done"
cd "$OUT" && tar czf r.tar.gz r && rm -rf r
