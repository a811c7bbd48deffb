#!/usr/bin/env bash
# Issue 36, seventh round, one device call (carry .xfer-pack and .whl): does a block per saved tensor and
# per temporary (73f129d, this tree: cuda.tar.xz) let the shared-GPU cases run, and where do the
# reserved bytes go? Every tool run writes the pool's trace (ZOB_POOL_TRACE, pool-NAME.txt:
# bench/pool_trace.py reads it).
#   0. DeepSpeed 0.19.8 at Qwen2.5-0.5B b4 s128 --offload-param, registered, with torch's memory
#      history: bench/deepspeed/memory_peak.py says per stream where its reserved bytes are
#      (ds-qwen05-peak.txt), to set beside the tool's pool trace of the same case.
#   1. Mistral-7B-v0.3 cut to 8 layers, b4 s512 --offload-param, registered: alone, then beside
#      another process that holds all but 11e9 bytes of the GPU.
#   2. Beside another process that leaves 1.15 x DeepSpeed's peak: Qwen2.5-0.5B b4 s128
#      (4.24e9 B) and Llama-3.2-3B b4 s512 (13.81e9 B).
#   3. Step times, this tree then the tool at 5bea820 (old.tar.xz), Qwen2.5-0.5B b4 s128,
#      registered and unregistered.
#   4. DeepSpeed's memory history at the Mistral-8 case, as in 0 (ds-mistral8-peak.txt).
# Output: $OUT/r.tar.gz. Run on the GPU machine from the repository root with OUT set.
set -u
# shellcheck source=bench/device-run.sh
. bench/device-run.sh
unpack_bundles
mistral8_config
H=$root/bench/deepspeed/harness.py
ds_history() {  # NAME CONFIG BATCH SEQ: DeepSpeed with its memory history, then memory_peak.py
  local name=$1 cfg=$2 b=$3 sq=$4
  { echo "\$ harness.py --model-config $cfg --batch $b --seq $sq --arms registered --warmup 1 --steps 1 --memory-history $name"
    s=$SECONDS; timeout -k 5 200 "$PY" "$H" --model-config "$cfg" --batch "$b" --seq "$sq" \
      --arms registered --warmup 1 --steps 1 --timeout 190 --memory-history "$OUT/r/$name" 2>&1
    echo "exit code: $?  wall: $((SECONDS - s)) s"; } > "$name.txt"
  { echo "\$ memory_peak.py $name-registered.pickle --json $name-peak.json"
    "$PY" "$root/bench/deepspeed/memory_peak.py" "$name-registered.pickle" --json "$name-peak.json" 2>&1
    echo "exit code: $?"; } > "$name-peak.txt"
  rm -f "$name-registered.pickle"
  pack
}
"$root/bench/deepspeed/install-offline" > install.txt 2>&1 || { cat install.txt; pack; exit 1; }
ds_history ds-qwen05 "$C/Qwen2.5-0.5B.json" 4 128
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
traced qwen05 run "$B" qwen05 $q --arms registered,unregistered --warmup 2 --steps 3
# shellcheck disable=SC2086
run "$B0" old-qwen05 $q --arms registered,unregistered --warmup 2 --steps 3
xz -T0 "$OUT"/r/pool-*.txt
pack
ds_history ds-mistral8 "$OUT/r/mistral8/config.json" 4 512
