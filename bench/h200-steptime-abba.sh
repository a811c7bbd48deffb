#!/usr/bin/env bash
# Step times of this tree (cuda.tar.xz) against the tool at 5bea820 (old.tar.xz), counterbalanced
# A B B A A B (new old old new new old) so that the GPU machine's drifting host bandwidth falls on
# both: Qwen2.5-1.5B b4 s512 --offload-param --schedule deepspeed, registered and unregistered.
# One device call (carry .xfer-pack); output $OUT/r.tar.gz; each NAME.txt starts with its command.
set -u
# shellcheck source=bench/device-run.sh
. bench/device-run.sh
unpack_bundles
q="--model $C/Qwen2.5-1.5B.json --batch 4 --seq 512 --offload-param --device cuda --schedule deepspeed"
q="$q --repeats 1 --arms registered,unregistered --warmup 1 --steps 3"
i=0
for which in new old old new new old; do
  i=$((i + 1))
  if [ "$which" = new ]; then bin=$B; else bin=$B0; fi
  # shellcheck disable=SC2086
  run "$bin" "$i-$which-qwen15" $q
done
cd "$OUT" && tar czf r.tar.gz r && rm -rf r
