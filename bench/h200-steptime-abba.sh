#!/usr/bin/env bash
# Step times of this tree (cuda.tar.xz) against the tool at 5bea820 (old.tar.xz), counterbalanced
# A B B A A B (new old old new new old) so that the GPU machine's drifting host bandwidth falls on
# both: Qwen2.5-1.5B b4 s512 --offload-param --schedule deepspeed, registered and unregistered.
# One device call (carry .xfer-pack); output $OUT/r.tar.gz; each NAME.txt starts with its command.
set -u
: "${OUT:?set OUT to the folder whose files come back}"
root=$PWD
C=$root/bench/models/configs
mkdir -p "$OUT/r"
cd "$OUT/r" || exit 1
{ nvidia-smi; lscpu; } > machine.txt 2>&1
run() { # BIN NAME FLAGS...
  local bin=$1 name=$2 s rc
  shift 2
  { echo "\$ zero3-offload-bench $*"; s=$(date +%s.%N)
    (. "$(dirname "$bin")/env.sh"; timeout -k 5 150 "$bin" "$@" --json "$name.json" 2>&1); rc=$?
    echo "exit code: $rc"; echo "wall: $(awk "BEGIN{print $(date +%s.%N) - $s}") s"; } > "$name.txt"
  (cd "$OUT" && tar czf r.tar.gz r)
}
tar xJf "$root/.xfer-pack/cuda.tar.xz" -C "$root"
tar xJf "$root/.xfer-pack/old.tar.xz" -C "$root"
B=$root/.xfer-cuda/zero3-offload-bench
B0=$root/.xfer-old/zero3-offload-bench
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
