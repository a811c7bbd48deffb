#!/usr/bin/env bash
# Issue 36: the deepspeed schedule's device memory (caching pool, allocated and reserved peaks)
# and locked bytes on the models of DeepSpeed's recorded runs
# (results/h200/2026-12-02-deepspeed-account: its gpu_peak_gb and locked_bytes), interleaved with
# the tool before the memory work (OLD bundle, main at 6c1bef3) for the step times; what eager
# PyTorch saves per decoder layer (bench/deepspeed/saved_activations.py); then runs with another
# process holding all but DeepSpeed's peak + 15 % of the GPU.
# Run on the GPU machine from the repository root with the CUDA bundles packed in .xfer-pack
# (cuda.tar.xz: .xfer-cuda, this tree; old.tar.xz: .xfer-old) and OUT set.
set -u
tar xJf .xfer-pack/cuda.tar.xz; tar xJf .xfer-pack/old.tar.xz
B=$PWD/.xfer-cuda/zero3-offload-bench
B0=$PWD/.xfer-old/zero3-offload-bench
C=$PWD/bench/models/configs
PY=/opt/torch/.venv/bin/python
SA=$PWD/bench/deepspeed/saved_activations.py
mkdir -p $OUT/r; cd $OUT/r
nvidia-smi > machine.txt 2>&1; lscpu >> machine.txt 2>&1
run(){ local bin=$1 name=$2; shift 2; { echo "\$ zero3-offload-bench $*"; s=$(date +%s.%N)
  ( . $(dirname $bin)/env.sh; $bin "$@" --json $name.json 2>&1 ); rc=$?
  echo "exit code: $rc"; echo "wall: $(awk "BEGIN{print $(date +%s.%N) - $s}") s"; } > $name.txt
  ( cd $OUT && tar czf r.tar.gz r ); }  # a tarball after each run: what a time-out leaves comes back
common="--device cuda --schedule deepspeed --arms registered,unregistered --repeats 1 --warmup 1 --steps 3 --timeout 300"
cases=("qwen05-b4-s128-op|--model $C/Qwen2.5-0.5B.json --batch 4 --seq 128 --offload-param"
       "qwen05-b4-s128-cb|--model $C/Qwen2.5-0.5B.json --batch 4 --seq 128"
       "qwen15-b4-s512-op|--model $C/Qwen2.5-1.5B.json --batch 4 --seq 512 --offload-param"
       "llama3b-b4-s512-op|--model $C/Llama-3.2-3B.json --batch 4 --seq 512 --offload-param")
for c in "${cases[@]}"; do
  name=${c%%|*}; flags=${c#*|}
  run $B $name $flags $common
  run $B0 old-$name $flags $common
  ( . $(dirname $B)/env.sh; $B $flags $common --dry-run > plan-${c%%|*}.txt 2>&1 )
done
$PY $SA Qwen2.5-0.5B:4:128 Qwen2.5-1.5B:4:512 Llama-3.2-3B:4:512 > saved-activations.jsonl 2> saved-activations.err
( cd $OUT && tar czf r.tar.gz r )
# Another process holds all but DeepSpeed's peak + 15 % (Qwen2.5-0.5B: 3.69 GB, Llama-3.2-3B:
# 12.01 GB); the tool's registered arm runs beside it.
shared(){ name=$1; keep=$2; shift 2
  $PY - "$keep" <<'PY' > hog-$name.txt 2>&1 &
import sys, time, torch
free, total = torch.cuda.mem_get_info()
keep = int(float(sys.argv[1]))
x = torch.empty(free - keep, dtype=torch.uint8, device="cuda")
print("holding", free - keep, "of", total, "leaving", keep, flush=True)
time.sleep(150)
PY
  hog=$!; sleep 15
  nvidia-smi --query-gpu=memory.used,memory.total --format=csv > hog-smi-$name.txt 2>&1
  run $B shared-$name "$@" --device cuda --schedule deepspeed --arms registered --repeats 1 --warmup 1 --steps 2 --timeout 120
  kill $hog 2>/dev/null; wait $hog 2>/dev/null; sleep 3
}
shared qwen05 4.2435e9 --model $C/Qwen2.5-0.5B.json --batch 4 --seq 128 --offload-param
shared llama3b 13.8115e9 --model $C/Llama-3.2-3B.json --batch 4 --seq 512 --offload-param
cd $OUT; tar czf r.tar.gz r; rm -rf r
