#!/usr/bin/env bash
# Issue 36, eighth round, one device call (carry .xfer-pack): does the shared-GPU run hold up,
# and does a block per saved tensor and per temporary (this tree, cuda.tar.xz) cost step time?
#   1. Mistral-7B-v0.3 cut to 8 layers, b4 s512 --offload-param, registered, beside another
#      process that holds all but 11e9 bytes of the GPU, twice; Llama-3.2-3B b4 s512 beside one
#      that leaves 13.81e9 (1.15 x DeepSpeed's 12.01 GB peak), once. Pool traces: pool-NAME.txt.
#   2. Step times against the tool at 5bea820 (old.tar.xz), in the order new old old new:
#      Qwen2.5-1.5B b4 s512 and Llama-3.2-3B b4 s512, registered and unregistered.
# Output: $OUT/r.tar.gz. Run on the GPU machine from the repository root with OUT set.
set -u
# shellcheck source=bench/device-run.sh
. bench/device-run.sh
unpack_bundles
mistral8_config
traced() { local name=$1; shift; ZOB_POOL_TRACE=$OUT/r/pool-$name.txt "$@"; }
for i in 1 2; do
  # shellcheck disable=SC2086
  traced shared-mistral8-$i beside 11e9 shared-mistral8-$i $m8
done
# shellcheck disable=SC2086
traced shared-llama3b beside 13.81e9 shared-llama3b $l --arms registered --warmup 1 --steps 2
for order in "B 1" "B0 1" "B0 2" "B 2"; do
  set -- $order
  bin=${!1}; tag=$([ "$1" = B ] && echo new || echo old)
  # shellcheck disable=SC2086
  run "$bin" $tag-qwen15-$2 $q15 --arms registered,unregistered --warmup 1 --steps 3
done
for order in "B 1" "B0 1"; do
  set -- $order
  bin=${!1}; tag=$([ "$1" = B ] && echo new || echo old)
  # shellcheck disable=SC2086
  run "$bin" $tag-llama3b-$2 $l --arms registered,unregistered --warmup 1 --steps 3
done
xz -T0 "$OUT"/r/pool-*.txt
pack
