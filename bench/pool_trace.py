#!/usr/bin/env python3
"""Reads a caching pool trace (ZOB_POOL_TRACE=FILE, src/step/caching_pool.cpp) and says where
the reserved bytes went: allocated and reserved peaks, each queue's reserved bytes at the
reserved peak and how much of them was free (cached but not live), and the pool at the trace's
last line (where an out-of-memory run stopped).

  python3 bench/pool_trace.py pool-NAME.txt[.xz]
"""
import lzma
import sys
from collections import defaultdict

GB = 1e9


def lines(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 6:
                yield parts[0], parts[1], int(parts[2]), parts[3], int(parts[4]), int(parts[5])


def summarise(path):
    reserved_q = defaultdict(int)  # per queue: segments' bytes
    live_q = defaultdict(int)      # per queue: live blocks' bytes (pending counted as live)
    queue_of = {}                  # a live block's queue, by address
    peak_alloc = peak_res = 0
    at_res_peak = None
    n = 0
    last = None
    for op, ptr, size, queue, alloc, res in lines(path):
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
