#!/usr/bin/env python3
"""The physical bound of recorded runs, one row per file and arm (issue 25).

    python3 bench/bound_table.py FILE.json... [--arm registered] [--by-config]

Reads each --json document as written (its bound's definition is the one of the commit that
made it: see the folder's README) and prints a Markdown table: schedule, loop, shape, the
arm's median step, the physical bound and its parts (the host rate's source and the serial
part where the file has them), and step / bound. --by-config prints one row per schedule,
loop, shape and piece size instead: the runs, the median of their median steps and of their
step / physical, and its range.
"""
import argparse
import json
import os
import statistics
import sys


def row(path, arm):
    doc = json.load(open(path))
    a = doc.get(arm)
    if not a or not a.get("ok"):
        return None
    w, b = doc["workload"], a["bound"]
    host_rate = b.get("host_gb_per_s") or b["probe_gb_per_s"]
    return [os.path.basename(path), w["schedule"], w["loop"],
            f"h{w['hidden']} l{w['layers']} b{w['batch']} s{w['seq']}",
            f"{a['step_stats']['median']:.4f}", f"{b['host_memory_s']:.4f}",
            f"{b['probe_gb_per_s']:.1f}", f"{host_rate:.1f}", b.get("host_rate_from") or "-",
            f"{b['serial_s']:.4f}" if "serial_s" in b else "-", f"{b['pcie_s']:.4f}",
            f"{b['compute_s']:.4f}", f"{b['physical_s']:.4f}", f"{b['physical_ratio']:.2f}"]


def config_rows(files, arm):
    groups = {}
    for path in files:
        doc = json.load(open(path))
        a = doc.get(arm)
        if not a or not a.get("ok"):
            continue
        w = doc["workload"]
        key = (w["schedule"], w["loop"], f"h{w['hidden']} l{w['layers']} b{w['batch']} s{w['seq']}",
               str(w["chunk_elems"]))
        groups.setdefault(key, []).append((a["step_stats"]["median"], a["bound"]["physical_ratio"]))
    head = ["schedule", "loop", "shape", "chunk_elems", "runs", "median step s",
            "step / physical: median", "min", "max"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for key in sorted(groups):
        runs = groups[key]
        ratios = [r for _, r in runs]
        print("| " + " | ".join(list(key) + [
            str(len(runs)), f"{statistics.median(s for s, _ in runs):.4f}",
            f"{statistics.median(ratios):.2f}", f"{min(ratios):.2f}", f"{max(ratios):.2f}"]) + " |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--arm", default="registered")
    ap.add_argument("--by-config", action="store_true")
    args = ap.parse_args()
    if args.by_config:
        config_rows(args.files, args.arm)
        return 0
    head = ["file", "schedule", "loop", "shape", "median step s", "host memory s",
            "probe GB/s", "host GB/s", "rate from", "serial s", "busiest link s", "compute s", "physical s",
            "step / physical"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for f in args.files:
        r = row(f, args.arm)
        if r:
            print("| " + " | ".join(r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
