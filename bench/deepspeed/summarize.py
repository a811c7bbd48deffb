#!/usr/bin/env python3
"""The "How close to DeepSpeed" table from a bench/deepspeed/side-by-side folder.

    python3 bench/deepspeed/summarize.py OUTDIR [--markdown]

Per shape: each arm's average step (the median over rounds of each round's step_avg_s) for real
DeepSpeed 0.19.8 (harness.py's DSREF lines) and for the tool (its --json files), the tool's
ratio to DeepSpeed, and both speedups (pinned-unregistered / registered, as the upstream V1 arms
compare). Targets of issue 13: each arm within +-15 %, the speedup within +-10 %.
Exit code 0 whether or not the targets are met; 2 when the folder holds no complete pair.
"""
import glob
import json
import os
import re
import statistics
import sys

# tool arm -> DeepSpeed arm
ARMS = (("registered", "registered"), ("unregistered", "pinned-unregistered"), ("pageable", "pageable"))
ARM_TARGET = 0.15
SPEEDUP_TARGET = 0.10


def ref_round(path):
    arms = {}
    with open(path) as f:
        for line in f:
            if line.startswith("DSREF="):
                d = json.loads(line[len("DSREF="):])
                arms[d["arm"]] = d["step_avg_s"]
    return arms


def tool_round(path):
    with open(path) as f:
        d = json.load(f)
    return {arm: d[arm]["step_avg_s"] for arm, _ in ARMS if arm in d and d[arm].get("ok", True)}


def collect(folder):
    shapes = {}
    for path in sorted(glob.glob(os.path.join(folder, "*.ref.*.txt"))):
        m = re.match(r"(.+)\.ref\.(\d+)\.txt$", os.path.basename(path))
        shape, r = m.group(1), m.group(2)
        tool_path = os.path.join(folder, f"{shape}.tool.{r}.json")
        if not os.path.exists(tool_path):
            continue
        entry = shapes.setdefault(shape, {"ref": [], "tool": []})
        entry["ref"].append(ref_round(path))
        entry["tool"].append(tool_round(tool_path))
    return shapes


def median_of(rounds, arm):
    values = [r[arm] for r in rounds if arm in r]
    return statistics.median(values) if values else None


def table(shapes):
    rows = ["| shape | arm | DeepSpeed (s) | tool (s) | tool / DeepSpeed | within ±15 % |",
            "|---|---|---|---|---|---|"]
    for shape, entry in shapes.items():
        n = len(entry["ref"])
        for tool_arm, ref_arm in ARMS:
            ref, tool = median_of(entry["ref"], ref_arm), median_of(entry["tool"], tool_arm)
            if ref is None or tool is None:
                continue
            ratio = tool / ref
            ok = "yes" if abs(ratio - 1) <= ARM_TARGET else "no"
            rows.append(f"| {shape} ({n} rounds) | {ref_arm} | {ref:.3f} | {tool:.3f} | {ratio:.2f} | {ok} |")
        r_reg, r_unreg = median_of(entry["ref"], "registered"), median_of(entry["ref"], "pinned-unregistered")
        t_reg, t_unreg = median_of(entry["tool"], "registered"), median_of(entry["tool"], "unregistered")
        if None not in (r_reg, r_unreg, t_reg, t_unreg):
            rs, ts = r_unreg / r_reg, t_unreg / t_reg
            ok = "yes" if abs(ts / rs - 1) <= SPEEDUP_TARGET else "no"
            rows.append(f"| {shape} | speedup (unregistered ÷ registered) | {rs:.2f}x | {ts:.2f}x | "
                        f"{ts / rs:.2f} | {ok} (±10 %) |")
    return "\n".join(rows)


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    shapes = collect(sys.argv[1])
    if not shapes:
        print(f"summarize: no shape in {sys.argv[1]} has both a tool and a DeepSpeed round", file=sys.stderr)
        return 2
    print(table(shapes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
