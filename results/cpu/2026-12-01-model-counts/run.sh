#!/usr/bin/env bash
# The built-in --model configs' parameter counts and device plans, as the dry run prints them
# (CPU device, default batch 4 x seq 128, deepspeed schedule, copy_back loop).
# Usage (repository root): results/cpu/2026-12-01-model-counts/run.sh build/release/zero3-offload-bench
set -uo pipefail
bench=${1:?usage: run.sh BINARY}
out=$(dirname "$0")/dry-runs.txt
: > "$out"
for m in Llama-3.2-1B Llama-3.2-3B Llama-3.1-8B Llama-3.1-70B Mistral-7B-v0.3 Qwen2.5-0.5B \
         Qwen2.5-1.5B Qwen2.5-3B Qwen2.5-7B Qwen2.5-14B Qwen2.5-32B Qwen2.5-72B; do
  echo "\$ zero3-offload-bench --model $m --dry-run --device cpu" >> "$out"
  "$bench" --model "$m" --dry-run --device cpu 2>&1 | grep -E '^(model|step|arm registered)' >> "$out"
done
