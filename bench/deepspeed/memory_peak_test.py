#!/usr/bin/env python3
"""CI check of bench/deepspeed/memory_peak.py (no torch, no GPU) on a hand-made snapshot whose
answer is known: the peak counts only events after the marker, frees at "free_requested",
rounds each request to 512 B, and groups live blocks by their innermost DeepSpeed frame.
Exit 0 when every check passes; prints 'N passed, N failed'."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
from checklist import Checks  # noqa: E402
import memory_peak as mp  # noqa: E402

DS = [{"filename": "/x/torch/nn/modules/module.py", "line": 1, "name": "_call_impl"},
      {"filename": "/v/site-packages/deepspeed/runtime/zero/stage3.py", "line": 77, "name": "reduce"}]
HF = [{"filename": "/v/site-packages/transformers/models/llama/modeling_llama.py", "line": 9,
       "name": "forward"}]


def ev(action, addr, size, frames=None):
    return {"action": action, "addr": addr, "size": size, "frames": frames or []}


def made():
    t = [ev("alloc", 1, 5000 * 512, HF),          # before the marker: a larger total there
         ev("alloc", 2, 100, DS),                  # rounds to 512
         ev("free_requested", 1, 5000 * 512),
         ev("alloc", 3, mp.MARKER_BYTES),
         ev("free_requested", 3, mp.MARKER_BYTES),
         ev("alloc", 4, 1000 * 512, DS),
         ev("alloc", 5, 700, HF),                  # rounds to 1024
         ev("free_completed", 5, 700),             # not a counter move
         ev("alloc", 6, 300 * 512),                # no Python frame
         ev("free_requested", 6, 300 * 512),
         ev("alloc", 7, 10 * 512, DS)]
    return {"device_traces": [t]}


def main():
    check = Checks()
    rep = mp.analyze(made())
    # after the marker: 512 + 1000*512 + 1024 + 300*512 (at event 6) = 654848; then 6 freed, 7 added
    peak = 512 + 1000 * 512 + 1024 + 300 * 512
    check(rep["peak_bytes"] == peak, f"peak {rep['peak_bytes']} != {peak}")
    groups = {g["where"]: g for g in rep["groups"]}
    ds = "zero/stage3.py:77 reduce"
    check(ds in groups and groups[ds]["bytes"] == 512 + 1000 * 512 and groups[ds]["count"] == 2,
          f"DeepSpeed group {groups.get(ds)}")
    check("<no python frame> 153600 B" in groups, f"frameless group missing: {list(groups)}")
    hf = "llama/modeling_llama.py:9 forward"
    check(hf in groups and groups[hf]["bytes"] == 1024, f"transformers group {groups.get(hf)}")
    check(rep["groups"][0]["where"] == ds, "groups not largest first")
    check(sum(g["bytes"] for g in rep["groups"]) == rep["peak_bytes"], "groups do not sum to the peak")
    try:
        mp.analyze({"device_traces": [[ev("alloc", 1, 512)]]})
        check(False, "a trace without the marker was accepted")
    except SystemExit as e:
        check("marker" in str(e), f"unexpected refusal {e}")
    check("GB" in mp.render(rep), "render")
    # per stream: stream 7's segment is half live at the reserved peak; a block freed but not
    # yet completed (record_stream) still counts as live; segments after the marker listed
    seg = [{"action": "segment_alloc", "addr": 100, "size": 4096, "stream": 0},
           ev("alloc", 100, 1024, DS),
           {"action": "segment_alloc", "addr": 200, "size": 2048, "stream": 7},
           {**ev("alloc", 200, 1024, HF), "stream": 7},
           {**ev("free_requested", 200, 1024), "stream": 7},
           ev("alloc", 101, mp.MARKER_BYTES),
           ev("free_completed", 101, mp.MARKER_BYTES),
           {"action": "segment_alloc", "addr": 300, "size": 8192, "stream": 0},
           {**ev("free_completed", 200, 1024), "stream": 7},
           {"action": "segment_free", "addr": 300, "size": 8192, "stream": 0}]
    st = mp.streams({"device_traces": [seg]})
    check(st["reserved_peak_bytes"] == 4096 + 2048 + 8192, f"reserved peak {st['reserved_peak_bytes']}")
    rows = {r["stream"]: r for r in st["at_reserved_peak"]}
    check(rows[7]["reserved"] == 2048 and rows[7]["not_live"] == 1024, f"stream 7 {rows.get(7)}")
    check(rows[0]["not_live"] == 4096 + 8192 - 1024, f"stream 0 {rows.get(0)}")
    check(rows[7]["first_block_from"] == hf, f"stream 7 named {rows[7]['first_block_from']}")
    check(st["segments_after_marker"] == [{"stream": 0, "bytes": 8192}], f"{st['segments_after_marker']}")
    check("stream 7" in mp.render_streams(st), "render_streams")
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
