#!/usr/bin/env bash
# Issue 37: the overlap schedule against the physical bound now that the bound is the probe's
# alone (never raised to the step it judges; a step below it makes it "not known"). One round
# of bench/h200-physical-bound-2.sh's grid without the Adam benchmarks: stock, overlap and
# overlap at 2^24-element pieces, both loops, the defaults and h4096 l8 b4 s512, registered.
# A tarball after each run (what a time-out leaves comes back).
# Run on the GPU machine from the repository root with the CUDA bundle in .xfer-pack, OUT set.
set -u
tar xJf .xfer-pack/cuda.tar.xz; . .xfer-cuda/env.sh
B=$PWD/.xfer-cuda/zero3-offload-bench
mkdir -p $OUT/r; cd $OUT/r
lscpu > lscpu.txt
run(){ name=$1; shift; { echo "\$ zero3-offload-bench $*"; $B "$@" --json $name.json 2>&1; echo "exit code: $?"; } > $name.txt
  ( cd $OUT && tar czf r.tar.gz r ); }
H="--hidden 4096 --layers 8 --batch 4 --seq 512"
for shape in d h; do
  S=""; [ $shape = h ] && S="$H"
  for loop in "" "--offload-param"; do
    for sch in overlap stock; do
      run $shape${loop:+-op}-$sch-1 --device cuda --schedule $sch $loop $S --arms registered --repeats 1 --warmup 2 --steps 6
    done
    run $shape${loop:+-op}-overlap-c16M-1 --device cuda --schedule overlap --chunk-elems 16777216 $loop $S --arms registered --repeats 1 --warmup 2 --steps 6
  done
done
cd $OUT; tar czf r.tar.gz r; rm -rf r
