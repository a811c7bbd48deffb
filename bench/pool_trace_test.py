#!/usr/bin/env python3
"""CI check of bench/pool_trace.py on a hand-made two-pool trace whose answer is known: pools
split at the header, per-queue reserved and live bytes at the reserved peak (a block waiting
for a fence stays live until collected), the peaks. Exit 0 when every check passes."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checklist import Checks  # noqa: E402
import pool_trace as pt  # noqa: E402

TRACE = """# pool of process 1
s 0x10 2097152 compute 0 2097152
a 0x10 1024 compute 1024 2097152
s 0x20 20971520 h2d 1024 23068672
a 0x20 10485760 h2d 10486784 23068672
p 0x20 10485760 compute 1024 23068672
s 0x30 4194304 compute 1024 27262976
c 0x20 10485760 h2d 1024 27262976
f 0x10 1024 compute 0 27262976
# pool of process 2
s 0x40 2097152 d2h 0 2097152
"""


def main():
    check = Checks()
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(TRACE)
    pools = pt.pools(f.name)
    os.unlink(f.name)
    check(len(pools) == 2 and len(pools[0]) == 8 and len(pools[1]) == 1, f"pools {list(map(len, pools))}")
    r = pt.replay(pools[0])
    check(r["allocated_peak"] == 10486784, f"allocated peak {r['allocated_peak']}")
    check(r["reserved_peak"] == 27262976, f"reserved peak {r['reserved_peak']}")
    res_q, live_q, alloc = r["at_reserved_peak"]
    check(res_q == {"compute": 2097152 + 4194304, "h2d": 20971520}, f"reserved per queue {res_q}")
    # at the peak the h2d block waits for its fence: still live
    check(live_q == {"compute": 1024, "h2d": 10485760}, f"live per queue {live_q}")
    check(alloc == 1024, f"allocated at the peak {alloc}")
    check(r["last"][6] == {"compute": 0, "h2d": 0}, f"live at the end {r['last'][6]}")
    headerless = [e for e in pools[0]] + [("s", "0x50", 2097152, "d2h", 0, 2097152)]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("".join(" ".join(map(str, e)) + "\n" for e in headerless))
    check(len(pt.pools(f.name)) == 2, "a headerless trace is not split at a fresh pool's first segment")
    os.unlink(f.name)
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
