#!/usr/bin/env python3
"""The table of a bench/deepspeed/models-side-by-side folder, against issue 23's targets.

    python3 bench/deepspeed/models_table.py OUTDIR

Per case (NAME.ref.1.txt beside NAME.tool.1.json and NAME.tool.2.json): each arm's median step
(DeepSpeed: harness.py's DSREF step_median_s; the tool: its step_stats.median), each tool round's
ratio to DeepSpeed, both speedups (unregistered / registered) and the seconds registration saves
per step. Targets: each arm within +-20 %, the speedup within +-10 %, the seconds saved within
+-15 %. Exit code 0 whether or not they are met; 2 when no case has both sides.
"""
import glob
import json
import os
import re
import sys

ARMS = (("registered", "registered"), ("unregistered", "pinned-unregistered"))


def ref_medians(path):
    arms = {}
    with open(path) as f:
        for line in f:
            if line.startswith("DSREF="):
                d = json.loads(line[len("DSREF="):])
                arms[d["arm"]] = d["step_median_s"]
    return arms


def tool_medians(path):
    with open(path) as f:
        d = json.load(f)
    return {arm: d[arm]["step_stats"]["median"] for arm, _ in ARMS
            if arm in d and d[arm].get("ok", True)}


def within(x, target):
    return "yes" if abs(x - 1) <= target else "no"


def case_rows(name, ref, tools):
    rows = []
    label = " / ".join(f"round {i}" for i, _ in tools)
    for tool_arm, ref_arm in ARMS:
        values = [t.get(tool_arm) for _, t in tools]
        if ref_arm not in ref or None in values:
            continue
        ratios = [v / ref[ref_arm] for v in values]
        rows.append(f"| {name} | {ref_arm} | {ref[ref_arm]:.3f} | "
                    + " / ".join(f"{v:.3f}" for v in values) + " | "
                    + " / ".join(f"{r:.2f}" for r in ratios) + " | "
                    + " / ".join(within(r, 0.20) for r in ratios) + " (±20 %) |")
    if len(rows) < 2:
        return rows
    rs = ref["pinned-unregistered"] / ref["registered"]
    saved_ref = ref["pinned-unregistered"] - ref["registered"]
    speedups = [t["unregistered"] / t["registered"] for _, t in tools]
    saved = [t["unregistered"] - t["registered"] for _, t in tools]
    rows.append(f"| {name} | **speedup** | **{rs:.2f}x** | "
                + " / ".join(f"**{s:.2f}x**" for s in speedups) + " | "
                + " / ".join(f"{s / rs:.2f}" for s in speedups) + " | "
                + " / ".join(within(s / rs, 0.10) for s in speedups) + " (±10 %) |")
    rows.append(f"| {name} | seconds saved per step | {saved_ref:.3f} | "
                + " / ".join(f"{s:.3f}" for s in saved) + " | "
                + " / ".join(f"{s / saved_ref:.2f}" for s in saved) + " | "
                + " / ".join(within(s / saved_ref, 0.15) for s in saved) + " (±15 %) |")
    return rows


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    folder = sys.argv[1]
    rows = ["| case | arm | DeepSpeed median (s) | tool median (s), rounds before / after | "
            "tool ÷ DeepSpeed | within target |", "|---|---|---|---|---|---|"]
    found = False
    for path in sorted(glob.glob(os.path.join(folder, "*.ref.1.txt"))):
        name = re.match(r"(.+)\.ref\.1\.txt$", os.path.basename(path)).group(1)
        tools = [(r, tool_medians(p)) for r in (1, 2)
                 for p in [os.path.join(folder, f"{name}.tool.{r}.json")] if os.path.exists(p)]
        ref = ref_medians(path)
        if not tools or not ref:
            continue
        found = True
        rows += case_rows(name, ref, tools)
    if not found:
        print(f"models_table: no case in {folder} has both a tool and a DeepSpeed run", file=sys.stderr)
        return 2
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
