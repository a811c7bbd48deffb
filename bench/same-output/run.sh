#!/bin/bash
# Runs BINARY over fixed-seed CPU-device cases into OUT_DIR (CASE.out: stdout + rc, CASE.err);
# bench/same-output/compare.py A B then says whether two binaries differ apart from timings
# (DRIVERRESULT keys and values with every float timing masked, losses and checksums exact;
# the text with numbers masked; stderr sorted, since ranks interleave). Usage: run.sh BINARY OUT_DIR
B=$1; D=$2; mkdir -p $D; MODEL=$(cd "$(dirname "$0")" && pwd)/tiny-llama.json
base="--device cpu --batch 1 --seq 16 --steps 2 --warmup 1 --seed 7 --threads 2"
syn="--hidden 64 --layers 2 --vocab 256"
i=0
while read -r extra; do
  i=$((i+1))
  case "$extra" in *--model*) common="$base";; *) common="$base $syn";; esac
  $B $common $extra > $D/$i.out 2> $D/$i.err; echo "rc=$?" >> $D/$i.out
done <<LIST
--schedule deepspeed
--schedule deepspeed --offload-param
--schedule stock
--schedule overlap --offload-param
--schedule stock --gpus 2
--schedule deepspeed --gpus 2 --offload-param
--schedule overlap --gpus 2
--model $MODEL --schedule deepspeed
--model $MODEL --schedule stock --offload-param
--compat v2 --arms pageable,registered,unregistered
--dry-run --gpus 2 --model $MODEL
--dry-run --schedule stock --offload-param
--decoder eager --schedule stock
LIST
