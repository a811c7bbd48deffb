#!/usr/bin/env python3
"""The blocks live at the device peak, as the run's caching pool held them and as the plan's walk
counts them: which sizes one side has and the other has not.

    ZOB_POOL_TRACE=run.trace zero3-offload-bench ... --schedule deepspeed   (the run)
    ZOB_PLAN_TRACE=plan.trace zero3-offload-bench ... --dry-run             (the plan's walks)
    python3 bench/pool_trace_compare.py run.trace plan.trace [--pool N] [--walk N]

run.trace: "op ptr size queue allocated reserved" lines (op a: allocate, f / p: free, c, s, r:
not blocks), a "# pool of process P" header per pool (--pool: which, default 0, the first).
plan.trace: "op size allocated part" lines, a "# walk of process P" header per walk (--walk,
default 0: the dry run's first walk is the configuration asked for).
The run's peak holds the fixed buffers too (parameters, bucket, decoder buffers), which the walk
leaves to the plan's other parts; they show as "run only". Needs no GPU.
"""
import argparse
import collections
import sys


def sections(path, header):
    out, cur = [], None
    with open(path) as f:
        for line in f:
            if line.startswith(header):
                cur = []
                out.append(cur)
            elif not line.startswith("#") and line.strip():
                if cur is None:  # lines before any header: one section
                    cur = []
                    out.append(cur)
                cur.append(line.split())
    return out


def run_peak(lines):
    """(peak allocated bytes, Counter of live block sizes at the first moment of that peak)."""
    live, best, at = {}, -1, collections.Counter()
    for f in lines:
        op, ptr, size, allocated = f[0], f[1], int(f[2]), int(f[4])
        if op == "a":
            live[ptr] = size
            if allocated > best:
                best, at = allocated, collections.Counter(live.values())
        elif op in ("f", "p"):
            live.pop(ptr, None)
    return best, at


def plan_peak(lines):
    """(peak bytes of the walk, Counter of (size, part) live at its first moment)."""
    live, best, at = collections.Counter(), -1, collections.Counter()
    for f in lines:
        op, size, now, part = f[0], int(f[1]), int(f[2]), " ".join(f[3:])
        live[(size, part)] += 1 if op == "a" else -1
        if live[(size, part)] == 0:
            del live[(size, part)]
        if op == "a" and now > best:
            best, at = now, collections.Counter(live)
    return best, at


def compare(run_lines, plan_lines):
    run_best, run_live = run_peak(run_lines)
    plan_best, plan_live = plan_peak(plan_lines)
    plan_sizes = collections.Counter()
    parts_of = collections.defaultdict(collections.Counter)
    for (size, part), n in plan_live.items():
        plan_sizes[size] += n
        parts_of[size][part] += n
    diff = collections.Counter(run_live)
    diff.subtract(plan_sizes)
    run_only = sorted(((s, n) for s, n in diff.items() if n > 0), key=lambda x: -x[0] * x[1])
    plan_only = sorted(((s, -n) for s, n in diff.items() if n < 0), key=lambda x: -x[0] * x[1])
    return {"run_peak": run_best, "walk_peak": plan_best, "run_only": run_only,
            "plan_only": [(s, n, [f"{p} x{k}" for p, k in sorted(parts_of[s].items())])
                          for s, n in plan_only]}


def text(c):
    out = [f"run: peak allocated {c['run_peak']} B; plan's walk: peak {c['walk_peak']} B",
           "live at the peak in the run only (fixed buffers among them):",
           "| block size (B) | count | bytes |", "|---|---|---|"]
    out += [f"| {s} | {n} | {s * n} |" for s, n in c["run_only"]]
    out += [f"| total | | {sum(s * n for s, n in c['run_only'])} |", "",
            "live at the peak in the plan's walk only:",
            "| block size (B) | count | bytes | the walk's parts of that size, live at its peak |", "|---|---|---|---|"]
    out += [f"| {s} | {n} | {s * n} | {', '.join(p)} |" for s, n, p in c["plan_only"]]
    out += [f"| total | | {sum(s * n for s, n, _ in c['plan_only'])} | |"]
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_trace")
    ap.add_argument("plan_trace")
    ap.add_argument("--pool", type=int, default=0)
    ap.add_argument("--walk", type=int, default=0)
    a = ap.parse_args(argv)
    pools = sections(a.run_trace, "# pool")
    walks = sections(a.plan_trace, "# walk")
    if a.pool >= len(pools) or a.walk >= len(walks):
        print(f"pool_trace_compare: {len(pools)} pool(s) in {a.run_trace}, {len(walks)} walk(s) in "
              f"{a.plan_trace}; --pool {a.pool} / --walk {a.walk} is not there", file=sys.stderr)
        return 2
    sys.stdout.write(text(compare(pools[a.pool], walks[a.walk])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
