#!/usr/bin/env python3
"""CI check of bench/ratio_table.py (no GPU) on the hand-made fixture bench/ratio_fixture/: DSREF
lines and tool documents pair up by shape, ratio and arm (the tool's unregistered is
DeepSpeed's pinned-unregistered), a tool document's ratio is found wherever it is recorded, the
step's change runs from ratio to ratio, a repeated DSREF line counts once, a failed arm is left
out, and a .tar.gz of the folder gives the same table. Exit 0 when every check passes; prints
'N passed, N failed'."""
import contextlib
import io
import math
import os
import sys
import tarfile
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from checklist import Checks  # noqa: E402
import ratio_table as rt  # noqa: E402

FIXTURE = os.path.join(here, "ratio_fixture")
SYN = "synthetic-h4096-l8 b4 s512"
LLAMA = "Llama-3.2-3B b4 s512"


def table_of(*paths):
    dsref, docs, commands = rt.collect(list(paths))
    return rt.rows(rt.ds_points(dsref), rt.tool_points(docs, commands))


def main():
    check = Checks()
    def close(a, b):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)

    rows = table_of(FIXTURE)
    by = {(r["shape"], r["ratio"], r["arm"]): r for r in rows}
    check(len(rows) == 8, f"8 rows (2 Llama, 6 synthetic), got {len(rows)}")
    check(all(r["ds_runs"] == 1 for r in rows), "the DSREF line repeated in dsref.jsonl counts once")
    r = by.get((SYN, 1.0, "registered"), {})
    check(close(r.get("ds_step_s"), 0.8) and close(r.get("tool_step_s"), 0.88) and close(r.get("tool_over_ds"), 1.1),
          "synthetic 1.0 registered: DS 0.800 s (a line without offload_ratio is 1.0), tool 0.880 s "
          "(ratio from the .txt's command line; step_stats.median, not step_avg_s), 1.10")
    r = by.get((SYN, 0.5, "pinned-unregistered"), {})
    check(close(r.get("tool_step_s"), 1.1) and close(r.get("ds_step_s"), 1.0) and r.get("tool_runs") == 1,
          "synthetic 0.5: the tool's unregistered arm pairs with DeepSpeed's pinned-unregistered "
          "(ratio from workload.offload_ratio)")
    r = by.get((SYN, 0.25, "registered"), {})
    check(close(r.get("tool_step_s"), 0.462) and close(r.get("ds_step_change"), 0.1)
          and close(r.get("tool_step_change"), 0.1) and r.get("vs_ratio") == 0.5,
          "synthetic 0.25 registered: ratio from the sweep entry; both steps +10 % against ratio 0.5")
    r = by.get((SYN, 0.25, "pinned-unregistered"), {})
    check(r.get("tool_step_s") is None and r.get("tool_runs") == 0 and close(r.get("ds_step_s"), 0.9),
          "synthetic 0.25: the tool's failed unregistered arm is left out, DeepSpeed's row stays")
    r = by.get((SYN, 0.5, "registered"), {})
    check(close(r.get("ds_step_change"), -0.5) and close(r.get("tool_step_change"), 0.42 / 0.88 - 1)
          and r.get("vs_ratio") == 1.0, "synthetic 0.5 registered: the change is against ratio 1.0")
    check(r.get("ds_on_device") == 1 and r.get("ds_sub_groups") == 2 and r.get("ds_numel_on_device") == 1003610112
          and close(r.get("ds_peak_gb"), 24.0) and close(r.get("ds_peak_with_init_gb"), 26.0)
          and close(r.get("tool_peak_gb"), 23.0) and r.get("ds_locked_bytes") == 3324395520
          and r.get("tool_locked_bytes") == 2662000000, "synthetic 0.5 registered: sub-groups, peaks, locked bytes")
    l1, l5 = by.get((LLAMA, 1.0, "registered"), {}), by.get((LLAMA, 0.5, "registered"), {})
    check(close(l1.get("tool_step_s"), 2.1) and close(l5.get("tool_step_s"), 1.68)
          and close(l5.get("ds_step_s"), 1.5) and close(l5.get("tool_step_change"), 1.68 / 2.1 - 1),
          "Llama: a comma-list sweep's entries take the command's ratios in order; the config path "
          "and the built-in name are one shape")
    check([(r["shape"], r["ratio"]) for r in rows if r["arm"] == "registered"] ==
          [(LLAMA, 1.0), (LLAMA, 0.5), (SYN, 1.0), (SYN, 0.5), (SYN, 0.25)],
          "rows by shape, arm, then ratio from 1.0 down")

    md = rt.markdown(rows)
    lines = md.splitlines()
    check(len(lines) == 10 and all(l.count("|") == 14 for l in lines),
          "markdown: header, rule and 8 rows of 13 columns")
    check("| synthetic-h4096-l8 b4 s512 | 0.25 | registered | 1 of 2 (1.00 B el.) | 0.440 | 0.462 | 1.05 |" in md
          and "+10.0 % (vs 0.5)" in md and "| 7.60 / — |" in md, "markdown: the cells as formatted")

    with tempfile.TemporaryDirectory() as d:
        tgz = os.path.join(d, "r.tar.gz")
        with tarfile.open(tgz, "w:gz") as t:
            t.add(FIXTURE, arcname="r")
        check(rt.markdown(table_of(tgz)) == md, "a .tar.gz of the folder gives the same table")
        empty = os.path.join(d, "empty")
        os.mkdir(empty)
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            rc_empty = rt.main([empty])
            rc_full = rt.main([FIXTURE, "--json", os.path.join(d, "rows.json")])
        check(rc_empty == 2 and rc_full == 0 and os.path.getsize(os.path.join(d, "rows.json")) > 0,
              "exit 2 on a folder without results, 0 with a table (and --json written)")
    check(rt.command_ratios("$ zero3-offload-bench --offload-ratio 1.0,0.5,0.25 --json x") == [1.0, 0.5, 0.25]
          and rt.command_ratios("$ x --offload-ratio=0.5") == [0.5] and rt.command_ratios("$ x") is None,
          "--offload-ratio read from a command line (a value, a comma list, none)")
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
