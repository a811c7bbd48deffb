#!/usr/bin/env bash
# scripts/check-layers can fail: on a copy of the tree, each mutation below must be refused
# with its reason, and the unchanged copy must pass. Usage: check_layers_fails.sh REPO_ROOT
set -euo pipefail
root=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
copy() {
  rm -rf "$work/tree"
  mkdir -p "$work/tree"
  cp -r "$root/src" "$root/include" "$root/docs" "$work/tree/"
}
expect_fail() {  # FILE LINE EXPECTED-TEXT
  copy
  echo "$2" >>"$work/tree/$1"
  if out=$(python3 "$root/scripts/check-layers" "$work/tree" 2>&1); then
    echo "FAIL: check-layers passed with '$2' added to $1"; exit 1
  fi
  if ! grep -qF "$3" <<<"$out"; then
    echo "FAIL: '$2' in $1 refused, but without '$3':"; echo "$out"; exit 1
  fi
  echo "ok: $1 + $2 -> $3"
}
copy
python3 "$root/scripts/check-layers" "$work/tree" >/dev/null
# A circle of two units (a.cpp takes b.hpp, b.cpp takes a.hpp), as reporter/table once were.
expect_fail src/report/table.cpp '#include "report/publish.hpp"' "include circle"
# A longer circle inside one step subfolder, where the order allows any include.
expect_fail src/step/decoder/eager_decoder.hpp '#include "step/decoder/module_math.hpp"' \
  "include circle"
# Siblings of one level: DeepSpeed's schedule may not take the what-if runner.
expect_fail src/step/deepspeed/deepspeed_step.cpp '#include "step/whatif/arm_runner.hpp"' \
  "may not include whatif/"
# A shared file below the subfolders may not reach up into one.
expect_fail src/step/arm_result_fill.cpp '#include "step/decoder/decoder_math.hpp"' \
  "may not include decoder/"
# No file may include an unnamed top file's header (the entry points).
copy
echo '#pragma once' >"$work/tree/src/step/entry.hpp"
echo '#include "step/entry.hpp"' >>"$work/tree/src/step/copy_back.cpp"
if python3 "$root/scripts/check-layers" "$work/tree" >/dev/null 2>&1; then
  echo "FAIL: an include of an unnamed top file passed"; exit 1
fi
echo "ok: an unnamed top file is included by no file"
# Between folders: the step may not include the driver.
expect_fail src/step/plan.cpp '#include "driver/driver.hpp"' "may not include src/driver"
echo "check_layers_fails: every mutation refused"
