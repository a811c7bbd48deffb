#!/usr/bin/env bash
# Issue 36, third round, two device calls:
#   MODE=steps: the step times of this tree (cuda.tar.xz) and of the tool before the memory work
#     (old.tar.xz, main at 6c1bef3), interleaved new/old three times, at Qwen2.5-0.5B b4 s128 and
#     Llama-3.2-3B b4 s512 --offload-param (one run of each is ~20 % noisy on this machine's host
#     bandwidth, bench/h200-memory2.sh's single pairs could not resolve 5 %).
#   MODE=shared: another process holds all but 1.15 x DeepSpeed's recorded peak + 2 GB (at
#     1.15 x alone neither DeepSpeed nor the tool ran: results/h200/2026-12-04-memory-sdpa);
#     DeepSpeed 0.19.8's registered arm (bench/deepspeed/harness.py) and the tool's run beside it,
#     one after the other, nvidia-smi's per-process memory sampled every 0.5 s.
# Run on the GPU machine from the repository root with OUT set; carry .xfer-pack (steps) or
# .xfer-pack and .whl (shared).
set -u
root=$PWD
C=$root/bench/models/configs
PY=/opt/torch/.venv/bin/python
mkdir -p $OUT/r; cd $OUT/r
nvidia-smi > machine-$MODE.txt 2>&1
pack(){ ( cd $OUT && tar czf r.tar.gz r ); }
run(){ local bin=$1 name=$2; shift 2; { echo "\$ zero3-offload-bench $*"; local s=$(date +%s.%N)
  ( . $(dirname $bin)/env.sh; $bin "$@" --json $name.json 2>&1 ); local rc=$?
  echo "exit code: $rc"; echo "wall: $(awk "BEGIN{print $(date +%s.%N) - $s}") s"; } > $name.txt
  pack; }
tar xJf $root/.xfer-pack/cuda.tar.xz -C $root
B=$root/.xfer-cuda/zero3-offload-bench
if [ "$MODE" = steps ]; then
  tar xJf $root/.xfer-pack/old.tar.xz -C $root
  B0=$root/.xfer-old/zero3-offload-bench
  common="--device cuda --schedule deepspeed --arms registered,unregistered --repeats 1 --warmup 2 --steps 3 --timeout 300"
  for i in 1 2 3; do
    for c in "qwen05-b4-s128-op|--model $C/Qwen2.5-0.5B.json --batch 4 --seq 128 --offload-param" \
             "llama3b-b4-s512-op|--model $C/Llama-3.2-3B.json --batch 4 --seq 512 --offload-param"; do
      name=${c%%|*}; flags=${c#*|}
      run $B $name-$i $flags $common
      run $B0 old-$name-$i $flags $common
    done
  done
else
  $root/bench/deepspeed/install-offline > install.txt 2>&1 || { cat install.txt; exit 1; }
  for c in "qwen05|6.2435e9|Qwen2.5-0.5B|128" "llama3b|15.8115e9|Llama-3.2-3B|512"; do
    IFS='|' read -r name keep model seq <<< "$c"
    $PY - "$keep" <<'PY' > hog-$name.txt 2>&1 &
import sys, time, torch
free, total = torch.cuda.mem_get_info()
keep = int(float(sys.argv[1]))
x = torch.empty(free - keep, dtype=torch.uint8, device="cuda")
print("holding", free - keep, "of", total, "leaving", keep, flush=True)
time.sleep(600)
PY
    hog=$!; sleep 12
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader -lms 500 > apps-$name.txt 2>&1 &
    smi=$!
    { echo "\$ harness.py --model-config $model.json --batch 4 --seq $seq --arms registered --warmup 1 --steps 2"
      s=$SECONDS; $PY $root/bench/deepspeed/harness.py --model-config $C/$model.json --batch 4 \
        --seq $seq --arms registered --warmup 1 --steps 2 --timeout 280 2>&1
      echo "exit code: $?  wall: $((SECONDS - s)) s"; } > shared-ds-$name.txt
    pack
    run $B shared-$name --model $C/$model.json --batch 4 --seq $seq --offload-param --device cuda \
      --schedule deepspeed --arms registered --repeats 1 --warmup 1 --steps 2 --timeout 120
    kill $smi $hog 2>/dev/null; wait $smi $hog 2>/dev/null; sleep 3; pack
  done
fi
cd $OUT; tar czf r.tar.gz r; rm -rf r
