#!/usr/bin/env bash
# Issue 25, the physical bound as of the host-memory results (probe over 2^28 elements at its
# median pass, the serial part, the fastest step as a floor): stock and overlap interleaved, two
# rounds, both loops, the defaults and h4096 l8 b4 s512, the overlap also at 2^24-element pieces; CPU Adam (fused with the cast) beside
# PyTorch's fused AdamW + cast before and after (results/h200/2026-12-03-physical-bound-2: each
# call's bound is the one of the commit its README names).
# Run on the GPU machine from the repository root with the CUDA bundle packed in .xfer-pack and
# OUT set. ROUNDS=N sets the rounds (default 2).
set -u
tar xJf .xfer-pack/cuda.tar.xz; . .xfer-cuda/env.sh
B=$PWD/.xfer-cuda/zero3-offload-bench
TORCH_REF=$PWD/scripts/torch_adamw_reference.py
PY=/opt/torch/.venv/bin/python3
mkdir -p $OUT/r; cd $OUT/r
lscpu > lscpu.txt
run(){ name=$1; shift; { echo "\$ zero3-offload-bench $*"; $B "$@" --json $name.json 2>&1; echo "exit code: $?"; } > $name.txt; }
adam(){ run adam-$1 adam --params 1336049664 --repeats 5
  { echo "\$ python3 scripts/torch_adamw_reference.py 1336049664 16 5"; $PY $TORCH_REF 1336049664 16 5 2>&1; echo "exit code: $?"; } > torch_adamw-$1.txt; }
adam 1
H="--hidden 4096 --layers 8 --batch 4 --seq 512"
for round in $(seq ${ROUNDS:-2}); do
  for shape in d h; do
    S=""; [ $shape = h ] && S="$H"
    for loop in "" "--offload-param"; do
      for sch in stock overlap; do
        run $shape${loop:+-op}-$sch-$round --device cuda --schedule $sch $loop $S --arms registered --repeats 1 --warmup 2 --steps 6
      done
      # the overlap's pieces a quarter of the default: a shorter wait for the first, and for the last copy-back
      run $shape${loop:+-op}-overlap-c16M-$round --device cuda --schedule overlap --chunk-elems 16777216 $loop $S --arms registered --repeats 1 --warmup 2 --steps 6
    done
  done
done
adam 2
cd $OUT; tar czf r.tar.gz r; rm -rf r
