#!/usr/bin/env bash
# Issue 25: the host memory with the DMA beside it, the probe by footprint, and the overlap
# step traced in both loops at both shapes (results/h200/2026-12-02-host-memory). Run on the GPU
# machine from the repository root with the CUDA bundle packed in .xfer-pack and OUT set.
set -u
tar xJf .xfer-pack/cuda.tar.xz; . .xfer-cuda/env.sh
B=$PWD/.xfer-cuda/zero3-offload-bench
H=$PWD/.xfer-cuda/zob_gpu_host_bench
mkdir -p $OUT/r; cd $OUT/r
lscpu > lscpu.txt; getconf -a | grep -i CACHE > cache.txt
run(){ name=$1; shift; { echo "\$ zero3-offload-bench $*"; $B "$@" --json $name.json 2>&1; } > $name.txt; }
{ echo "\$ zob_gpu_host_bench 1336049664 5"; $H 1336049664 5 2>&1; } > host-bench-h.txt
run h-overlap --device cuda --schedule overlap --hidden 4096 --layers 8 --batch 4 --seq 512 --arms registered --repeats 1 --warmup 2 --steps 6 --trace h-overlap.trace.json
run h-op-overlap --device cuda --schedule overlap --offload-param --hidden 4096 --layers 8 --batch 4 --seq 512 --arms registered --repeats 1 --warmup 2 --steps 6 --trace h-op-overlap.trace.json
run d-overlap --device cuda --schedule overlap --arms registered --repeats 1 --warmup 2 --steps 6 --trace d-overlap.trace.json
run d-op-overlap --device cuda --schedule overlap --offload-param --arms registered --repeats 1 --warmup 2 --steps 6 --trace d-op-overlap.trace.json
{ echo "\$ zob_gpu_host_bench 670000000 5"; $H 670000000 5 2>&1; } > host-bench-d.txt
cd $OUT; tar czf r.tar.gz r; rm -rf r
