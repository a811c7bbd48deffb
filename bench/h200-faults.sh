#!/usr/bin/env bash
# The faults of docs/faults.md made for real on the GPU machine, for its column H200:
#   scripts/gpu-bundle build/release .xfer-cuda && (on the GPU machine)
#   bench/h200-faults.sh .xfer-cuda OUTDIR [names...]
# Each fault writes OUTDIR/<name>.txt: the command, its output, the exit code, the wall time,
# and the leak checks after it (no zero3-offload-bench process left, nvidia-smi's compute apps
# empty; VmLck of the processes it watched while they ran). One line per fault on stdout.
# Small shapes except where the fault needs size: about 2-3 minutes on one H200.
#
# name                   docs/faults.md row
# memlock_preflight      RLIMIT_MEMLOCK below the pinned bytes (pre-flight, exit 2)
# memlock_skip_preflight RLIMIT_MEMLOCK below the pinned bytes (--skip-preflight, exit 1)
# memlock_taken          lockable memory gone between the pre-flight and the lock
# registration_refused   registration refused by the driver (ZOB_TEST_CUDA_FAULT=cudaHostRegister)
# device_oom_preflight   device out of memory in the set-up (the pre-flight's refusal first)
# device_oom_setup       device out of memory in the set-up (--skip-preflight: the allocation)
# device_fault_midrun    device fault in the middle of the steps, any backend (ZOB_TEST_DEVICE_FAULT)
# cuda_fault_midrun      CUDA runtime error in the middle of the steps (ZOB_TEST_CUDA_FAULT)
# rank_kill              a rank killed (SIGKILL) while its peers wait in a collective, --gpus N
# second_run             two runs on one device, or a run beside a training job
# sigint_ignored         a child that ignores SIGINT
# Not made here: host out of memory (needs a memory cgroup; the machine's other users would
# feel it), an MPI rank (no mpirun in the bundle), an allocation after the first steps (cannot
# happen), Level Zero's device loss (no Intel GPU).
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: bench/h200-faults.sh BUNDLE OUTDIR [names...]" >&2
  exit 2
fi
bundle=$(cd "$1" && pwd)
mkdir -p "$2"
out=$(cd "$2" && pwd)
shift 2
names=("$@")
. "$bundle/env.sh"
bin="$bundle/zero3-offload-bench"
# ZOB_FAULTS_DEVICE=cpu rehearses the script's mechanics where there is no GPU (no CUDA faults).
device=${ZOB_FAULTS_DEVICE:-cuda}
small=(--device "$device" --hidden 256 --layers 2 --batch 2 --seq 64 --steps 3 --warmup 1 --repeats 1)

