#!/usr/bin/env bash
# scripts/check-readme-figures can fail: README.md passes, and each hand-made paragraph below
# (links into the recorded results/) is refused with its reason or passes as it should.
# Usage: check_readme_figures_fails.sh REPO_ROOT
set -euo pipefail
root=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
check() { python3 "$root/scripts/check-readme-figures" "$root" "$work/t.md" 2>&1; }
expect_fail() {  # NAME EXPECTED-TEXT (the paragraph on stdin)
  cat >"$work/t.md"
  if out=$(check); then
    echo "FAIL: $1 passed"; exit 1
  fi
  if ! grep -qF "$2" <<<"$out"; then
    echo "FAIL: $1 refused, but without '$2':"; echo "$out"; exit 1
  fi
  echo "ok: $1 -> $2"
}
expect_pass() {  # NAME (the paragraph on stdin)
  cat >"$work/t.md"
  if ! out=$(check); then
    echo "FAIL: $1 refused:"; echo "$out"; exit 1
  fi
  echo "ok: $1 passes"
}
python3 "$root/scripts/check-readme-figures" "$root" >/dev/null
links='([schedules](results/h200/2026-12-01-schedules/README.md), [one-GPU runs](results/h200/2026-12-01-one-plan-ranks/README.md))'
# README.md before issue 37's fix: one range over DeepSpeed's schedule and the overlap what-if.
expect_fail "a speedup range over two schedules" "mixes schedules (2.29 is deepspeed" <<MD
- **Registration makes a ZeRO-3 offload step 2.29-4.22x faster** on the H200 across the shapes
  and schedules measured $links.
MD
# The same runs, one range per schedule.
expect_pass "one speedup range per schedule" <<MD
- Registration makes DeepSpeed's step 2.29-3.35x faster (\`--schedule deepspeed\`), the what-if
  schedules' 2.48-2.98x (\`stock\`) and 2.85-4.22x (\`overlap\`) $links.
MD
# A range's ends must be written in the files (2.3 rounds 2.29 but is not written there).
expect_fail "a range end rounded" "the end 2.3 is not written" <<MD
- Registration makes DeepSpeed's step 2.3-3.35x faster $links.
MD
# A figure needs a results link in its paragraph.
expect_fail "a figure without a link" "has no results link" <<MD
- Registration makes DeepSpeed's step 2.29x faster.
MD
echo "check_readme_figures_fails: every case as expected"
