#!/usr/bin/env python3
"""How long a default run takes with R rounds of W warmup + T timed steps, and how much the
per-round speedup moves, from the recorded H200 default runs (issue 26: the accelerator default
of --repeats / --warmup / --steps, src/common/round_defaults.cpp and include/zob/config.hpp).

Per arm run, the time besides its steps is wall_s - (warmup + steps) * step_avg_s (process
start, allocation, locking, registration, the slower first step); the parent's own time is the
file's "wall clock" minus the arms' wall_s. A plan's time is then
parent + R * sum over arms of (other + (W + T) * step_avg_s).

usage: bench/default-rounds-estimate.py [REPO_ROOT]
"""
import json
import pathlib
import re
import statistics
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent)
RUNS = ["results/h200/2026-12-01-deepspeed-ranks/default-gpus1",
        "results/h200/2026-12-01-schedules/defaults-deepspeed",
        "results/h200/2026-12-01-one-plan-ranks/default",
        "results/h200/2026-12-01-one-plan-ranks/repeats"]
PLANS = [(1, 2, 4), (3, 2, 4), (3, 1, 2), (3, 1, 1), (4, 1, 1), (5, 1, 1)]



def load(run):
    """The run's --json document, or the DRIVERRESULT line of its NAME.txt."""
    path = root / f"{run}.json"
    if path.exists():
        return json.loads(path.read_text())
    for line in (root / f"{run}.txt").read_text().splitlines():
        if line.startswith("DRIVERRESULT="):
            return json.loads(line[len("DRIVERRESULT="):])
    raise SystemExit(f"{run}: no result")


print("recorded default runs (deepspeed schedule, copy-back loop, one H200):")
estimates = {p: [] for p in PLANS}
rows = []
for run in RUNS:
    doc = load(run)
    found = re.search(r"wall clock: ([\d.]+) s", (root / f"{run}.txt").read_text())
    rounds = doc.get("repeats", 1)
    arms = [doc[a] for a in ("registered", "unregistered")]
    # wall_s of a --repeats run's arm is its first round's; step_avg_s covers every round.
    per_round = [(a["wall_s"] - (a["warmup"] + a["steps"]) * a["step_avg_s"], a["step_avg_s"])
                 for a in arms]
    parent = None
    if found and rounds == 1:
        parent = float(found.group(1)) - sum(a["wall_s"] for a in arms)
    rows.append((run, found.group(1) if found else "not recorded", rounds, per_round, parent))
known = [p for *_, p in rows if p is not None]
parent_guess = statistics.median(known)
for run, wall, rounds, per_round, parent in rows:
    shown = f"{parent:.2f} s" if parent is not None else f"not known, {parent_guess:.2f} s assumed"
    print(f"  {run}: wall clock {wall} ({rounds} round(s)); per arm besides its steps / step: "
          + ", ".join(f"{o:.2f} / {st:.3f} s" for o, st in per_round) + f"; parent {shown}")
    for (r, w, t) in PLANS:
        base = parent if parent is not None else parent_guess
        estimates[(r, w, t)].append(base + r * sum(o + (w + t) * st for o, st in per_round))
print("estimated wall clock of a default run, by plan (rounds x (warmup + timed)):")
for (r, w, t), e in estimates.items():
    print(f"  {r} x ({w} + {t}): {min(e):.1f}-{max(e):.1f} s")

print("per-round speedups of the recorded --repeats runs (median of each round's timed steps):")
for run in ["results/h200/2026-12-01-one-plan-ranks/repeats",
            "results/h200/2026-11-29-overlap/repeats_trace"]:
    doc = load(run)
    reg, unreg = doc["registered"], doc["unregistered"]
    n = reg["steps"]
    ratios, firsts = [], []
    for k in range(doc["repeats"]):
        r = reg["step_times_s"][k * n:(k + 1) * n]
        u = unreg["step_times_s"][k * n:(k + 1) * n]
        ratios.append(statistics.median(u) / statistics.median(r))
        firsts.append(u[0] / r[0])
    print(f"  {run}: rounds " + " ".join(f"{x:.2f}x" for x in ratios)
          + "; first timed step only " + " ".join(f"{x:.2f}x" for x in firsts))
