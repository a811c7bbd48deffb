#!/usr/bin/env bash
# Issue 36, fourth round, one device call (carry .xfer-pack and .whl):
#   1. The copy-back loop (offload_optimizer only) at Qwen2.5-0.5B b4 s128: this tree
#      (cuda.tar.xz: each CPU sub-group's copy back as PyTorch's blocking copy_ runs it, a CPU cast
#      into a fresh pageable bf16 temporary and one H2D, no fp32 chunk on the device) and the tool
#      before it (old.tar.xz, built at 2237fd9), interleaved twice, arms registered and
#      unregistered; then DeepSpeed 0.19.8 (harness.py --no-offload-param, registered and
#      pinned-unregistered).
#   2. The shared-GPU case: Mistral-7B-v0.3 cut to 8 layers (its config.json with
#      num_hidden_layers 8, written to $OUT/r/mistral8/config.json), b4 s512 --offload-param,
#      another process holding all but 11 GB of the GPU (11e9 bytes left): DeepSpeed's registered
#      arm, then the tool's; nvidia-smi's per-process memory every 0.5 s.
# Each NAME.txt starts with its command and ends with the exit code and the wall time.
# Output: $OUT/r.tar.gz. Run on the GPU machine from the repository root with OUT set.
set -u
DS_TIMEOUT=240
# shellcheck source=bench/device-run.sh
. bench/device-run.sh
unpack_bundles
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

mistral8_config
hog_start 11e9 mistral8 500
ds shared-ds-mistral8 --model-config "$OUT/r/mistral8/config.json" --batch 4 --seq 512 \
  --arms registered --warmup 1 --steps 2 --timeout 220
run "$B" shared-mistral8 --model "$OUT/r/mistral8/config.json" --batch 4 --seq 512 --offload-param \
  --device cuda --schedule deepspeed --arms registered --repeats 1 --warmup 1 --steps 2
hog_stop
cd "$OUT" && tar czf r.tar.gz r && rm -rf r
