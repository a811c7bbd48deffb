#!/usr/bin/env bash
# Can the Level Zero tests fail? Removes each barrier, wait and signal the xpu backend relies on,
# one at a time, in a scratch copy of the tree (never in the checkout), builds the Level Zero
# test binary there and runs every test in its own process against the fake driver, under two
# of CI's configurations: FAKE_ZE_SEED=1 with one copy engine, FAKE_ZE_SEED=4 with two. Prints
# one line per mutant, "<mutant> CAUGHT by: <tests>" or "<mutant> MISSED", and with --record
# writes the markdown record (results/level_zero/mutations.md is this output).
#   tests/fake_level_zero/mutations.sh [--record FILE] [SCRATCH_DIR]   (default: mktemp -d)
# Exit status 1 when a mutant is missed or the unmutated tree fails a test.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
record=""
if [ "${1:-}" = "--record" ]; then
  record=$(realpath -m "$2")
  shift 2
fi
scratch=${1:-$(mktemp -d /tmp/zob-l0-mutants.XXXXXX)}
started=$(date +%s)
commit=$(git -C "$root" rev-parse HEAD)
dirty=$(git -C "$root" status --porcelain -- src/backends/level_zero tests/fake_level_zero | wc -l)
mkdir -p "$scratch/src"
(cd "$root" && tar --exclude=./build --exclude=./.git -cf - .) | tar -xf - -C "$scratch/src"
# tar keeps the checkout's mtimes, older than a previous run's objects: make ninja rebuild.
find "$scratch/src/src/backends/level_zero" "$scratch/src/tests/fake_level_zero" -type f -exec touch {} +
# build/release inside the copy, as in the checkout, and paths relative to the copy: ccache
# finds the checkout's objects for the files no mutant touches.
build="$scratch/src/build/release"
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="$scratch/src"
fi
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$scratch/src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DZOB_CUDA=OFF \
    "${launcher[@]}" >/dev/null
fi
src="$scratch/src/src/backends/level_zero"

# name | file | exact text of the line (or lines, \n) removed | replacement (default: none)
mutants=(
  "enter_no_switch_barrier|lanes.cpp|    ZE_CHECK(zeCommandListAppendBarrier(lane.current, e, 0, nullptr));"
  "enter_no_switch_wait|lanes.cpp|    ZE_CHECK(zeCommandListAppendWaitOnEvents(target, 1, &e));"
  "enter_no_same_list_barrier|lanes.cpp|    ZE_CHECK(zeCommandListAppendBarrier(target, nullptr, 0, nullptr));"
  "record_no_renew|lanes.cpp|  if (e.recorded) e.renew();"
  "record_no_signal|lanes.cpp|  ZE_CHECK_D(zeCommandListAppendBarrier(list, e.handle(), 0, nullptr), to_string(q));"
  "queue_wait_no_wait|lanes.cpp|  ZE_CHECK_D(zeCommandListAppendWaitOnEvents(list, 1, &h), to_string(q));"
  "event_synchronize_no_wait|lanes.cpp|  ZE_CHECK(zeEventHostSynchronize(e.handle(), std::numeric_limits<std::uint64_t>::max()));"
  "synchronize_no_barrier|lanes.cpp|    ZE_CHECK(zeCommandListAppendBarrier(list, e, 0, nullptr));"
  "synchronize_no_host_wait|lanes.cpp|    ZE_CHECK(zeEventHostSynchronize(e, std::numeric_limits<std::uint64_t>::max()));"
  "release_event_no_reset|lanes.cpp|  if (ze_result_t r = zeEventHostReset(e); r != ZE_RESULT_SUCCESS)|  if (ze_result_t r = ZE_RESULT_SUCCESS; r != ZE_RESULT_SUCCESS)"
  "release_no_synchronize|level_zero_device.cpp|      synchronize();"
)
configs=("FAKE_ZE_SEED=1 FAKE_ZE_COPY_ENGINES=1" "FAKE_ZE_SEED=4 FAKE_ZE_COPY_ENGINES=2")

# Each test in its own process: a test that fails can leave queued work writing into freed
# host memory, and a crash must not hide the tests after it. Prints "<test>[seed N]" for each
# failure, and leaves each run's output in <out-dir> (a failed one's named *.failed).
run_tests() {  # <out-dir>
  local drv bin
  drv=$(find "$build" -name libfake_ze_driver.so -print -quit)
  bin=$(find "$build" -name zob_level_zero_tests -type f -print -quit)
  mkdir -p "$1"
  for config in "${configs[@]}"; do
    "$bin" --gtest_list_tests | awk '/^[^ ]/{suite=$1} /^  /{print suite $1}' |
      xargs -P 2 -I{} env ZE_ENABLE_ALT_DRIVERS="$drv" FAKE_ZE_KERNELS=pocl \
        FAKE_ZE_COPY_DELAY_US=2000 FAKE_ZE_HANG_SECONDS=5 $config bash -c \
        'out="$2/$1.${3%% *}"; nice timeout 120 "$0" --gtest_filter="$1" >"$out" 2>&1 ||
           { mv "$out" "$out.failed"; echo "$1[${3%% *}]"; }' \
        "$bin" {} "$1" "$config"
  done | sed 's/FAKE_ZE_SEED=/seed /' | sort | tr '\n' ' '
}

