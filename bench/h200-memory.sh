#!/usr/bin/env bash
# Issue 36: the deepspeed schedule's device memory (caching pool, allocated and reserved peaks)
# and locked bytes on the models of DeepSpeed's recorded runs
# (results/h200/2026-12-02-deepspeed-account: its gpu_peak_gb and locked_bytes), then a run
# with another process holding all but DeepSpeed's peak + 15 % of the GPU.
# Run on the GPU machine from the repository root with the CUDA bundle packed in .xfer-pack and
# OUT set.
set -u
tar xJf .xfer-pack/cuda.tar.xz; . .xfer-cuda/env.sh
B=$PWD/.xfer-cuda/zero3-offload-bench
C=$PWD/bench/models/configs
mkdir -p $OUT/r; cd $OUT/r
run(){ name=$1; shift; { echo "\$ zero3-offload-bench $*"; $B "$@" --json $name.json 2>&1; echo "exit code: $?"; } > $name.txt; }
common="--device cuda --schedule deepspeed --arms registered,unregistered --repeats 1 --warmup 1 --steps 3 --timeout 300"
run qwen05-b4-s128-op --model $C/Qwen2.5-0.5B.json --batch 4 --seq 128 --offload-param $common
run qwen05-b4-s128-cb --model $C/Qwen2.5-0.5B.json --batch 4 --seq 128 $common
run qwen15-b4-s512-op --model $C/Qwen2.5-1.5B.json --batch 4 --seq 512 --offload-param $common
run llama3b-b4-s512-op --model $C/Llama-3.2-3B.json --batch 4 --seq 512 --offload-param $common
# Another process holds all but 12.01 GB x 1.15 = 13.8 GB (DeepSpeed's Llama-3.2-3B peak + 15 %).
/opt/torch/.venv/bin/python - <<'PY' > hog.txt 2>&1 &
import torch, time
free, total = torch.cuda.mem_get_info()
keep = int(12.01e9 * 1.15)
x = torch.empty(free - keep, dtype=torch.uint8, device="cuda")
print("holding", free - keep, "of", total, "leaving", keep, flush=True)
time.sleep(240)
PY
sleep 20
nvidia-smi --query-gpu=memory.used,memory.total --format=csv > hog-smi.txt 2>&1
run llama3b-shared-gpu --model $C/Llama-3.2-3B.json --batch 4 --seq 512 --offload-param --device cuda --schedule deepspeed --arms registered --repeats 1 --warmup 1 --steps 2 --timeout 200
kill %1 2>/dev/null
cd $OUT; tar czf r.tar.gz r; rm -rf r
