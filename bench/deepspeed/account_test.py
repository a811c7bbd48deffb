#!/usr/bin/env python3
"""CI check of bench/deepspeed/account.py's host account (no torch, no GPU): the exclusive rows
of every phase add up to the phase's wall time, on a small hand-made trace whose answer is known
and on a recorded DeepSpeed trace. Exit 0 when every check passes; prints 'N passed, N failed'."""
import gzip
import json
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
from checklist import Checks  # noqa: E402
import account  # noqa: E402

RECORDED = os.path.join(here, "..", "..", "results", "h200", "2026-12-02-deepspeed-account", "call2",
                        "Llama-3.2-3B-b4-s512", "trace-registered.json.gz")


def made_trace():
    ev = []

    def x(cat, name, ts, dur, tid=1):
        ev.append({"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid, "pid": 1})
    x("user_annotation", "forward", 0, 1000)
    x("user_annotation", "ds::fetch_sub_module", 10, 100)
    x("cuda_runtime", "cudaMemcpyAsync", 20, 50)
    x("cpu_op", "aten::linear", 200, 100)
    x("cuda_runtime", "cudaLaunchKernel", 220, 10)
    x("cuda_runtime", "cudaStreamSynchronize", 400, 500)
    x("user_annotation", "backward", 1000, 1000)
    x("cpu_op", "aten::mm", 1100, 200, tid=5)  # the autograd thread
    x("user_annotation", "optimizer_step", 2000, 3000)
    x("cpu_op", "aten::mul_", 2100, 2000)
    return {"traceEvents": ev}


def main():
    check = Checks()
    acc = account.host_account(made_trace())
    f = acc["forward"]["rows_ms"]
    check(abs(f["host wait (synchronize)"] - 0.5) < 1e-9, "a synchronize call is a host wait")
    check(abs(f["copy calls (host time)"] - 0.05) < 1e-9, "a copy call nested in a ds:: range counts as a copy call")
    check(abs(f["DeepSpeed Python (hooks, coordinator)"] - 0.05) < 1e-9, "a ds:: range's own time is DeepSpeed's")
    check(abs(f["aten operators (own time)"] - 0.09) < 1e-9, "an operator's own time excludes its launch")
    check(abs(acc["backward"]["rows_ms"]["aten operators (own time)"] - 0.2) < 1e-9,
          "in backward the autograd thread's operator wins")
    check(abs(acc["optimizer_step"]["rows_ms"]["CPU pass"] - 2.0) < 1e-9, "an operator of 1 ms or more is a CPU pass")
    with gzip.open(RECORDED, "rt") as fh:
        rec = account.host_account(json.load(fh))
    for p, d in rec.items():
        total = sum(d["rows_ms"].values())
        check(abs(total - d["wall_ms"]) <= 0.002 * d["wall_ms"] + 0.01,
              f"recorded trace, {p}: rows {total:.3f} ms add up to the wall {d['wall_ms']:.3f} ms")
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
