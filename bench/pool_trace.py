#!/usr/bin/env python3
"""Reads a caching pool trace (ZOB_POOL_TRACE=FILE, src/step/caching_pool.cpp) and says where
the reserved bytes went, per pool (each arm's process appends its own): allocated and reserved peaks, each queue's reserved bytes at the
reserved peak and how much of them was free (cached but not live), and the pool at the trace's
last line (where an out-of-memory run stopped).

  python3 bench/pool_trace.py pool-NAME.txt[.xz]
"""
import lzma
import sys
from collections import defaultdict

GB = 1e9


def pools(path):
    """Each pool's events (every arm's process appends its own after a '# pool' header)."""
    opener = lzma.open if path.endswith(".xz") else open
    out, cur = [], []
    with opener(path, "rt") as f:
        for line in f:
            if line.startswith("# pool"):
                if cur:
                    out.append(cur)
                cur = []
                continue
            parts = line.split()
            if len(parts) != 6:
                continue
            # a trace without headers (before they were written): a first segment taken with
            # nothing allocated or reserved before it starts a new pool
            if cur and parts[0] == "s" and parts[2] == parts[5] and parts[4] == "0":
                out.append(cur)
                cur = []
            cur.append((parts[0], parts[1], int(parts[2]), parts[3], int(parts[4]), int(parts[5])))
    if cur:
        out.append(cur)
    return out


def summarise(path):
    for i, events in enumerate(pools(path)):
        summarise_pool(f"{path} (pool {i + 1})", events)


def replay(events):
    """allocated and reserved peaks; per queue (reserved, live) at the reserved peak and at
    the last event."""
    reserved_q = defaultdict(int)  # per queue: segments' bytes
    live_q = defaultdict(int)      # per queue: live blocks' bytes (pending counted as live)
    queue_of = {}                  # a live block's queue, by address
    peak_alloc = peak_res = 0
    at_res_peak = None
    n = 0
    last = None
    for op, ptr, size, queue, alloc, res in events:
        n += 1
        if op == "s":
            reserved_q[queue] += size
        elif op == "r":
            reserved_q[queue] -= size
        elif op == "a":
            live_q[queue] += size
            queue_of[ptr] = queue
        elif op in ("f", "c"):
            live_q[queue_of.get(ptr, queue)] -= size
        peak_alloc = max(peak_alloc, alloc)
        if res > peak_res:
            peak_res = res
            at_res_peak = (dict(reserved_q), dict(live_q), alloc)
        last = (op, size, queue, alloc, res, dict(reserved_q), dict(live_q))
    return {"events": n, "allocated_peak": peak_alloc, "reserved_peak": peak_res,
            "at_reserved_peak": at_res_peak, "last": last}


def summarise_pool(path, events):
    r = replay(events)
    n, peak_alloc, peak_res = r["events"], r["allocated_peak"], r["reserved_peak"]
    at_res_peak, last = r["at_reserved_peak"], r["last"]
    print(f"{path}: {n} events; allocated peak {peak_alloc / GB:.3f} GB, "
          f"reserved peak {peak_res / GB:.3f} GB ({peak_res / max(peak_alloc, 1):.2f}x)")

    def queues(res_q, live_q):
        return "; ".join(
            f"{q}: {res_q[q] / GB:.3f} reserved, {(res_q[q] - live_q.get(q, 0)) / GB:.3f} not live"
            for q in sorted(res_q) if res_q[q])

    if at_res_peak:
        res_q, lq, alloc = at_res_peak
        print(f"  at the reserved peak ({alloc / GB:.3f} GB allocated): {queues(res_q, lq)}")
    if last:
        op, size, queue, alloc, res, res_q, lq = last
        print(f"  last event: {op} {size} B on {queue}; {alloc / GB:.3f} GB allocated, "
              f"{res / GB:.3f} reserved: {queues(res_q, lq)}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        summarise(p)
