#!/usr/bin/env python3
"""Step times of the tool and of an earlier build run interleaved (NAME-i.json and
old-NAME-i.json, as bench/h200-memory3.sh MODE=steps writes them): per case and arm, each run's
median step, the ratio of each interleaved pair and the median of those ratios (pairs cancel
most of the GPU machine's host-bandwidth drift, which moves a single run by ~20 %).

Usage: bench/step_pairs.py FOLDER > FOLDER/../step-times.md
"""
import glob
import json
import os
import statistics
import sys


def main(folder):
    rows = {}
    for f in sorted(glob.glob(os.path.join(folder, "*.json"))):
        name = os.path.basename(f)[:-5]
        old = name.startswith("old-")
        case, _ = (name[4:] if old else name).rsplit("-", 1)
        d = json.load(open(f))
        for arm in ("registered", "unregistered"):
            runs = rows.setdefault((case, arm), {}).setdefault("old" if old else "new", [])
            runs.append(d[arm]["step_stats"]["median"])
    print("| case | arm | tool (median step, s, 3 runs) | before (3 runs) | new / before, per pair "
          "| median of the pairs |")
    print("|---|---|---|---|---|---|")
    for (case, arm), v in sorted(rows.items()):
        new, old = v["new"], v["old"]
        ratios = [a / b for a, b in zip(new, old)]
        print(f"| {case} | {arm} | {' / '.join('%.3f' % x for x in new)} | "
              f"{' / '.join('%.3f' % x for x in old)} | {' / '.join('%.3f' % r for r in ratios)} | "
              f"{(statistics.median(ratios) - 1) * 100:+.1f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
