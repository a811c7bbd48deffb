#!/usr/bin/env bash
# issue 14's H200 record: --model with built-in configs of three families and one config.json
# path, both loops, both arms, with phases; the largest built-in that fits the host, and the
# next size up refused by the pre-flight.
#   bench/models/h200-models.sh BUNDLE OUTDIR
# Each run writes OUTDIR/NAME.txt (starting with its command, ending with exit code and wall
# clock) and OUTDIR/NAME.json.
set -uo pipefail
bundle=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$bundle/env.sh"
bin="$bundle/zero3-offload-bench"

run() {  # run NAME FLAGS...
  local name=$1
  shift
  local t0=$EPOCHREALTIME rc
  { echo "\$ zero3-offload-bench $*"; "$bin" "$@" --json "$out/$name.json" 2>&1; rc=$?
    echo "exit code: $rc"
    awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "wall clock: %.2f s\n", b - a }'; } > "$out/$name.txt"
  echo "== $name: $(grep -E '^(speedup|pinning speedup|exit code|wall)' "$out/$name.txt" | tr '\n' ' ')" >&2
}

nvidia-smi --query-gpu=name,memory.total --format=csv > "$out/machine.txt" 2>&1
grep -E 'MemTotal|MemAvailable' /proc/meminfo >> "$out/machine.txt"
# dry runs first: the plan of every size, and the verdict of the ones that do not fit
for m in Qwen2.5-0.5B Llama-3.2-1B Llama-3.2-3B Qwen2.5-3B Mistral-7B-v0.3 Qwen2.5-7B; do
  run "dry-$m" --device cuda --model "$m" --offload-param --dry-run
done
run qwen0.5b-offload --device cuda --model Qwen2.5-0.5B --offload-param
run qwen0.5b-copyback --device cuda --model Qwen2.5-0.5B
run llama1b-offload --device cuda --model Llama-3.2-1B --offload-param
run llama1b-copyback --device cuda --model Llama-3.2-1B
run path-qwen1.5b-offload --device cuda --model "$here/configs/Qwen2.5-1.5B.json" --offload-param
run path-qwen1.5b-copyback --device cuda --model "$here/configs/Qwen2.5-1.5B.json"
run mistral-l8-offload --device cuda --model Mistral-7B-v0.3 --layers 8 --offload-param
run mistral-l8-copyback --device cuda --model Mistral-7B-v0.3 --layers 8
# the largest that fits this host (125.8 GiB on the H200 of 2026-12-01): ~20 B/param of host memory per arm
run llama3b-offload --device cuda --model Llama-3.2-3B --offload-param --steps 3 --warmup 1
# the next size up: refused by the pre-flight, with its numbers
run mistral7b-offload --device cuda --model Mistral-7B-v0.3 --offload-param
