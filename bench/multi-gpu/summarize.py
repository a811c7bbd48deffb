#!/usr/bin/env python3
"""One line per run of bench/multi-gpu/run.sh, from its --json documents:
   summarize.py OUT/multi-gpu
Per arm the mean step, the bound and step/bound (the N-rank bound for --gpus N), then the
speedup; with several ranks, per phase the slowest rank's device ms (host ms where the phase
has no device time). Last, whether the schedules of one size, loop and rank count agree on
the losses and the checksum, as they must bit for bit (a missing order between a collective
and its queue would show here first)."""
import json
import pathlib
import sys


def ms(v):
    return "-" if v is None else f"{v * 1e3:.1f}"


def main(folder):
    groups = {}
    for path in sorted(pathlib.Path(folder).glob("*.json")):
        doc = json.loads(path.read_text())
        size, loop, _schedule, gpus = path.stem.split("-")
        reg = doc.get("registered") or {}
        if reg.get("ok"):
            groups.setdefault((size, loop, gpus), []).append(
                (path.stem, reg.get("param_checksum"), reg.get("losses")))
        w = doc.get("workload", {})
        parts = [f"{path.stem:<40}", f"gpus {w.get('gpus', 1)}"]
        for arm in ("registered", "unregistered"):
            a = doc.get(arm)
            if not a or not a.get("ok"):
                parts.append(f"{arm} failed")
                continue
            b = a.get("bound") or {}
            parts.append(f"{arm} {a['step_avg_s']:.4f} s (bound {b.get('bound_s') or 0:.4f},"
                         f" ratio {b.get('ratio') or 0:.2f})")
        if doc.get("speedup"):
            parts.append(f"speedup {doc['speedup']:.2f}x")
        print("  ".join(parts))
        reg = doc.get("registered") or {}
        ranks = reg.get("ranks") or []
        if len(ranks) > 1:
            cells = []
            for phase in ranks[0].get("phases", {}):
                def t(k):
                    p = k["phases"].get(phase, {})
                    d = p.get("device_s")
                    return d if d is not None and d >= 0 else p.get("host_s", 0)
                worst = max(ranks, key=t)
                cells.append(f"{phase} {ms(t(worst))} (rank {worst['rank']})")
            print("    registered, slowest rank per phase, ms: " + ", ".join(cells))
    for key, runs in sorted(groups.items()):
        same = all(r[1] == runs[0][1] and r[2] == runs[0][2] for r in runs)
        names = ", ".join(r[0] for r in runs)
        print(f"schedules agree ({'-'.join(key)}): {'yes' if same else 'NO'} ({names})")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
