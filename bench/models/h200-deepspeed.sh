#!/usr/bin/env bash
# issue 14's DeepSpeed reference on real architectures, on the GPU machine:
#   bench/models/h200-deepspeed.sh BUNDLE OUTDIR [MODEL...]     (default: Qwen2.5-0.5B Llama-3.2-1B)
# 1. installs DeepSpeed 0.19.8 + transformers offline (bench/deepspeed/install-offline; carry .whl),
# 2. counts every built-in config's parameters with transformers on the meta device next to
#    the tool's count (bench/models/count_params.py -> OUTDIR/counts.txt),
# 3. per MODEL, the tool (--model NAME) and DeepSpeed (--model-config configs/NAME.json)
#    interleaved by bench/deepspeed/side-by-side (three arms each, offload_param loop),
#    stopping before a model when less than STOP_AFTER_S (default 420) seconds remain.
set -uo pipefail
bundle=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
shift 2
models=("$@")
[ ${#models[@]} -eq 0 ] && models=(Qwen2.5-0.5B Llama-3.2-1B)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
py=${PYTHON:-/opt/torch/.venv/bin/python3}
t0=$SECONDS
"$here/../deepspeed/install-offline" > "$out/install.txt" 2>&1 || { cat "$out/install.txt"; exit 1; }
. "$bundle/env.sh"
{ echo "\$ count_params.py --tool zero3-offload-bench bench/models/configs/*.json"
  "$py" "$here/count_params.py" --tool "$bundle/zero3-offload-bench" "$here"/configs/*.json 2>&1
  echo "exit code: $?"; } > "$out/counts.txt"
cat "$out/counts.txt" >&2
for m in "${models[@]}"; do
  if [ $((SECONDS - t0)) -gt "${STOP_AFTER_S:-420}" ]; then
    echo "h200-deepspeed: stopping before $m (time)" >&2
    break
  fi
  mkdir -p "$out/$m"
  TOOL_FLAGS="--model $m" REF_FLAGS="--model-config $here/configs/$m.json" \
    "$here/../deepspeed/side-by-side" "$bundle" "$out/$m" 1 defaults
done
