# shellcheck shell=bash disable=SC2034  # the variables set here are read by the scripts that source it
# Sourced by the GPU machine's measurement scripts (bench/h200-memory4.sh to h200-memory9.sh,
# h200-steptime-abba.sh) from the repository root with OUT set: the output folder $OUT/r (the
# shell is left in it), the machine's description, and the helpers each script repeated.
#   pack                      $OUT/r as $OUT/r.tar.gz (after every run, so a cut call keeps it)
#   run BIN NAME FLAGS...     the tool with its bundle's environment -> NAME.txt (the command
#                             first, the exit code and wall time last) and NAME.json
#   beside LEAVE NAME FLAGS... `run "$B"` beside another process that holds all but LEAVE bytes
#                             of the GPU (hog-NAME.txt) with nvidia-smi's per-process memory
#                             every 0.5 s (apps-NAME.txt)
#   hog_start LEAVE NAME SECS / hog_stop: that other process (and nvidia-smi) around several runs
#   $common $q $q15 $l $m8    issue 36's cases as the tool's flags (the --offload-param loop,
#                             one repeat; Mistral-8's arms and steps too, its config from
#                             mistral8_config); each script adds the rest
#   ds NAME ARGS...           DeepSpeed's harness (bench/deepspeed/harness.py) -> NAME.txt,
#                             killed after DS_TIMEOUT seconds (default 200)
: "${OUT:?set OUT to the folder whose files come back}"
root=$PWD
C=$root/bench/models/configs
PY=/opt/torch/.venv/bin/python
mkdir -p "$OUT/r"
cd "$OUT/r" || exit 1
{ nvidia-smi; lscpu; } > machine.txt 2>&1
common="--offload-param --device cuda --schedule deepspeed --repeats 1"
q="--model $C/Qwen2.5-0.5B.json --batch 4 --seq 128 $common"
q15="--model $C/Qwen2.5-1.5B.json --batch 4 --seq 512 $common"
l="--model $C/Llama-3.2-3B.json --batch 4 --seq 512 $common"
m8="--model $OUT/r/mistral8/config.json --batch 4 --seq 512 $common --arms registered --warmup 1 --steps 2"
pack() { (cd "$OUT" && tar czf r.tar.gz r); }
run() {
  local bin=$1 name=$2 s rc
  shift 2
  { echo "\$ zero3-offload-bench $*"; s=$(date +%s.%N)
    (. "$(dirname "$bin")/env.sh"; timeout -k 5 150 "$bin" "$@" --json "$name.json" 2>&1); rc=$?
    echo "exit code: $rc"; echo "wall: $(awk "BEGIN{print $(date +%s.%N) - $s}") s"; } > "$name.txt"
  pack
}
ds() {
  local name=$1 s
  shift
  { echo "\$ harness.py $*"; s=$SECONDS; timeout -k 5 "${DS_TIMEOUT:-200}" "$PY" "$root/bench/deepspeed/harness.py" "$@" 2>&1
    echo "exit code: $?  wall: $((SECONDS - s)) s"; } > "$name.txt"
  pack
}
hog_start() {  # LEAVE NAME SECONDS: hold all but LEAVE bytes of the GPU for up to SECONDS
  local leave=$1 name=$2 secs=$3
  "$PY" - "$leave" "$secs" <<'PY' > "hog-$name.txt" 2>&1 &
import sys, time, torch
free, total = torch.cuda.mem_get_info()
keep = int(float(sys.argv[1]))
x = torch.empty(free - keep, dtype=torch.uint8, device="cuda")
print("holding", free - keep, "of", total, "leaving", keep, flush=True)
time.sleep(int(sys.argv[2]))
PY
  hog=$!
  sleep 12
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader -lms 500 > "apps-$name.txt" 2>&1 &
  smi=$!
}
hog_stop() {
  kill "$smi" "$hog" 2>/dev/null
  wait "$smi" "$hog" 2>/dev/null
}
beside() {
  local leave=$1 name=$2
  shift 2
  hog_start "$leave" "$name" 300
  run "$B" "$name" "$@"
  hog_stop
}
# The bundles: this tree (cuda.tar.xz -> $B) and, where carried, the tool before (old.tar.xz -> $B0).
unpack_bundles() {
  tar xJf "$root/.xfer-pack/cuda.tar.xz" -C "$root"
  B=$root/.xfer-cuda/zero3-offload-bench
  B0=  # only the scripts that compare with the tool before need old.tar.xz
  if [ -f "$root/.xfer-pack/old.tar.xz" ]; then
    tar xJf "$root/.xfer-pack/old.tar.xz" -C "$root"
    B0=$root/.xfer-old/zero3-offload-bench
  fi
}
# The issue's shared-GPU case: Mistral-7B-v0.3 cut to 8 layers -> $OUT/r/mistral8/config.json.
mistral8_config() {
  mkdir -p mistral8
  "$PY" - "$C/Mistral-7B-v0.3.json" mistral8/config.json <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["num_hidden_layers"] = 8
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
}
