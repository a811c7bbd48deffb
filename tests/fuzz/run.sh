#!/usr/bin/env bash
# Builds a libFuzzer target with clang-15 (+ASan/UBSan) and runs it for a bounded time on the
# committed corpus (copied, so CI never rewrites the repo). Fails when libFuzzer finds an input
# that crashes, leaks, hangs or trips a sanitizer, printing the report and the saved input.
# Usage:
#   tests/fuzz/run.sh <target> <build-dir> <seconds> <source files...>
set -euo pipefail
target=$1 build=$2 seconds=$3
shift 3
# fmt's implementation compiled once (src/common/fmt_instantiations.cpp, as the CMake build
# does) rather than header-only in every file: header-only fmt tripled each file's compile.
set -- "$@" "$(cd "$(dirname "$0")/../.." && pwd)/src/common/fmt_instantiations.cpp"
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$build/fuzz"
bin="$build/fuzz/$target"
# One clang per source file, all CPUs at once (the compile is most of this test's time).
flags=(-std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
       -I"$root/include" -I"$root/src")
objs=()
pids=()
for src in "$@"; do
  # Named by the path under the repository, not the file name alone: src/common/settings.cpp
  # and a file of the same name in another folder would otherwise write one object.
  rel=$(realpath --relative-to="$root" "$src")
  obj="$build/fuzz/$target.${rel//\//_}.o"
  clang++-15 "${flags[@]}" -c "$src" -o "$obj" &
  pids+=($!)
  objs+=("$obj")
done
for pid in "${pids[@]}"; do wait "$pid"; done
clang++-15 "${flags[@]}" "${objs[@]}" -o "$bin"
work="$build/fuzz/$target.corpus"
rm -rf "$work" && mkdir -p "$work"
cp "$root/tests/fuzz/corpus/$target/"* "$work/"
artifacts="$build/fuzz/$target-artifacts"
rm -rf "$artifacts" && mkdir -p "$artifacts"
log="$build/fuzz/$target.log"
rc=0
"$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$artifacts/" "$work" >"$log" 2>&1 || rc=$?
grep -E 'stat::number_of_executed_units|Done' "$log" || true
if [ "$rc" -ne 0 ]; then
  echo "fuzz $target: libFuzzer exited with $rc; its report:" >&2
  tail -n 80 "$log" >&2
  echo "failing input(s), to reproduce: $bin <file>" >&2
  ls -l "$artifacts" >&2
  exit 1
fi
# The committed seeds once more on their own: a seed that fails is a failure too.
"$bin" -runs=0 "$work" >/dev/null 2>&1
