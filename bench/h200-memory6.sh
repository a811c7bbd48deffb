#!/usr/bin/env bash
# Issue 36, sixth round, one device call (carry .xfer-pack): the tool with one pool block per
# fetched tensor (and, from fe8489f's successor, per gradient: cuda.tar.xz, this tree) against the tool before the per-module scratch blocks
# and the per-tensor blocks (old.tar.xz, built at 5bea820).
#   1. The shared-GPU case, Mistral-7B-v0.3 cut to 8 layers, b4 s512 --offload-param,
#      registered: alone, then beside another process that holds all but 11e9 bytes of the GPU
#      (nvidia-smi's per-process memory every 0.5 s).
#   2. Beside another process that leaves 1.15 x DeepSpeed's peak (the target): Qwen2.5-0.5B
#      b4 s128 (4.24e9 B: DeepSpeed's 3.69 GB) and Llama-3.2-3B b4 s512 (13.81e9 B: 12.01 GB).
#   3. Step times and peaks, interleaved new / old: Qwen2.5-0.5B b4 s128 twice, Llama-3.2-3B b4
#      s512 and Qwen2.5-1.5B b4 s512 once, --offload-param, registered and unregistered.
# Each NAME.txt starts with its command and ends with the exit code and the wall time.
# Output: $OUT/r.tar.gz. Run on the GPU machine from the repository root with OUT set.
set -u
# shellcheck source=bench/device-run.sh
. bench/device-run.sh
unpack_bundles
mistral8_config
# shellcheck disable=SC2086
run "$B" mistral8 $m8
# shellcheck disable=SC2086
beside 11e9 shared-mistral8 $m8
# shellcheck disable=SC2086
beside 4.24e9 shared-qwen05 $q --arms registered --warmup 1 --steps 2
# shellcheck disable=SC2086
beside 13.81e9 shared-llama3b $l --arms registered --warmup 1 --steps 2
# QUICK=1: one Qwen2.5-0.5B pair, no Llama / Qwen2.5-1.5B pairs (a call with little device time)
pairs="1 2"
[ "${QUICK:-0}" = 1 ] && pairs=1
for i in $pairs; do
  # shellcheck disable=SC2086
  run "$B" qwen05-$i $q --arms registered,unregistered --warmup 2 --steps 3
  # shellcheck disable=SC2086
  run "$B0" old-qwen05-$i $q --arms registered,unregistered --warmup 2 --steps 3
done
if [ "${QUICK:-0}" = 1 ]; then cd "$OUT" && tar czf r.tar.gz r && rm -rf r; exit 0; fi
# shellcheck disable=SC2086
run "$B" llama3b $l --arms registered,unregistered --warmup 1 --steps 3
# shellcheck disable=SC2086
run "$B0" old-llama3b $l --arms registered,unregistered --warmup 1 --steps 3
q15="$q15 --arms registered,unregistered --warmup 1 --steps 3"
# shellcheck disable=SC2086
run "$B" qwen15 $q15
# shellcheck disable=SC2086
run "$B0" old-qwen15 $q15
cd "$OUT" && tar czf r.tar.gz r && rm -rf r