selected() {
  [ ${#names[@]} -eq 0 ] && return 0
  local n
  for n in "${names[@]}"; do [ "$n" = "$1" ] && return 0; done
  return 1
}
now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# The run's processes: the parent by its name (the kernel keeps 15 characters), the arm and rank
# children (started through /proc/self/exe, so named "exe") by their argv. A command line that
# merely contains the binary's path (the device tool's own bash -c wrapper) is not one of them.
run_processes() {
  { pgrep -ax 'zero3-offload-b'; pgrep -af '^zero3-offload-bench --internal-'; } | sort -un
}

# After every fault: nothing of ours may be left, on the host or on the GPU.
leak_checks() {  # leak_checks FILE
  sleep 1  # the driver's own release of a just-exited process
  {
    echo "--- leak checks"
    local left
    left=$(run_processes)
    echo "zero3-offload-bench processes left: ${left:-none}"
    local apps
    apps=$(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>&1)
    echo "nvidia-smi compute apps: ${apps:-none}"
    echo "device memory used: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader 2>&1)"
  } >> "$1"
}

# VmLck of every zero3-offload-bench process now (the run's children included).
vmlck_now() {
  local p
  for p in $(run_processes | cut -d' ' -f1); do
    echo "pid $p ($(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-60)):" \
      "$(grep VmLck "/proc/$p/status" 2>/dev/null | tr -s ' \t' ' ')"
  done
}

summary() {  # summary NAME FILE: the fault's one line on stdout
  local f=$2
  printf '%-24s exit %s, %s s; %s; left: %s\n' "$1" \
    "$(grep -m1 -oP '^exit code: \K.*' "$f")" "$(grep -m1 -oP '^wall time: \K[0-9.]+' "$f")" \
    "$(grep -m1 -E 'error: |^verdict|pre-flight|^not made' "$f" | cut -c1-150)" \
    "$(grep -oP '^zero3-offload-bench processes left: \K.*' "$f" | cut -c1-40)"
}

# run NAME [ENV=V...] -- FLAGS...: one run of the binary, as root, in the foreground.
run() {
  local name=$1 f="$out/$1.txt" envs=()
  shift
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local t0 rc
  {
    echo "\$ ${envs[*]} zero3-offload-bench $*"
    t0=$(now)
    env "${envs[@]}" timeout 300 "$bin" "$@" 2>&1
    rc=$?
    echo "exit code: $rc"
    echo "wall time: $(since "$t0") s"
  } > "$f" 2>&1
  leak_checks "$f"
  summary "$name" "$f"
}

# --- a user without CAP_IPC_LOCK, under a low (or, for memlock_taken, no) memlock limit -----
user_bundle=/tmp/zob-faults-bundle
unprivileged_why=""
if ! command -v setpriv > /dev/null; then
  unprivileged_why="setpriv (util-linux) is not installed"
elif ! rm -rf "$user_bundle" || ! cp -r "$bundle" "$user_bundle" || ! chmod -R a+rX "$user_bundle"; then
  unprivileged_why="could not copy the bundle to $user_bundle"
fi
# env.sh put the bundle on LD_LIBRARY_PATH; that user reads the copy's libraries.
user_ld=${LD_LIBRARY_PATH//$bundle/$user_bundle}
if [ -z "$unprivileged_why" ] && ! LD_LIBRARY_PATH=$user_ld setpriv --reuid=65534 --regid=65534 \
    --clear-groups "$user_bundle/zero3-offload-bench" --version > /dev/null 2>&1; then
  unprivileged_why="uid 65534 cannot run $user_bundle/zero3-offload-bench --version"
fi

# as_user NAME LIMIT [ENV=V...] -- FLAGS...: the run as uid 65534 (nobody) under ulimit -l LIMIT.
as_user() {
  local name=$1 limit=$2 f="$out/$1.txt" envs=()
  shift 2
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  if [ -n "$unprivileged_why" ]; then
    { echo "not made: no unprivileged user: $unprivileged_why"; echo "exit code: -"; } > "$f"
    summary "$name" "$f"
    return
  fi
  local t0 rc
  {
    echo "\$ (ulimit -l $limit; setpriv --reuid=65534 --regid=65534 --clear-groups" \
      "${envs[*]} zero3-offload-bench $*)"
    t0=$(now)
    # A limit above the hard one needs CAP_SYS_RESOURCE (a container may lack it): said, and
    # the run goes on under the hard limit.
    (ulimit -l "$limit" 2> /dev/null || { echo "ulimit -l $limit refused: under the hard limit" \
      "$(ulimit -Hl) KiB instead"; ulimit -l "$(ulimit -Hl)"; }
     cd /tmp && exec env HOME=/tmp LD_LIBRARY_PATH="$user_ld" "${envs[@]}" \
      setpriv --reuid=65534 --regid=65534 --clear-groups \
      timeout 300 "$user_bundle/zero3-offload-bench" "$@") 2>&1
    rc=$?
    echo "exit code: $rc"
    echo "wall time: $(since "$t0") s"
  } > "$f" 2>&1
  leak_checks "$f"
  summary "$name" "$f"
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; "$bin" --version
  echo "unprivileged user: ${unprivileged_why:-uid 65534 through setpriv}"; } > "$out/machine.txt" 2>&1

# 64 MiB (ZOB_FAULTS_MEMLOCK_KIB) locks less than the small model's 0.17 GB per arm.
low=${ZOB_FAULTS_MEMLOCK_KIB:-65536}
selected memlock_preflight && as_user memlock_preflight "$low" -- "${small[@]}"
selected memlock_skip_preflight && as_user memlock_skip_preflight "$low" -- "${small[@]}" \
  --arms registered,unregistered,pageable --skip-preflight
# The limit is unlimited for the pre-flight; the unregistered arm's child lowers it to 1 MiB.
selected memlock_taken && as_user memlock_taken unlimited \
  ZOB_TEST_CHILD_FAULT=unregistered:memlock_taken -- "${small[@]}"

# The error named is one cudaHostRegister can return; the real registration is then undone.
selected registration_refused && run registration_refused \
  ZOB_TEST_CUDA_FAULT=cudaHostRegister:1:cudaErrorHostMemoryAlreadyRegistered -- "${small[@]}"

# About 260 GB of activations and logits for a 0.08 B-parameter model (--dry-run says so).
big=(--device "$device" --hidden 1024 --layers 2 --batch 512 --seq 4096 --steps 1 --warmup 1 --repeats 1)
selected device_oom_preflight && run device_oom_preflight -- "${big[@]}"
selected device_oom_setup && run device_oom_setup -- "${big[@]}" --skip-preflight

# Step 3 of 4 is the second timed step; the device fault is the registered arm's alone, the
# CUDA fault every child's (it counts per process).
selected device_fault_midrun && run device_fault_midrun \
  ZOB_TEST_DEVICE_FAULT=registered:embedding_backward:3 -- "${small[@]}"
selected cuda_fault_midrun && run cuda_fault_midrun \
  ZOB_TEST_CUDA_FAULT=embedding_backward:3 -- "${small[@]}" --arms registered,unregistered,pageable

# --- the faults made from outside while a run is going ----------------------------------------

# start FILE_PREFIX [ENV=V...] -- FLAGS...: the binary in a process group of its own (setsid
# execs it in place, so $! is its pid), stdout and stderr to FILE_PREFIX.stdout / .stderr.
start() {
  local prefix=$1 envs=()
  shift
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" setsid "$bin" "$@" > "$prefix.stdout" 2> "$prefix.stderr" &
}

# wait_for FILE PATTERN SECONDS: until a line of FILE matches (0), or the time is up (1).
wait_for() {
  local deadline=$((SECONDS + $3))
  while [ $SECONDS -lt "$deadline" ]; do
    grep -qE "$2" "$1" 2> /dev/null && return 0
    sleep 0.1
  done
  return 1
}

# Running and not yet a zombie (kill -0 answers for a zombie too).
alive() {
  local st
  st=$(ps -o stat= -p "$1" 2> /dev/null) || return 1
  [[ $st != Z* ]]
}

# finish PID FILE: waits for the run (killing its group after 300 s) and writes its exit code.
finish() {
  local pid=$1 f=$2 waited=0
  while alive "$pid" && [ $waited -lt 3000 ]; do sleep 0.1; waited=$((waited + 1)); done
  alive "$pid" && { echo "still running after 300 s: killed" >> "$f"; kill -9 -- "-$pid"; }
  wait "$pid"
  echo "exit code: $?" >> "$f"
}

# kill -9 of rank 1 of the registered arm in its timed steps, both ranks on the one GPU.
if selected rank_kill; then
  f="$out/rank_kill.txt"
  flags=(--device "$device" --gpus 2 --hidden 1024 --layers 4 --batch 4 --seq 512 --steps 12 --warmup 1
         --repeats 1 --arms registered,unregistered)
  echo "\$ ZOB_TEST_SHARE_DEVICE=1 zero3-offload-bench ${flags[*]}" > "$f"
  echo "(kill -9 of rank 1 of the registered arm once it prints its first timed step)" >> "$f"
  t0=$(now)
  start "$out/rank_kill" ZOB_TEST_SHARE_DEVICE=1 -- "${flags[@]}"
  pid=$!
  if wait_for "$out/rank_kill.stderr" '^\[registered rank 1/2\] step 2/' 180; then
    # The ranks are the arm child's forks (same command line), in rank order.
    arm_pids=$(pgrep -f -- '--internal-child registered' | tr '\n' ' ')
    ranks=""
    for p in $arm_pids; do
      [[ " $arm_pids " == *" $(ps -o ppid= -p "$p" | tr -d ' ') "* ]] && ranks="$ranks $p"
    done
    ranks=$(echo $ranks | tr ' ' '\n' | sort -n | tr '\n' ' ')
    rank1=$(echo "$ranks" | awk '{print $2}')
    { echo "run pid $pid, arm child and ranks $arm_pids, rank pids (rank order) $ranks"
      echo "VmLck while running:"; vmlck_now; } >> "$f"
    if [ -n "$rank1" ]; then
      t_kill=$(now)
      kill -9 "$rank1"
      echo "kill -9 $rank1 (rank 1) at $(since "$t0") s" >> "$f"
      wait_for "$out/rank_kill.stderr" 'error: arm registered' 120 &&
        echo "kill to the arm's error line: $(since "$t_kill") s" >> "$f"
      finish "$pid" "$f"
      echo "kill to exit: $(since "$t_kill") s" >> "$f"
    else
      echo "no second rank process under the arm child: nothing killed" >> "$f"
      finish "$pid" "$f"
    fi
  else
    echo "rank 1's first timed step never showed: nothing killed" >> "$f"
    finish "$pid" "$f"
  fi
  { echo "wall time: $(since "$t0") s"; echo "--- stdout"; cat "$out/rank_kill.stdout"
    echo "--- stderr"; cat "$out/rank_kill.stderr"; } >> "$f"
  leak_checks "$f"
  summary rank_kill "$f"
fi

# Two default runs started together on the one GPU: both must finish, and warn of the other.
if selected second_run; then
  f="$out/second_run.txt"
  flags=(--device "$device" --steps 3 --warmup 1)
  echo "\$ zero3-offload-bench ${flags[*]} & zero3-offload-bench ${flags[*]}  (started together)" > "$f"
  t0=$(now)
  start "$out/second_run.a" -- "${flags[@]}"
  pid_a=$!
  start "$out/second_run.b" -- "${flags[@]}"
  pid_b=$!
  sleep 8
  { echo "VmLck at 8 s:"; vmlck_now; } >> "$f"
  finish "$pid_a" "$out/second_run.a.stdout"
  finish "$pid_b" "$out/second_run.b.stdout"
  echo "wall time: $(since "$t0") s" >> "$f"
  for run_id in a b; do
    {
      echo "--- run $run_id: $(grep -m1 '^exit code' "$out/second_run.$run_id.stdout")"
      grep -E '^verdict|^speedup' "$out/second_run.$run_id.stdout"
      grep -h 'warning' "$out/second_run.$run_id.stdout" "$out/second_run.$run_id.stderr"
      grep '^DRIVERRESULT=' "$out/second_run.$run_id.stdout" | cut -d= -f2- | python3 -c \
        'import json,sys; d=json.load(sys.stdin); print("conclusive:", [v.get("conclusive") for v in d.get("verdicts", [])], "warnings:", d.get("warnings"))'
      echo "--- run $run_id stdout"; cat "$out/second_run.$run_id.stdout"
      echo "--- run $run_id stderr"; cat "$out/second_run.$run_id.stderr"
    } >> "$f" 2>&1
  done
  leak_checks "$f"
  printf '%-24s exits %s and %s, %s s; a: %s; b: %s\n' second_run \
    "$(grep -oP '^exit code: \K.*' "$out/second_run.a.stdout")" \
    "$(grep -oP '^exit code: \K.*' "$out/second_run.b.stdout")" \
    "$(grep -oP '^wall time: \K[0-9.]+' "$f")" \
    "$(grep -m1 '^verdict' "$out/second_run.a.stdout" | cut -c1-90)" \
    "$(grep -m1 '^verdict' "$out/second_run.b.stdout" | cut -c1-90)"
fi

# SIGINT to a run whose registered child ignores it: the 5 s grace, then SIGKILL; exit 130.
if selected sigint_ignored; then
  f="$out/sigint_ignored.txt"
  echo "\$ ZOB_TEST_CHILD_FAULT=registered:ignore_sigint zero3-offload-bench ${small[*]}; kill -INT" > "$f"
  t0=$(now)
  start "$out/sigint_ignored" ZOB_TEST_CHILD_FAULT=registered:ignore_sigint -- "${small[@]}"
  pid=$!
  for _ in $(seq 100); do pgrep -f -- '--internal-child registered' > /dev/null && break; sleep 0.1; done
  sleep 1
  t_int=$(now)
  kill -INT "$pid"
  echo "kill -INT $pid at $(since "$t0") s" >> "$f"
  finish "$pid" "$f"
  { echo "SIGINT to exit: $(since "$t_int") s"; echo "wall time: $(since "$t0") s"
    echo "--- stdout"; cat "$out/sigint_ignored.stdout"
    echo "--- stderr"; cat "$out/sigint_ignored.stderr"; } >> "$f"
  leak_checks "$f"
  summary sigint_ignored "$f"
fi
exit 0
