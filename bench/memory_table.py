#!/usr/bin/env python3
"""The memory table of results/h200/2026-12-04-deepspeed-memory (issue 36): the tool's device
peaks, locked bytes and step times (this tree and the one before the memory work, interleaved)
beside DeepSpeed 0.19.8's recorded ones (results/h200/2026-12-02-deepspeed-account), and eager
PyTorch's saved activations per layer beside the tool's per-layer block.

Usage: bench/memory_table.py FOLDER [SAVED_ACTIVATIONS_JSONL]
  FOLDER: results/h200/2026-12-04-deepspeed-memory, or results/h200/2026-12-04-memory-sdpa/call1
  (whose saved activations are the first folder's: pass its saved-activations.jsonl)
"""
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsref  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
ACCOUNT = os.path.join(ROOT, "results/h200/2026-12-02-deepspeed-account")
CASES = [("qwen05-b4-s128-op", "Qwen2.5-0.5B", "b4 s128 --offload-param", "Qwen2.5-0.5B-b4-s128"),
         ("qwen05-b4-s128-cb", "Qwen2.5-0.5B", "b4 s128 copy_back", None),
         ("qwen15-b4-s512-op", "Qwen2.5-1.5B", "b4 s512 --offload-param", "Qwen2.5-1.5B-b4-s512"),
         ("llama3b-b4-s512-op", "Llama-3.2-3B", "b4 s512 --offload-param", "Llama-3.2-3B-b4-s512")]


def deepspeed(folder):
    """{arm: DSREF} of DeepSpeed's recorded runs of one case (every call of the account)."""
    out = {}
    for f in sorted(glob.glob(os.path.join(ACCOUNT, "call*", folder, "dsref.jsonl"))):
        for d in dsref.records(f):
            out.setdefault(d["arm"], d)
    return out


def planned(folder, name):
    text = open(os.path.join(folder, f"plan-{name}.txt")).read()
    m = re.search(r"arm registered .* device +([0-9.]+) GB", text)
    return float(m.group(1)) if m else None


def pct(a, b):
    return f"{(a / b - 1) * 100:+.0f} %"


def main(folder, saved=None):
    print("| case | DeepSpeed peak (GB) | tool peak: allocated / reserved reg. / reserved unreg. (GB) | "
          "plan (GB) | tool before (GB) | locked: DeepSpeed / tool (B) | step reg. / unreg. (s): "
          "tool / before |")
    print("|---|---|---|---|---|---|---|")
    for name, model, shape, ref in CASES:
        new = json.load(open(os.path.join(folder, name + ".json")))
        old = json.load(open(os.path.join(folder, f"old-{name}.json")))
        reg, unreg = new["registered"], new["unregistered"]
        ds = deepspeed(ref) if ref else {}
        ds_peak = ds.get("registered", {}).get("gpu_peak_gb")
        ds_locked = next((d["pins"]["locked_bytes"] for d in ds.values() if "pins" in d), None)
        if ds_locked is None:
            ds_locked = next((d.get("locked_bytes") for d in ds.values() if d.get("locked_bytes")), None)
        peak = reg["gpu_peak_gb"]
        peak_text = f"{peak:.2f} ({pct(peak, ds_peak)})" if ds_peak else f"{peak:.2f}"
        locked = reg["locked_bytes"]
        locked_text = (f"{ds_locked:,} / {locked:,} ({(locked / ds_locked - 1) * 100:+.4f} %)"
                       if ds_locked else f"- / {locked:,}")
        med = lambda r: r["step_stats"]["median"]
        print(f"| {model} {shape} | {ds_peak:.2f} |" if ds_peak else f"| {model} {shape} | - |",
              f"{peak_text} / {reg['gpu_reserved_peak_gb']:.2f} / {unreg['gpu_reserved_peak_gb']:.2f} |",
              f"{planned(folder, name):.2f} | {old['registered']['gpu_peak_gb']:.2f} |",
              f"{locked_text} |",
              f"{med(reg):.3f} / {med(unreg):.3f} : {med(old['registered']):.3f} / "
              f"{med(old['unregistered']):.3f} ({pct(med(reg), med(old['registered']))}, "
              f"{pct(med(unreg), med(old['unregistered']))}) |")
    print()
    print("| model, shape | eager PyTorch saves per layer (MB) | the tool's per-layer block (MB) | "
          "difference x layers (GB) | tool peak - DeepSpeed peak (GB) |")
    print("|---|---|---|---|---|")
    for line in open(saved or os.path.join(folder, "saved-activations.jsonl")):
        d = json.loads(line)
        case = next(c for c in CASES if c[1] == d["model"] and c[3])
        new = json.load(open(os.path.join(folder, case[0] + ".json")))
        block = new_block(folder, case[0])
        ds_peak = deepspeed(case[3]).get("registered", {}).get("gpu_peak_gb")
        gap = new["registered"]["gpu_peak_gb"] - ds_peak
        print(f"| {d['model']} b{d['batch']} s{d['seq']} | {d['saved_per_layer_bytes'] / 1e6:.1f} | "
              f"{block / 1e6:.1f} | {(block - d['saved_per_layer_bytes']) * d['layers'] / 1e9:.2f} | "
              f"{gap:.2f} |")


def new_block(folder, name):
    """The tool's per-layer block, from its plan file's `layer block` line."""
    text = open(os.path.join(folder, f"plan-{name}.txt")).read()
    m = re.search(r"saved activations per layer: ([0-9]+) B", text)
    if not m:
        raise SystemExit(f"plan-{name}.txt has no 'saved activations per layer' line")
    return int(m.group(1))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else
                  os.path.join(ROOT, "results/h200/2026-12-04-deepspeed-memory"),
                  sys.argv[2] if len(sys.argv) > 2 else None))
