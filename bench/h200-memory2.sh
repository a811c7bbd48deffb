#!/usr/bin/env bash
# Issue 36, second round: the deepspeed schedule with SDPA's saved activations, two hidden
# states and per-queue pool blocks (NEW bundle), interleaved with the tool before the memory
# work (OLD bundle, main at 6c1bef3) for the step times; then the tool beside another process
# that holds all but DeepSpeed's recorded peak + 15 % of the GPU, with nvidia-smi's per-process
# memory sampled every 0.5 s. With DS=1 instead: DeepSpeed 0.19.8 (bench/deepspeed/harness.py)
# beside the same hog, and its copy-back loop's locked bytes at Qwen2.5-0.5B
# (bench/deepspeed/install-offline first; carry .whl).
# Run on the GPU machine from the repository root with the CUDA bundles packed in .xfer-pack
# (cuda.tar.xz: .xfer-cuda, this tree; old.tar.xz: .xfer-old) and OUT set.
set -u
root=$PWD
C=$root/bench/models/configs
PY=/opt/torch/.venv/bin/python
mkdir -p $OUT/r; cd $OUT/r
nvidia-smi > machine.txt 2>&1; lscpu >> machine.txt 2>&1
pack(){ ( cd $OUT && tar czf r.tar.gz r ); }  # after each run: what a time-out leaves comes back
run(){ local bin=$1 name=$2; shift 2; { echo "\$ zero3-offload-bench $*"; local s=$(date +%s.%N)
  ( . $(dirname $bin)/env.sh; $bin "$@" --json $name.json 2>&1 ); local rc=$?
  echo "exit code: $rc"; echo "wall: $(awk "BEGIN{print $(date +%s.%N) - $s}") s"; } > $name.txt
  pack; }
# Another process holds all but KEEP bytes (as its own torch.cuda.mem_get_info reads them).
hog_start(){ local name=$1 keep=$2
  $PY - "$keep" <<'PY' > hog-$name.txt 2>&1 &
import sys, time, torch
free, total = torch.cuda.mem_get_info()
keep = int(float(sys.argv[1]))
x = torch.empty(free - keep, dtype=torch.uint8, device="cuda")
print("holding", free - keep, "of", total, "leaving", keep, flush=True)
time.sleep(600)
PY
  hog=$!; sleep 12
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv > hog-smi-$name.txt 2>&1
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader -lms 500 > apps-$name.txt 2>&1 &
  smi=$!; }
hog_stop(){ kill $smi $hog 2>/dev/null; wait $smi $hog 2>/dev/null; sleep 3; pack; }
if [ "${DS:-0}" = 1 ]; then
  $root/bench/deepspeed/install-offline > install.txt 2>&1 || { cat install.txt; exit 1; }
  # DeepSpeed's locked bytes and peak in the copy-back loop (offload_optimizer only), no hog.
  { echo "\$ harness.py --model-config Qwen2.5-0.5B.json --batch 4 --seq 128 --arms registered --no-offload-param --warmup 1 --steps 2"
    s=$SECONDS; $PY $root/bench/deepspeed/harness.py --model-config $C/Qwen2.5-0.5B.json --batch 4 \
      --seq 128 --arms registered --no-offload-param --warmup 1 --steps 2 --timeout 200 2>&1
    echo "exit code: $?  wall: $((SECONDS - s)) s"; } > ds-qwen05-b4-s128-cb.txt
  pack
  for c in "qwen05|4.2435e9|Qwen2.5-0.5B|128" "llama3b|13.8115e9|Llama-3.2-3B|512"; do
    IFS='|' read -r name keep model seq <<< "$c"
    hog_start ds-$name $keep
    { echo "\$ harness.py --model-config $model.json --batch 4 --seq $seq --arms registered --warmup 1 --steps 2"
      s=$SECONDS; $PY $root/bench/deepspeed/harness.py --model-config $C/$model.json --batch 4 \
        --seq $seq --arms registered --warmup 1 --steps 2 --timeout 280 2>&1
      echo "exit code: $?  wall: $((SECONDS - s)) s"; } > shared-ds-$name.txt
    hog_stop
  done
  cd $OUT; tar czf r.tar.gz r; rm -rf r; exit 0
fi
tar xJf $root/.xfer-pack/cuda.tar.xz -C $root; tar xJf $root/.xfer-pack/old.tar.xz -C $root
B=$root/.xfer-cuda/zero3-offload-bench
B0=$root/.xfer-old/zero3-offload-bench
common="--device cuda --schedule deepspeed --arms registered,unregistered --repeats 1 --warmup 2 --steps 3 --timeout 300"
cases=("qwen05-b4-s128-op|--model $C/Qwen2.5-0.5B.json --batch 4 --seq 128 --offload-param"
       "qwen05-b4-s128-cb|--model $C/Qwen2.5-0.5B.json --batch 4 --seq 128"
       "qwen15-b4-s512-op|--model $C/Qwen2.5-1.5B.json --batch 4 --seq 512 --offload-param"
       "llama3b-b4-s512-op|--model $C/Llama-3.2-3B.json --batch 4 --seq 512 --offload-param")
for c in "${cases[@]}"; do
  name=${c%%|*}; flags=${c#*|}
  ( . $(dirname $B)/env.sh; $B $flags $common --dry-run > plan-$name.txt 2>&1 )
  run $B $name $flags $common
  run $B0 old-$name $flags $common
done
for c in "qwen05|4.2435e9|--model $C/Qwen2.5-0.5B.json --batch 4 --seq 128 --offload-param" \
         "llama3b|13.8115e9|--model $C/Llama-3.2-3B.json --batch 4 --seq 512 --offload-param"; do
  IFS='|' read -r name keep flags <<< "$c"
  hog_start $name $keep
  run $B shared-$name $flags --device cuda --schedule deepspeed --arms registered --repeats 1 --warmup 1 --steps 2 --timeout 120
  hog_stop
done
cd $OUT; tar czf r.tar.gz r; rm -rf r
