#!/usr/bin/env python3
"""The table of results/h100/2026-12-07-per-tensor-blocks (issue 36): DeepSpeed 0.19.8's step
peak beside the tool's plan (its dry run) and measured peak, what each holds at its peak, the
shared-GPU runs, and the step times against the tool at 5bea820. Reads only the folder's files
(and DeepSpeed's recorded runs named below); writes markdown to stdout:
    python3 bench/memory6_table.py results/h100/2026-12-07-per-tensor-blocks > .../table.md
"""
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dsref import by_arm  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DS_RUNS = {  # DeepSpeed's registered arm, sdpa, b4 (results/h200/2026-12-02-deepspeed-account)
    "qwen05": "results/h200/2026-12-02-deepspeed-account/call1/Qwen2.5-0.5B-b4-s128/dsref.jsonl",
    "qwen15": "results/h200/2026-12-02-deepspeed-account/call4/Qwen2.5-1.5B-b4-s512/dsref.jsonl",
    "llama3b": "results/h200/2026-12-02-deepspeed-account/call2/Llama-3.2-3B-b4-s512/dsref.jsonl",
}
NAMES = {"qwen05": "Qwen2.5-0.5B b4 s128", "qwen15": "Qwen2.5-1.5B b4 s512",
         "llama3b": "Llama-3.2-3B b4 s512", "mistral8": "Mistral-7B-v0.3, 8 layers, b4 s512"}


def dsref(path):
    d = by_arm(path).get("registered")
    if d is None:
        raise SystemExit(f"memory6_table: no registered DSREF in {path}")
    return d


def arm(path, name="registered"):
    return json.load(open(path))[name]


def main(folder):
    ds = {k: dsref(os.path.join(ROOT, p)) for k, p in DS_RUNS.items()}
    ds["mistral8"] = dsref(os.path.join(folder, "call1", "ds-mistral8.txt"))
    out = ["| case | DeepSpeed peak (GB) | tool plan (GB) | tool measured (GB) | vs DeepSpeed | "
           "reserved (GB) | before: per-module blocks, 5bea820 (GB) |", "|---|---|---|---|---|---|---|"]
    for k in ("qwen05", "qwen15", "llama3b", "mistral8"):
        plan = json.load(open(os.path.join(folder, "dry-run", f"{k}.json")))["plan"]["device_bytes"] / 1e9
        run = {"qwen05": "qwen05-1"}.get(k, k)  # the first of its two pairs
        new = arm(os.path.join(folder, "call3", f"{run}.json"))
        old = (f"{arm(os.path.join(folder, 'call3', f'old-{run}.json'))['gpu_peak_gb']:.2f}"
               if os.path.exists(os.path.join(folder, "call3", f"old-{run}.json")) else
               f"{arm(os.path.join(folder, 'call1', 'mistral8.json'))['gpu_peak_gb']:.2f} (at e858269)")
        d = ds[k]["gpu_peak_gb"]
        out.append(f"| {NAMES[k]} | {d:.2f} | {plan:.2f} | {new['gpu_peak_gb']:.2f} | "
                   f"{100 * (new['gpu_peak_gb'] / d - 1):+.1f} % | {new['gpu_reserved_peak_gb']:.2f} | {old} |")
    out += ["", "What each holds at its step's peak, Mistral-8 (GB): DeepSpeed from its memory snapshot "
            "(call1/ds-mistral8-peak.txt), the tool from its plan (dry-run/mistral8.json `device_parts`)", ""]
    peak = json.load(open(os.path.join(folder, "call1", "ds-mistral8-peak.json")))
    out.append(f"- DeepSpeed: {peak['peak_bytes'] / 1e9:.3f} GB replayed (torch's max_memory_allocated "
               f"{ds['mistral8']['gpu_peak_gb']:.3f}); " + "; ".join(
                   f"{g['where']} {g['bytes'] / 1e9:.3f}" for g in peak["groups"] if g["bytes"] >= 1e8))
    parts = json.load(open(os.path.join(folder, "dry-run", "mistral8.json")))["plan"]["device_parts"]
    out.append("- the tool: " + "; ".join(f"{p['name']} {p['bytes'] / 1e9:.3f}" for p in parts
                                          if p["bytes"] >= 1e7))
    out += ["", "Beside another process (call3, this tree; `hog-*.txt` says what it left):", "",
            "| case | left (B) | tool |", "|---|---|---|"]
    for name in ("shared-mistral8", "shared-qwen05", "shared-llama3b"):
        a = arm(os.path.join(folder, "call3", f"{name}.json"))
        hog = open(os.path.join(folder, "call3", f"hog-{name}.txt")).read().split()
        left = hog[hog.index("leaving") + 1]
        out.append(f"| {name[len('shared-'):]} | {left} | {'ran' if a['ok'] else a['error'][:120] + ' ...'} |")
    out += ["", "Step times, this tree / 5bea820 (s, mean of the timed steps; pairs run one after the "
            "other in one call):", "", "| call | case | registered | unregistered |", "|---|---|---|---|"]
    for call in ("call2", "call3"):
        for k in ("qwen05-1", "qwen05-2", "llama3b", "qwen15"):
            cells = []
            for a in ("registered", "unregistered"):
                n = arm(os.path.join(folder, call, f"{k}.json"), a)["step_avg_s"]
                o = arm(os.path.join(folder, call, f"old-{k}.json"), a)["step_avg_s"]
                cells.append(f"{n:.3f} / {o:.3f} ({n / o:.3f})")
            out.append(f"| {call} | {k} | {cells[0]} | {cells[1]} |")
    abba = {}
    for f in sorted(glob.glob(os.path.join(folder, "call4-abba", "*-qwen15.json"))):
        which = os.path.basename(f).split("-")[1]
        for a in ("registered", "unregistered"):
            abba.setdefault((which, a), []).append(arm(f, a)["step_avg_s"])
    cells = []
    for a in ("registered", "unregistered"):
        n, o = statistics.median(abba[("new", a)]), statistics.median(abba[("old", a)])
        cells.append(f"{n:.3f} / {o:.3f} ({n / o:.3f})")
    out.append(f"| call4-abba (medians of 3, new old old new new old) | qwen15 | {cells[0]} | {cells[1]} |")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
