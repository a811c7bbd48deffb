#!/usr/bin/env bash
# Each memory table script of issue 36 (bench/memory*_table.py) and issue 38's ratio table
# (bench/ratio_table.py), which read DeepSpeed's DSREF lines through bench/dsref.py, makes again,
# from its recorded call, the table.md recorded beside it: a change to the parsing that moves a
# figure fails here. Usage: memory_tables_reproduce.sh ROOT
set -euo pipefail
root=$1
cd "$root"
fail=0
check() {  # TABLE SCRIPT ARGS...
  local table=$1
  shift
  if diff -u "$table" <(python3 "$@"); then echo "ok   $table"; else echo "FAIL $table"; fail=1; fi
}
check results/h200/2026-12-04-deepspeed-memory/memory-table.md bench/memory_table.py \
  results/h200/2026-12-04-deepspeed-memory
check results/h100/2026-12-07-memory-copy-back/table.md bench/memory4_table.py \
  results/h100/2026-12-07-memory-copy-back/call1
check results/h100/2026-12-07-per-tensor-blocks/table.md bench/memory6_table.py \
  results/h100/2026-12-07-per-tensor-blocks
check results/h100/2026-12-07-copy-back-side-by-side/table.md bench/memory9_table.py \
  results/h100/2026-12-07-copy-back-side-by-side/call1
for call in results/h100/2026-12-06-offload-ratio/call3-after-fix \
            results/h100/2026-12-07-llama-ratio/call-r1.0 results/h100/2026-12-07-llama-ratio/call-r0.5 \
            results/h100/2026-12-07-llama-ratio/call-r0.25; do
  check "$call/table.md" bench/ratio_table.py "$call"
done
llama=results/h100/2026-12-07-llama-ratio
check $llama/table-unregistered.md bench/ratio_table.py $llama/call-r1.0-unregistered \
  $llama/call-r0.5-unregistered
exit $fail