# The most frequent first complaints of the failed runs, addresses and sizes elided: how the
# fake (or the test) saw the mutant.
first_complaints() {  # <out-dir>
  for f in "$1"/*.failed; do
    grep -m1 -E '^fake-ze: |Failure$|bytes differ|differ' "$f" 2>/dev/null || true
  done | sed -E 's/0x[0-9a-f]+/…/g; s/[0-9]{3,}/N/g; s/^fake-ze: //' | sort | uniq -c | sort -rn | head -3 |
    sed -E 's/^ *[0-9]+ //; s/\|/\\|/g'
}

mutate() {  # <file> <text> <replacement>
  python3 - "$@" <<'PY'
import sys
path, text, repl = sys.argv[1], sys.argv[2].replace("\\n", "\n"), sys.argv[3]
s = open(path).read()
assert s.count(text + "\n") == 1, f"mutation text not found exactly once in {path}: {text}"
open(path, "w").write(s.replace(text + "\n", repl + ("\n" if repl else ""), 1))
PY
}

rows=()
missed=0
for m in "${mutants[@]}"; do
  IFS='|' read -r name file text repl <<<"$m"
  f="$src/$file"
  cp "$f" "$f.orig"
  mutate "$f" "$text" "${repl:-}"
  nice cmake --build "$build" --target zob_level_zero_tests fake_ze_driver >/dev/null
  failed=$(run_tests "$scratch/$name")
  if [ -n "$failed" ]; then
    echo "$name CAUGHT by: $failed"
    how=$(first_complaints "$scratch/$name" | paste -sd '\t' - | sed 's/\t/<br>/g')
    rows+=("| \`$name\` | $file | \`${text//|/\\|}\` | caught | ${failed% } | $how |")
  else
    echo "$name MISSED"
    missed=$((missed + 1))
    rows+=("| \`$name\` | $file | \`${text//|/\\|}\` | **MISSED** | | |")
  fi
  mv "$f.orig" "$f"
  touch "$f"  # the restored copy is older than the mutant: make the next build see it
done
# Unmutated: must pass.
nice cmake --build "$build" --target zob_level_zero_tests fake_ze_driver >/dev/null
unmutated=$(run_tests "$scratch/unmutated")
echo "unmutated: ${unmutated:-all tests pass}"
minutes=$((($(date +%s) - started + 59) / 60))

if [ -n "$record" ]; then
  tests=$("$(find "$build" -name zob_level_zero_tests -type f -print -quit)" --gtest_list_tests |
    grep -c '^  ')
  {
    echo "# Level Zero: can the tests fail? (the mutation record)"
    echo
    echo "Written by \`tests/fake_level_zero/mutations.sh --record results/level_zero/mutations.md\`"
    echo "(not by hand) on commit \`$commit\`$([ "$dirty" -gt 0 ] && echo " with uncommitted changes to the backend or the fake" || true),"
    echo "$(date -u +%Y-%m-%d), in $minutes min on $(nproc) cores. Rerun that command to check it."
    echo
    echo "Each barrier, wait and signal the xpu backend relies on (\`src/backends/level_zero\`) was"
    echo "removed, one at a time, in a scratch copy of the tree; the Level Zero test binary was"
    echo "rebuilt there and each of its $tests tests run in its own process against the fake driver"
    echo "(lists complete out of order, PoCL kernels, copies delayed 2 ms, waits give up after 5 s),"
    echo "under FAKE_ZE_SEED=1 with one copy engine and FAKE_ZE_SEED=4 with two. A mutant is"
    echo "caught when at least one test fails; [seed N] says under which configuration."
    echo
    echo "Result: **$((${#mutants[@]} - missed)) of ${#mutants[@]} caught**; the unmutated tree: ${unmutated:-every test passes under both configurations}."
    echo
    echo "| mutant | file | removed (or replaced) | result | failing tests | how the fake saw it (first complaints) |"
    echo "|---|---|---|---|---|---|"
    printf '%s\n' "${rows[@]}"
  } >"$record"
  echo "record: $record"
fi
[ "$missed" -eq 0 ] && [ -z "$unmutated" ]
