#!/usr/bin/env bash
# Builds a libFuzzer target with clang-15 (+ASan/UBSan) and runs it for a bounded time on the
# committed corpus (copied, so CI never rewrites the repo). Usage:
#   tests/fuzz/run.sh <target> <build-dir> <seconds> <source files...>
set -euo pipefail
target=$1 build=$2 seconds=$3
shift 3
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$build/fuzz"
bin="$build/fuzz/$target"
clang++-15 -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -DFMT_HEADER_ONLY -I"$root/include" -I"$root/src" "$@" -o "$bin"
work="$build/fuzz/$target.corpus"
rm -rf "$work" && mkdir -p "$work"
cp "$root/tests/fuzz/corpus/$target/"* "$work/"
"$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "$work" 2>&1 |
  grep -E 'stat::number_of_executed_units|ERROR|SUMMARY|Done' || true
# libFuzzer exits non-zero on a crash; re-run the corpus once to turn any finding into a failure.
"$bin" -runs=0 "$work" >/dev/null 2>&1
