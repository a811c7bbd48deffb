#!/usr/bin/env bash
# One device call of issue 23's account: the tool, then DeepSpeed's account-run, on one case.
#   bench/deepspeed/h200-account.sh BUNDLE OUTDIR MODEL:BATCH:SEQ
# 1. the tool (BUNDLE from scripts/gpu-bundle) at that case: --device cuda --offload-param
#    --schedule deepspeed, arms registered and unregistered, 2 warmup + 4 timed steps;
# 2. bench/deepspeed/account-run at the same case (ARMS / PROFILE_ARMS / BUDGET_S pass through);
# 3. everything packed into OUTDIR.tar.gz (the device tool returns at most 8 files).
set -uo pipefail
bundle=$(cd "$1" && pwd)
out=$2
case_=$3
mkdir -p "$out"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
IFS=: read -r model batch seq <<< "$case_"
name="$model-b$batch-s$seq"
mkdir -p "$out/$name"
. "$bundle/env.sh"
cmd=("$bundle/zero3-offload-bench" --device cuda --offload-param --schedule deepspeed --model "$model"
     --batch "$batch" --seq "$seq" --warmup 2 --steps 4 --repeats 1 --arms registered,unregistered
     --json "$out/$name/tool.json")
{ echo "\$ ${cmd[*]}"; s=$SECONDS; "${cmd[@]}" 2>&1; echo "exit code: $?  wall: $((SECONDS - s)) s"; } \
  > "$out/$name/tool.txt"
grep -E '^(registered|unregistered|speedup)' "$out/$name/tool.txt" >&2
"$here/account-run" "$out" "$case_"
tar czf "$out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out"
