#!/usr/bin/env python3
"""Per run: the physical bound's verdict (issue 37: the probe's rate alone; a timed step below
the bound makes it "not known"), step / bound at the median step and at the fastest step, the
probe's rate and the fastest Adam pass's.

Usage: bench/bound_verdicts.py FILE.json...   (DRIVERRESULT documents, --json)
"""
import json
import os
import sys


def main(files):
    print("| run | arm | verdict | median step / physical | fastest step / physical | probe GB/s "
          "| fastest Adam pass GB/s |")
    print("|---|---|---|---|---|---|---|")
    for f in files:
        doc = json.load(open(f))
        for arm in ("registered", "unregistered", "pageable", "hostalloc"):
            a = doc.get(arm)
            if not isinstance(a, dict) or not a.get("bound"):
                continue
            b = a["bound"]
            print(f"| {os.path.basename(f)[:-5]} | {arm} | {b['physical_verdict']} | "
                  f"{b['physical_ratio']:.3f} | {b['fastest_step_s'] / b['physical_s']:.3f} | "
                  f"{b['probe_gb_per_s']:.1f} | {b['adam_pass_gb_per_s']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
