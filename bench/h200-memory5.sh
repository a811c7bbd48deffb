#!/usr/bin/env bash
# Issue 36, fifth round, one device call (carry .xfer-pack and .whl):
#   1. Where DeepSpeed 0.19.8's step peak lies at the issue's shared-GPU case, Mistral-7B-v0.3 cut
#      to 8 layers, b4 s512 --offload-param, registered arm: harness.py --memory-history, then
#      bench/deepspeed/memory_peak.py on the snapshot (the blocks live at the peak, grouped by the
#      frame that allocated them) -> ds-mistral8-peak.txt / .json.
#   2. The tool at that case (cuda.tar.xz: this tree, per-module scratch and logits blocks), first
#      alone (its allocated and reserved peaks), then beside another process that holds all but
#      11e9 bytes of the GPU (nvidia-smi's per-process memory every 0.5 s).
#   3. Step times against the tool before the per-module blocks (old.tar.xz, built at 5bea820):
#      Qwen2.5-0.5B b4 s128 --offload-param, new / old / new / old; Llama-3.2-3B b4 s512, new / old.
# Each NAME.txt starts with its command and ends with the exit code and the wall time.
# Output: $OUT/r.tar.gz. Run on the GPU machine from the repository root with OUT set.
set -u
# shellcheck source=bench/device-run.sh
. bench/device-run.sh
H=$root/bench/deepspeed/harness.py
unpack_bundles
"$root/bench/deepspeed/install-offline" > install.txt 2>&1 || { cat install.txt; pack; exit 1; }

mistral8_config
M8=$OUT/r/mistral8/config.json

{ echo "\$ harness.py --model-config $M8 --batch 4 --seq 512 --arms registered --warmup 1 --steps 1 --memory-history ds-mistral8"
  s=$SECONDS; timeout -k 5 300 "$PY" "$H" --model-config "$M8" --batch 4 --seq 512 --arms registered \
    --warmup 1 --steps 1 --timeout 280 --memory-history "$OUT/r/ds-mistral8" 2>&1
  echo "exit code: $?  wall: $((SECONDS - s)) s"; } > ds-mistral8.txt
{ echo "\$ memory_peak.py ds-mistral8-registered.pickle --json ds-mistral8-peak.json"
  "$PY" "$root/bench/deepspeed/memory_peak.py" ds-mistral8-registered.pickle --json ds-mistral8-peak.json 2>&1
  echo "exit code: $?"; } > ds-mistral8-peak.txt
ls -la ds-mistral8-registered.pickle >> ds-mistral8-peak.txt 2>&1
rm -f ds-mistral8-registered.pickle
pack

m8="--model $M8 --batch 4 --seq 512 --offload-param --device cuda --schedule deepspeed"
m8="$m8 --arms registered --repeats 1 --warmup 1 --steps 2"
# shellcheck disable=SC2086
run "$B" mistral8 $m8
# shellcheck disable=SC2086
beside 11e9 shared-mistral8 $m8

q="--model $C/Qwen2.5-0.5B.json --batch 4 --seq 128 --offload-param --device cuda --schedule deepspeed"
q="$q --arms registered,unregistered --repeats 1 --warmup 2 --steps 3"
for i in 1 2; do
  # shellcheck disable=SC2086
  run "$B" qwen05-$i $q
  # shellcheck disable=SC2086
  run "$B0" old-qwen05-$i $q
done
l="--model $C/Llama-3.2-3B.json --batch 4 --seq 512 --offload-param --device cuda --schedule deepspeed"
l="$l --arms registered,unregistered --repeats 1 --warmup 1 --steps 3"
# shellcheck disable=SC2086
run "$B" llama3b $l
# shellcheck disable=SC2086
run "$B0" old-llama3b $l
cd "$OUT" && tar czf r.tar.gz r && rm -rf r
