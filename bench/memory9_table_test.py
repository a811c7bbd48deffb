#!/usr/bin/env python3
"""bench/memory9_table.py on a hand-made call folder: a tool run beside its DeepSpeed log (the
ratios and percentages computed from the numbers given, DeepSpeed's initialisation peak shown),
a tool run without one (listed alone), a failed tool run (its error), a JSON that is not a tool
run (left out), and a DeepSpeed line cut short (a killed run: no record, so the tool is alone)."""
import contextlib
import io
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import memory9_table  # noqa: E402
from checklist import Checks  # noqa: E402

check = Checks()


def tool(median, peak, reserved, locked):
    return {"registered": {"ok": True, "step_stats": {"median": median}, "gpu_peak_gb": peak,
                           "gpu_reserved_peak_gb": reserved, "locked_bytes": locked}}


def dsref(median, peak, reserved, locked, init=None):
    d = {"arm": "registered", "step_median_s": median, "gpu_peak_gb": peak,
         "gpu_reserved_peak_gb": reserved, "pins": {"locked_bytes": locked}}
    if init is not None:
        d["gpu_peak_with_init_gb"] = init
    return "DSREF=" + json.dumps(d)


with tempfile.TemporaryDirectory() as d:
    def put(name, text):
        with open(os.path.join(d, name), "w") as f:
            f.write(text)

    put("qwen15-cb.json", json.dumps(tool(0.5, 11.0, 12.0, 3000)))
    put("ds-qwen15-cb.txt", "[ds-ref] noise\n" + dsref(1.0, 10.0, 13.0, 2000, init=10.5) + "\n")
    put("llama3b-cb.json", json.dumps(tool(2.0, 16.0, 17.0, 4000)))
    put("qwen05-cb.json", json.dumps({"registered": {"ok": False, "error": "out of memory"}}))
    put("other.json", json.dumps({"sweep": []}))
    put("cut.json", json.dumps(tool(1.0, 1.0, 1.0, 1)))
    put("ds-cut.txt", 'DSREF={"arm": "registered", "step_med')
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        memory9_table.main(d)
    rows = [r for r in out.getvalue().splitlines() if r.startswith("| ") and not r.startswith("| case")]
    by_case = {r.split(" | ")[0][2:]: r for r in rows}
    q = by_case.get("Qwen2.5-1.5B b4 s512", "")
    check("0.500 (DS 1.000; 0.50x)" in q, f"the step and tool / DS from the numbers: {q}")
    check("10.00 / 13.00 (+init 10.50)" in q, "DeepSpeed's peak, reserved and initialisation peak")
    check("+10.0 %" in q and "2,000 (+50.0 %)" in q, "the peak and locked percentages")
    llama = by_case.get("Llama-3.2-3B b4 s512", "")
    check("| 2.000 | — |" in llama, f"a tool run without a DeepSpeed log is alone: {llama}")
    check("failed: out of memory" in by_case.get("Qwen2.5-0.5B b4 s128", ""), "a failed tool run names its error")
    check("other" not in by_case, "a JSON without a registered arm is left out")
    check("| 1.000 | — |" in by_case.get("cut", ""), "a DeepSpeed line cut short gives no record")
    check(len(rows) == 4, f"four rows ({len(rows)})")

sys.exit(check.summary())
