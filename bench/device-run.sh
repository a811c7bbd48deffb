# Sourced by the GPU machine's measurement scripts (bench/h200-memory5.sh, h200-memory6.sh,
# h200-steptime-abba.sh) from the repository root with OUT set: the output folder $OUT/r (the
# shell is left in it), the machine's description, and the helpers each script repeated.
#   pack                      $OUT/r as $OUT/r.tar.gz (after every run, so a cut call keeps it)
#   run BIN NAME FLAGS...     the tool with its bundle's environment -> NAME.txt (the command
#                             first, the exit code and wall time last) and NAME.json
#   beside LEAVE NAME FLAGS... `run "$B"` beside another process that holds all but LEAVE bytes
#                             of the GPU (hog-NAME.txt) with nvidia-smi's per-process memory
#                             every 0.5 s (apps-NAME.txt)
#   ds NAME ARGS...           DeepSpeed's harness (bench/deepspeed/harness.py) -> NAME.txt
: "${OUT:?set OUT to the folder whose files come back}"
root=$PWD
C=$root/bench/models/configs
PY=/opt/torch/.venv/bin/python
mkdir -p "$OUT/r"
cd "$OUT/r" || exit 1
{ nvidia-smi; lscpu; } > machine.txt 2>&1
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
  { echo "\$ harness.py $*"; s=$SECONDS; timeout -k 5 200 "$PY" "$root/bench/deepspeed/harness.py" "$@" 2>&1
    echo "exit code: $?  wall: $((SECONDS - s)) s"; } > "$name.txt"
  pack
}
beside() {
  local leave=$1 name=$2 hog smi
  shift 2
  "$PY" - "$leave" <<'PY' > "hog-$name.txt" 2>&1 &
import sys, time, torch
free, total = torch.cuda.mem_get_info()
keep = int(float(sys.argv[1]))
x = torch.empty(free - keep, dtype=torch.uint8, device="cuda")
print("holding", free - keep, "of", total, "leaving", keep, flush=True)
time.sleep(300)
PY
  hog=$!
  sleep 12
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader -lms 500 > "apps-$name.txt" 2>&1 &
  smi=$!
  run "$B" "$name" "$@"
  kill $smi $hog 2>/dev/null
  wait $smi $hog 2>/dev/null
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
