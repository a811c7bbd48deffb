#!/usr/bin/env bash
# Issue 36, ninth round, one device call (carry .xfer-pack and .whl): the copy-back loop (no
# --offload-param) beside DeepSpeed 0.19.8 at the other models: the tool (this tree,
# cuda.tar.xz) at Qwen2.5-0.5B b4 s128, Qwen2.5-1.5B b4 s512 and Llama-3.2-3B b4 s512, registered
# arm; then DeepSpeed (harness.py --no-offload-param) at Qwen2.5-1.5B and Llama-3.2-3B.
# Output: $OUT/r.tar.gz. Run on the GPU machine from the repository root with OUT set.
set -u
# shellcheck source=bench/device-run.sh
. bench/device-run.sh
unpack_bundles
"$root/bench/deepspeed/install-offline" > install.txt 2>&1 || { cat install.txt; pack; exit 1; }
cb="--device cuda --schedule deepspeed --arms registered --repeats 1 --warmup 1 --steps 2"
# shellcheck disable=SC2086
run "$B" qwen05-cb --model "$C/Qwen2.5-0.5B.json" --batch 4 --seq 128 $cb
# shellcheck disable=SC2086
run "$B" qwen15-cb --model "$C/Qwen2.5-1.5B.json" --batch 4 --seq 512 $cb
# shellcheck disable=SC2086
run "$B" llama3b-cb --model "$C/Llama-3.2-3B.json" --batch 4 --seq 512 $cb
ds ds-qwen15-cb --model-config "$C/Qwen2.5-1.5B.json" --batch 4 --seq 512 --no-offload-param \
  --arms registered --warmup 1 --steps 1 --timeout 190
ds ds-llama3b-cb --model-config "$C/Llama-3.2-3B.json" --batch 4 --seq 512 --no-offload-param \
  --arms registered --warmup 1 --steps 1 --timeout 190
