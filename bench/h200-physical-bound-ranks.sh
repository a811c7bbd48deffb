#!/usr/bin/env bash
# Issue 25 "where it applies": the physical bound with --gpus 2 on a one-GPU machine (the two
# ranks share the H200, its PCIe link and the host memory), stock and overlap interleaved, both
# loops, at the defaults, registered (results/h200/2026-12-03-physical-bound-ranks).
# Run on the GPU machine from the repository root with the CUDA bundle packed in .xfer-pack and
# OUT set.
set -u
tar xJf .xfer-pack/cuda.tar.xz; . .xfer-cuda/env.sh
B=$PWD/.xfer-cuda/zero3-offload-bench
mkdir -p $OUT/r; cd $OUT/r
run(){ name=$1; shift; { echo "\$ zero3-offload-bench $*"; $B "$@" --json $name.json 2>&1; echo "exit code: $?"; } > $name.txt; }
for loop in "" "--offload-param"; do
  for sch in stock overlap; do
    run gpus2${loop:+-op}-$sch --device cuda --gpus 2 --schedule $sch $loop --arms registered --repeats 1 --warmup 2 --steps 6 --timeout 120
  done
done
cd $OUT; tar czf r.tar.gz r; rm -rf r
