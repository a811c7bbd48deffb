#!/usr/bin/env bash
# --schedule deepspeed with --gpus N on CUDA (issue 15), on a one-GPU machine: the ranks share
# the GPU (ZOB_TEST_SHARE_DEVICE=1, NCCL over loopback sockets: exact results, meaningless
# timings). Checks, in one call:
#   - the GPU test suite (the device-to-device copy the deepspeed ranks use is in it);
#   - scripts/cuda-ranks-check with --schedule deepspeed (both loops): NCCL vs the CPU device;
#   - deepspeed and stock at --gpus 2 give the same checksum and losses (both loops);
#   - the default model at --gpus 2 (DeepSpeed's default buckets and thresholds, 0.53 B params);
#   - the one-GPU default (deepspeed) run, to compare with earlier calls.
#   bench/h200-deepspeed-ranks.sh BUNDLE OUTDIR
set -uo pipefail
bundle=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
. "$bundle/env.sh"
bin="$bundle/zero3-offload-bench"
{ "$bin" --version; nvidia-smi -L; } > "$out/version.txt" 2>&1
{ timeout 200 "$bundle/zob_gpu_tests"; echo "exit code: $?"; } > "$out/gpu-tests.txt" 2>&1
tail -3 "$out/gpu-tests.txt" >&2
check() {  # check NAME FLAGS N...: cuda-ranks-check with RANKS_FLAGS
  local name=$1 flags=$2
  shift 2
  { RANKS_FLAGS="$flags" timeout 200 "$here/scripts/cuda-ranks-check" "$bundle" "$out/$name" "$@"
    echo "exit code: $?"; } > "$out/$name.txt" 2>&1
  echo "== $name: $(grep -E 'worst|exit code' "$out/$name.txt" | tr '\n' ' ')" >&2
}
check ds-copyback "--schedule deepspeed" 2 3
check ds-offload "--schedule deepspeed --offload-param" 2 3
check stock-copyback "--schedule stock" 2
check stock-offload "--schedule stock --offload-param" 2
python3 - "$out" > "$out/schedules-agree.txt" <<'PY'
import json, sys
o = sys.argv[1]
for loop in ("copyback", "offload"):
    for dev in ("cuda", "cpu"):
        a = json.load(open(f"{o}/ds-{loop}/ranks2_{dev}.json"))
        b = json.load(open(f"{o}/stock-{loop}/ranks2_{dev}.json"))
        for arm in ("registered", "unregistered"):
            same = a[arm]["param_checksum"] == b[arm]["param_checksum"] and a[arm]["losses"] == b[arm]["losses"]
            print(f"--gpus 2 {dev} {loop} {arm}: deepspeed {a[arm]['param_checksum']} stock "
                  f"{b[arm]['param_checksum']} schedules agree: {'yes' if same else 'NO'}")
PY
cat "$out/schedules-agree.txt" >&2
run() {  # run NAME [ENV=V] FLAGS...: NAME.txt starts with the command, ends with exit code and wall clock
  local name=$1
  shift
  local t0=$EPOCHREALTIME
  { echo "\$ zero3-offload-bench $*"; "$bin" "$@" 2>&1; echo "exit code: $?"
    awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "wall clock: %.2f s\n", b - a }'; } > "$out/$name.txt"
  echo "== $name: $(grep -E '^(speedup|verdict|exit code|wall)' "$out/$name.txt" | tr '\n' ' ' | cut -c1-300)" >&2
}
export ZOB_TEST_SHARE_DEVICE=1
run default-gpus2-shared --device cuda --gpus 2 --steps 2 --warmup 1 --timeout 200 --json "$out/default-gpus2-shared.json"
unset ZOB_TEST_SHARE_DEVICE
run default-gpus1 --device cuda --json "$out/default-gpus1.json"
# A real architecture (untied head) at --gpus 2, deepspeed and stock: the same checksum.
export ZOB_TEST_SHARE_DEVICE=1
for sch in deepspeed stock; do
  run "mistral-l2-gpus2-$sch" --device cuda --model Mistral-7B-v0.3 --layers 2 --gpus 2 --schedule "$sch" \
    --arms registered --steps 2 --warmup 1 --timeout 200 --json "$out/mistral-l2-gpus2-$sch.json"
done
unset ZOB_TEST_SHARE_DEVICE
python3 - "$out" >> "$out/schedules-agree.txt" <<'PY'
import json, sys
o = sys.argv[1]
a, b = (json.load(open(f"{o}/mistral-l2-gpus2-{s}.json"))["registered"] for s in ("deepspeed", "stock"))
same = a["param_checksum"] == b["param_checksum"] and a["losses"] == b["losses"]
print(f"--gpus 2 cuda Mistral-7B-v0.3 --layers 2 registered: deepspeed {a['param_checksum']} stock "
      f"{b['param_checksum']} schedules agree: {'yes' if same else 'NO'}")
PY
tail -1 "$out/schedules-agree.txt" >&2
