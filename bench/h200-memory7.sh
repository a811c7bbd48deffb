#!/usr/bin/env bash
# Issue 36, seventh round, one device call (carry .xfer-pack): does a block per saved tensor and
# per temporary (73f129d, this tree: cuda.tar.xz) let the shared-GPU cases run, and where do the
# reserved bytes go? Every tool run writes the pool's trace (ZOB_POOL_TRACE, pool-NAME.txt:
# bench/pool_trace.py reads it).
#   1. Mistral-7B-v0.3 cut to 8 layers, b4 s512 --offload-param, registered: alone, then beside
#      another process that holds all but 11e9 bytes of the GPU.
#   2. Beside another process that leaves 1.15 x DeepSpeed's peak: Qwen2.5-0.5B b4 s128
#      (4.24e9 B) and Llama-3.2-3B b4 s512 (13.81e9 B).
#   3. Step times, this tree then the tool at 5bea820 (old.tar.xz), Qwen2.5-0.5B b4 s128 and
#      Qwen2.5-1.5B b4 s512, registered and unregistered.
# Output: $OUT/r.tar.gz. Run on the GPU machine from the repository root with OUT set.
set -u
# shellcheck source=bench/device-run.sh
. bench/device-run.sh
unpack_bundles
mistral8_config
common="--offload-param --device cuda --schedule deepspeed --repeats 1"
m8="--model $OUT/r/mistral8/config.json --batch 4 --seq 512 $common --arms registered --warmup 1 --steps 2"
q="--model $C/Qwen2.5-0.5B.json --batch 4 --seq 128 $common"
l="--model $C/Llama-3.2-3B.json --batch 4 --seq 512 $common"
q15="--model $C/Qwen2.5-1.5B.json --batch 4 --seq 512 $common"
traced() { local name=$1; shift; ZOB_POOL_TRACE=$OUT/r/pool-$name.txt "$@"; }
# shellcheck disable=SC2086
traced mistral8 run "$B" mistral8 $m8
# shellcheck disable=SC2086
traced shared-mistral8 beside 11e9 shared-mistral8 $m8
# shellcheck disable=SC2086
traced shared-qwen05 beside 4.24e9 shared-qwen05 $q --arms registered --warmup 1 --steps 2
# shellcheck disable=SC2086
traced shared-llama3b beside 13.81e9 shared-llama3b $l --arms registered --warmup 1 --steps 2
# shellcheck disable=SC2086
run "$B" qwen05 $q --arms registered,unregistered --warmup 2 --steps 3
# shellcheck disable=SC2086
run "$B0" old-qwen05 $q --arms registered,unregistered --warmup 2 --steps 3
# shellcheck disable=SC2086
run "$B" qwen15 $q15 --arms registered,unregistered --warmup 1 --steps 3
# shellcheck disable=SC2086
run "$B0" old-qwen15 $q15 --arms registered,unregistered --warmup 1 --steps 3
xz -T0 "$OUT"/r/pool-*.txt
pack
