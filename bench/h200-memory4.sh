#!/usr/bin/env bash
# Issue 36, fourth round, one device call (carry .xfer-pack and .whl):
#   1. The copy-back loop (offload_optimizer only) at Qwen2.5-0.5B b4 s128: this tree
#      (cuda.tar.xz: each CPU sub-group's copy back as PyTorch's blocking copy_ runs it, a CPU cast
#      into a fresh pageable bf16 temporary and one H2D, no fp32 chunk on the device) and the tool
#      before it (old.tar.xz, built at 2237fd9), interleaved twice, arms registered and
#      unregistered; then DeepSpeed 0.19.8 (harness.py --no-offload-param, registered and
#      pinned-unregistered).
#   2. The issue's shared-GPU case: Mistral-7B-v0.3 cut to 8 layers (its config.json with
#      num_hidden_layers 8, written to $OUT/r/mistral8/config.json), b4 s512 --offload-param,
#      another process holding all but 11 GB of the GPU (11e9 bytes left): DeepSpeed's registered
#      arm, then the tool's; nvidia-smi's per-process memory every 0.5 s.
# Each NAME.txt starts with its command and ends with the exit code and the wall time.
# Output: $OUT/r.tar.gz. Run on the GPU machine from the repository root with OUT set.
set -u
: "${OUT:?set OUT to the folder whose files come back}"
root=$PWD
C=$root/bench/models/configs
PY=/opt/torch/.venv/bin/python
H=$root/bench/deepspeed/harness.py
mkdir -p "$OUT/r"
cd "$OUT/r" || exit 1
{ nvidia-smi; lscpu; } > machine.txt 2>&1
pack() { (cd "$OUT" && tar czf r.tar.gz r); }
run() { # BIN NAME FLAGS...: the tool with the bundle's environment
  local bin=$1 name=$2 s rc
  shift 2
  { echo "\$ zero3-offload-bench $*"; s=$(date +%s.%N)
    (. "$(dirname "$bin")/env.sh"; timeout -k 5 150 "$bin" "$@" --json "$name.json" 2>&1); rc=$?
    echo "exit code: $rc"; echo "wall: $(awk "BEGIN{print $(date +%s.%N) - $s}") s"; } > "$name.txt"
  pack
}
ds() { # NAME ARGS...: DeepSpeed's harness
  local name=$1 s
  shift
  { echo "\$ harness.py $*"; s=$SECONDS; timeout -k 5 240 "$PY" "$H" "$@" 2>&1
    echo "exit code: $?  wall: $((SECONDS - s)) s"; } > "$name.txt"
  pack
}
tar xJf "$root/.xfer-pack/cuda.tar.xz" -C "$root"
tar xJf "$root/.xfer-pack/old.tar.xz" -C "$root"
B=$root/.xfer-cuda/zero3-offload-bench
B0=$root/.xfer-old/zero3-offload-bench
"$root/bench/deepspeed/install-offline" > install.txt 2>&1 || { cat install.txt; pack; exit 1; }

cb="--model $C/Qwen2.5-0.5B.json --batch 4 --seq 128 --device cuda --schedule deepspeed"
cb="$cb --arms registered,unregistered --repeats 1 --warmup 2 --steps 3"
for i in 1 2; do
  # shellcheck disable=SC2086
  run "$B" qwen05-cb-$i $cb
  # shellcheck disable=SC2086
  run "$B0" old-qwen05-cb-$i $cb
done
ds ds-qwen05-cb --model-config "$C/Qwen2.5-0.5B.json" --batch 4 --seq 128 --no-offload-param \
  --arms registered,pinned-unregistered --warmup 2 --steps 3 --timeout 200

mkdir -p mistral8
"$PY" - "$C/Mistral-7B-v0.3.json" mistral8/config.json <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["num_hidden_layers"] = 8
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
"$PY" - 11e9 <<'PY' > hog-mistral8.txt 2>&1 &
import sys, time, torch
free, total = torch.cuda.mem_get_info()
keep = int(float(sys.argv[1]))
x = torch.empty(free - keep, dtype=torch.uint8, device="cuda")
print("holding", free - keep, "of", total, "leaving", keep, flush=True)
time.sleep(500)
PY
hog=$!
sleep 12
nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader -lms 500 > apps-mistral8.txt 2>&1 &
smi=$!
ds shared-ds-mistral8 --model-config "$OUT/r/mistral8/config.json" --batch 4 --seq 512 \
  --arms registered --warmup 1 --steps 2 --timeout 220
run "$B" shared-mistral8 --model "$OUT/r/mistral8/config.json" --batch 4 --seq 512 --offload-param \
  --device cuda --schedule deepspeed --arms registered --repeats 1 --warmup 1 --steps 2
kill $smi $hog 2>/dev/null
wait $smi $hog 2>/dev/null
cd "$OUT" && tar czf r.tar.gz r && rm -rf r
