#!/usr/bin/env bash
# Can the Level Zero tests fail? Removes each wait or barrier the backend relies on, one at a
# time, in a scratch copy of the tree (never in the checkout), builds the Level Zero test
# binary there and runs it against the asynchronous fake driver. Prints one line per mutant:
#   <mutant> CAUGHT|MISSED <failing tests>
#   tests/fake_level_zero/mutations.sh [SCRATCH_DIR]   (default: a fresh mktemp -d)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
scratch=${1:-$(mktemp -d /tmp/zob-l0-mutants.XXXXXX)}
mkdir -p "$scratch/src"
(cd "$root" && tar --exclude=./build --exclude=./.git -cf - .) | tar -xf - -C "$scratch/src"
# tar keeps the checkout's mtimes, older than a previous run's objects: make ninja rebuild.
find "$scratch/src/src/backends/level_zero" "$scratch/src/tests/fake_level_zero" -type f -exec touch {} +
build="$scratch/build"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$scratch/src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DZOB_CUDA=OFF >/dev/null
fi

# name | file | exact text removed (the mutant)
mutants=(
  "enter_no_barrier|lanes.cpp|    ZE_CHECK(zeCommandListAppendBarrier(lane.current, e, 0, nullptr));"
  "enter_no_wait|lanes.cpp|    ZE_CHECK(zeCommandListAppendWaitOnEvents(target, 1, &e));"
  "record_no_renew|lanes.cpp|  if (e.recorded) e.renew();"
  "record_no_signal|lanes.cpp|  ZE_CHECK_D(zeCommandListAppendBarrier(list, e.handle(), 0, nullptr), to_string(q));"
  "queue_wait_no_wait|lanes.cpp|  ZE_CHECK_D(zeCommandListAppendWaitOnEvents(list, 1, &h), to_string(q));"
  "event_synchronize_no_wait|lanes.cpp|  ZE_CHECK(zeEventHostSynchronize(e.handle(), std::numeric_limits<std::uint64_t>::max()));"
  "synchronize_no_barrier|lanes.cpp|    ZE_CHECK(zeCommandListAppendBarrier(list, e, 0, nullptr));"
  "synchronize_no_host_wait|lanes.cpp|    ZE_CHECK(zeEventHostSynchronize(e, std::numeric_limits<std::uint64_t>::max()));"
  "release_no_synchronize|level_zero_device.cpp|      synchronize();"
)

# Each test in its own process: a test that fails can leave queued work writing into freed
# host memory, and a crash must not hide the tests after it.
run_tests() {  # <out-prefix>: prints the failing tests
  local drv bin t failed=""
  drv=$(find "$build" -name libfake_ze_driver.so -print -quit)
  bin=$(find "$build" -name zob_level_zero_tests -type f -print -quit)
  for t in $("$bin" --gtest_list_tests | awk '/^[^ ]/{suite=$1} /^  /{print suite $1}'); do
    if ! env ZE_ENABLE_ALT_DRIVERS="$drv" FAKE_ZE_KERNELS=pocl FAKE_ZE_COPY_DELAY_US=2000 \
        FAKE_ZE_HANG_SECONDS=5 timeout 120 "$bin" --gtest_filter="$t" >"$1.$t.txt" 2>&1; then
      failed+="$t "
    fi
  done
  echo "$failed"
}

for m in "${mutants[@]}"; do
  IFS='|' read -r name file text <<<"$m"
  f="$scratch/src/src/backends/level_zero/$file"
  cp "$f" "$f.orig"
  python3 - "$f" "$text" <<'PY'
import sys
path, text = sys.argv[1], sys.argv[2]
s = open(path).read()
assert s.count(text + "\n") == 1, f"mutation text not found exactly once in {path}: {text}"
open(path, "w").write(s.replace(text + "\n", "", 1))
PY
  cmake --build "$build" --target zob_level_zero_tests fake_ze_driver >/dev/null
  failed=$(run_tests "$scratch/$name")
  if [ -n "$failed" ]; then echo "$name CAUGHT by: $failed"; else echo "$name MISSED"; fi
  mv "$f.orig" "$f"
  touch "$f"  # the restored copy is older than the mutant: make the next build see it
done
# Unmutated: must pass.
cmake --build "$build" --target zob_level_zero_tests fake_ze_driver >/dev/null
failed=$(run_tests "$scratch/unmutated")
echo "unmutated: ${failed:-all tests pass}"
