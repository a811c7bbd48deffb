#!/usr/bin/env python3
"""The table of bench/h200-memory9.sh's call (issue 36): the copy-back loop (no --offload-param)
beside DeepSpeed 0.19.8 in the same call. For each tool run NAME.json (its --json, registered
arm) with a DeepSpeed log ds-NAME.txt beside it: the step median, the device peak (allocated,
then reserved; DeepSpeed's over its timed steps, and with its initialisation where recorded), the
locked bytes, and the tool against DeepSpeed. A tool run without a DeepSpeed log is listed alone.

Usage: bench/memory9_table.py FOLDER   (FOLDER: the call's r/ folder)
"""
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dsref import by_arm  # noqa: E402

NAMES = {"qwen05-cb": "Qwen2.5-0.5B b4 s128", "qwen15-cb": "Qwen2.5-1.5B b4 s512",
         "llama3b-cb": "Llama-3.2-3B b4 s512"}


def pct(a, b):
    return f"{100 * (a / b - 1):+.1f} %"


def row(name, tool, ds):
    t = tool["registered"]
    if not t.get("ok", True):
        return f"| {NAMES.get(name, name)} | failed: {t.get('error', '?')} | | | | | |"
    tool_cells = (f"{t['step_stats']['median']:.3f}", f"{t['gpu_peak_gb']:.2f} / {t['gpu_reserved_peak_gb']:.2f}",
                  f"{t['locked_bytes']:,}")
    if ds is None:
        return f"| {NAMES.get(name, name)} | {tool_cells[0]} | — | {tool_cells[1]} | — | {tool_cells[2]} | — |"
    init = ds.get("gpu_peak_with_init_gb")
    ds_peak = f"{ds['gpu_peak_gb']:.2f} / {ds['gpu_reserved_peak_gb']:.2f}" + (f" (+init {init:.2f})" if init else "")
    return (f"| {NAMES.get(name, name)} | {tool_cells[0]} (DS {ds['step_median_s']:.3f}; "
            f"{t['step_stats']['median'] / ds['step_median_s']:.2f}x) | {ds_peak} | {tool_cells[1]} | "
            f"{pct(t['gpu_peak_gb'], ds['gpu_peak_gb'])} | {tool_cells[2]} | "
            f"{ds['pins']['locked_bytes']:,} ({pct(t['locked_bytes'], ds['pins']['locked_bytes'])}) |")


def main(folder):
    print("Copy-back loop (offload_optimizer only), registered arm, one call:\n")
    print("| case | step median (s): tool (DeepSpeed; tool / DS) | DeepSpeed peak: allocated / reserved (GB) "
          "| tool peak: allocated / reserved (GB) | tool vs DS allocated | tool locked (B) | DeepSpeed locked (B) |")
    print("|---|---|---|---|---|---|---|")
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        name = os.path.basename(path)[:-len(".json")]
        with open(path) as f:
            tool = json.load(f)
        if "registered" not in tool:
            continue
        ds_log = os.path.join(folder, f"ds-{name}.txt")
        ds = by_arm(ds_log).get("registered") if os.path.exists(ds_log) else None
        print(row(name, tool, ds))


if __name__ == "__main__":
    main(sys.argv[1])
