#!/usr/bin/env bash
# Issue 38: partial offload, ds_config zero_optimization.offload_optimizer.ratio. For each case
# and each ratio (1.0, 0.5, 0.25), the tool (zero3-offload-bench --schedule deepspeed
# --offload-param --offload-ratio R) and then DeepSpeed 0.19.8 (bench/deepspeed/harness.py
# --offload-ratio R, the default --offload-param loop), interleaved, 2 warmup + 3 timed steps.
# Cases (CASES, or the arguments; "all" = both):
#   synthetic  --hidden 4096 --layers 8 --batch 4 --seq 512, arms registered and unregistered
#              (DeepSpeed's pinned-unregistered): ~7 min on a fresh machine (the default);
#   llama      Llama-3.2-3B b4 s512 (the tool's built-in --model Llama-3.2-3B; harness.py
#              --model-config bench/models/configs/Llama-3.2-3B.json, needs transformers:
#              fetch-wheels --with-transformers), arm registered only: DeepSpeed's engine set-up
#              alone takes 150-210 s at this size, so one ratio per device call,
#              e.g. CASES=llama RATIOS=0.5 (~5.5 min).
# Run on the GPU machine from the repository root with OUT set; carry .whl and the tool's build
# (see BIN). Environment:
#   RATIOS    ratios to run, in order (default "1.0 0.5 0.25"; comma or space separated)
#   ARMS      tool arm names for every case (default: per case, above; unregistered is run as
#             DeepSpeed's pinned-unregistered)
#   BIN       the tool (default: .xfer-pack/cuda.tar.xz unpacked to .xfer-cuda, else
#             .xfer-cuda/zero3-offload-bench, else build/release/zero3-offload-bench); an env.sh
#             beside it (scripts/gpu-bundle) is sourced for each run
#   BUDGET_S  a run is skipped, and said so in skipped.txt, when its estimate would end it past
#             this many seconds from the start (default 560); HARD_S (default 590): every run is
#             killed at this point, so what ran comes back within the device's 10 minutes
#   PY        the venv's python (default /opt/torch/.venv/bin/python3)
#   TOOL_AFTER=1  run the tool again after DeepSpeed (CASE-rR.tool-after), so each ratio is
#             tool / DeepSpeed / tool and a drift of the host's bandwidth shows; ratio_table.py
#             takes the median of the tool's runs
# Output: $OUT/r.tar.gz (r/: NAME.txt per run, each starting with its command and ending with the
# exit code and wall time; NAME.json the tool's --json; dsref.jsonl; install.txt; machine.txt;
# skipped.txt; table.md = bench/ratio_table.py r) and $OUT/table.md. NAME: CASE-rR.tool / CASE-rR.ds
# (/ CASE-rR.tool-after).
set -uo pipefail
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16}
: "${OUT:?set OUT to the folder whose files come back}"
root=$PWD
t0=$SECONDS
PY=${PY:-/opt/torch/.venv/bin/python3}
H=$root/bench/deepspeed/harness.py
C=$root/bench/models/configs
BUDGET_S=${BUDGET_S:-560}
HARD_S=${HARD_S:-590}
cases=${*:-${CASES:-synthetic}}
cases=${cases//,/ }
[ "$cases" = all ] && cases="synthetic llama"
ratios=${RATIOS:-1.0 0.5 0.25}
ratios=${ratios//,/ }

mkdir -p "$OUT/r"
cd "$OUT/r" || exit 1
pack() { ( cd "$OUT" && tar czf r.tar.gz r ); }  # after each run: what a time-out leaves comes back
note() { echo "[h200-ratio +$((SECONDS - t0)) s] $*" >&2; }
skip() { echo "$*" >> skipped.txt; note "SKIPPED: $*"; }

# --- the tool ------------------------------------------------------------------------------
if [ -z "${BIN:-}" ]; then
  if [ -f "$root/.xfer-pack/cuda.tar.xz" ]; then
    tar xJf "$root/.xfer-pack/cuda.tar.xz" -C "$root"
    BIN=$root/.xfer-cuda/zero3-offload-bench
  elif [ -x "$root/.xfer-cuda/zero3-offload-bench" ]; then
    BIN=$root/.xfer-cuda/zero3-offload-bench
  else
    BIN=$root/build/release/zero3-offload-bench
  fi
fi
case $BIN in /*) ;; *) BIN=$root/$BIN ;; esac
tool_env() {  # the bundle's env.sh, else what it does: the machine's CUDA libraries (cuBLAS) found
  local d
  d=$(dirname "$BIN")
  if [ -f "$d/env.sh" ]; then . "$d/env.sh"; return; fi
  local libs=$d lib
  for lib in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$lib" ] && libs=$libs:$lib
  done
  lib=$(find /opt /usr/local /usr/lib -name 'libcublas.so.13' -print -quit 2>/dev/null)
  [ -n "$lib" ] && libs=$libs:$(dirname "$lib")
  export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}
tool_ld=$(tool_env; echo "$LD_LIBRARY_PATH")  # env.sh sets nothing else
tool_ok=1
if [ ! -x "$BIN" ]; then
  skip "every tool run: no executable at $BIN (carry build/release or .xfer-pack, or set BIN)"; tool_ok=0
# The help text into a variable first: under pipefail, grep -q closing the pipe early would make
# the tool's SIGPIPE fail the check though the flag is there.
elif ! help_text=$(env LD_LIBRARY_PATH="$tool_ld" "$BIN" --help 2>&1) \
    || ! grep -q -- '--offload-ratio' <<< "$help_text"; then
  skip "every tool run: $BIN --help names no --offload-ratio (a build before issue 38, or it does not start)"
  tool_ok=0
fi

# --- cases: estimates in seconds (H200 runs of 2026-12-01..04: DeepSpeed's h4096 l8 arm 43-47 s
# wall with its ~31 s set-up, Llama-3.2-3B's 180-250 s; the tool's arms 7-16 s, 20-30 s) ----------
case_setup() {  # case -> name, ds_flags, tool_flags, arms, per-arm estimates, timeouts
  case $1 in
    synthetic)
      ds_flags="--hidden 4096 --layers 8 --batch 4 --seq 512"; tool_flags=$ds_flags
      arms=${ARMS:-registered,unregistered}
      est_ds_reg=43; est_ds_unreg=47; est_tool_reg=8; est_tool_unreg=15; ds_timeout=150; tool_timeout=120 ;;
    llama)
      ds_flags="--model-config $C/Llama-3.2-3B.json --batch 4 --seq 512"
      tool_flags="--model Llama-3.2-3B --batch 4 --seq 512"
      arms=${ARMS:-registered}
      est_ds_reg=225; est_ds_unreg=250; est_tool_reg=20; est_tool_unreg=30; ds_timeout=330; tool_timeout=200 ;;
    *) echo "h200-ratio: unknown case '$1' (synthetic, llama, all)" >&2; exit 2 ;;
  esac
  arms=${arms//pinned-unregistered/unregistered}  # the tool's names; DeepSpeed's below
  ds_arms=${arms//unregistered/pinned-unregistered}
  est_ds=2 est_tool=3
  local a
  for a in ${arms//,/ }; do
    case $a in
      registered) est_ds=$((est_ds + est_ds_reg)); est_tool=$((est_tool + est_tool_reg)) ;;
      *) est_ds=$((est_ds + est_ds_unreg)); est_tool=$((est_tool + est_tool_unreg)) ;;
    esac
  done
}
nratios=$(wc -w <<< "$ratios")
total=75
for c in $cases; do
  case_setup "$c"
  total=$((total + nratios * (est_ds + tool_ok * est_tool)))
done
note "cases: $cases; ratios: $ratios; tool: $BIN; estimate ~$total s with the install (~75 s fresh)," \
     "budget $BUDGET_S s (runs that would end past it are skipped)"

# timed NAME EST CMD...: skip it if it would end past the budget; else run it under the hard limit
# with its command line first and its exit code and wall time last (NAME.txt), then pack.
timed() {
  local name=$1 est=$2 used left s rc
  shift 2
  used=$((SECONDS - t0))
  if [ $((used + est)) -gt "$BUDGET_S" ]; then
    skip "$name: estimate ~$est s, $used s used of $BUDGET_S s"
    return 1
  fi
  left=$((HARD_S - used))
  if [ "$left" -lt 1 ]; then skip "$name: past HARD_S ($used s used)"; return 1; fi
  note "$name: estimate ~$est s ($((BUDGET_S - used)) s of the budget left)"
  { echo "\$ $*"; s=$SECONDS; timeout -k 5 "$left" "$@" 2>&1; rc=$?
    echo "exit code: $rc  wall: $((SECONDS - s)) s"; } > "$name.txt"
  grep -E '^(registered|unregistered|speedup|exit code)|^\[ds-ref\] (arm +avg|(registered|pinned-unregistered) +[0-9])|FAILED|Traceback|error:' \
    "$name.txt" | cut -c1-200 | tail -n 8 >&2
  pack
}

run_tool() {  # NAME RATIO: the tool's run of the current case at that ratio
  # shellcheck disable=SC2086
  timed "$1" "$est_tool" env LD_LIBRARY_PATH="$tool_ld" \
    "$BIN" --device cuda --schedule deepspeed --offload-param $tool_flags \
    --offload-ratio "$2" --arms "$arms" --steps 3 --warmup 2 --repeats 1 --timeout "$tool_timeout" \
    --json "$OUT/r/$1.json"
}

{ nvidia-smi; lscpu; } > machine.txt 2>&1
echo "cases: $cases; ratios: $ratios; tool: $BIN" >> machine.txt
"$root/bench/deepspeed/install-offline" > install.txt 2>&1 || { cat install.txt; pack; exit 1; }
note "install-offline done"
has_transformers=1
"$PY" -c 'import transformers' 2>/dev/null || has_transformers=0

for c in $cases; do
  case_setup "$c"
  for r in $ratios; do
    name=$c-r$r
    [ "$tool_ok" = 1 ] && run_tool "$name.tool" "$r"
    if [ "$c" = llama ] && [ "$has_transformers" = 0 ]; then
      skip "$name.ds: transformers does not import (run bench/deepspeed/fetch-wheels --with-transformers, carry .whl)"
      continue
    fi
    # shellcheck disable=SC2086
    timed "$name.ds" "$est_ds" "$PY" "$H" $ds_flags --offload-ratio "$r" --arms "$ds_arms" \
      --warmup 2 --steps 3 --timeout "$ds_timeout"
    grep -h '^DSREF=' "$name.ds.txt" >> dsref.jsonl 2>/dev/null
    [ "$tool_ok" = 1 ] && [ "${TOOL_AFTER:-0}" = 1 ] && run_tool "$name.tool-after" "$r"
  done
done
"$PY" "$root/bench/ratio_table.py" "$OUT/r" > table.md 2>&1
cp table.md "$OUT/table.md"
cat table.md
note "done"
cd "$OUT" && tar czf r.tar.gz r && rm -rf r
