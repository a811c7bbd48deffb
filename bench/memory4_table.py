#!/usr/bin/env python3
"""The tables of results/h100/2026-12-07-memory-copy-back (issue 36, bench/h200-memory4.sh):
the copy-back loop's device peak, locked bytes and step medians, this tree and the tool before
it interleaved, beside DeepSpeed 0.19.8 from the same call; then the shared-GPU run (Mistral-7B-v0.3
cut to 8 layers, another process leaving 11e9 bytes): each program's outcome, peak and the most
nvidia-smi saw its process hold.

Usage: bench/memory4_table.py FOLDER   (FOLDER: the call's r/ folder, e.g. .../call1)
"""
import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dsref import by_arm as dsref  # noqa: E402


def tool(path):
    return json.load(open(path))


def main(folder):
    gb = lambda b: f"{b / 1e9:.2f} GB"
    rows = ["| program | arm | step medians (s) | GPU peak | reserved peak | locked bytes |",
            "|---|---|---|---|---|---|"]
    for label, pattern in (("this tree", "qwen05-cb-*.json"), ("the tool before (2237fd9)", "old-qwen05-cb-*.json")):
        runs = [tool(f) for f in sorted(glob.glob(os.path.join(folder, pattern)))]
        for arm in ("registered", "unregistered"):
            med = [r[arm]["step_stats"]["median"] for r in runs]
            a = runs[0][arm]
            rows.append(f"| {label} | {arm} | {', '.join(f'{m:.3f}' for m in med)} | {gb(a['gpu_peak_gb'] * 1e9)} | "
                        f"{gb(a['gpu_reserved_peak_gb'] * 1e9)} | {a['locked_bytes']:,} |")
    ds = dsref(os.path.join(folder, "ds-qwen05-cb.txt"))
    for arm, d in ds.items():
        rows.append(f"| DeepSpeed 0.19.8 | {arm} | {d['step_median_s']:.3f} | {gb(d['gpu_peak_gb'] * 1e9)} | "
                    f"{gb(d['gpu_reserved_peak_gb'] * 1e9)} | {d['pins']['locked_bytes']:,} |")
    print("Qwen2.5-0.5B b4 s128, copy-back loop (offload_optimizer only):\n")
    print("\n".join(rows))

    new = [tool(f) for f in sorted(glob.glob(os.path.join(folder, "qwen05-cb-*.json")))]
    old = [tool(f) for f in sorted(glob.glob(os.path.join(folder, "old-qwen05-cb-*.json")))]
    print("\nthis tree / the tool before, per interleaved pair and arm (step median ratio):",
          ", ".join(f"{arm} {n[arm]['step_stats']['median'] / o[arm]['step_stats']['median']:.3f}"
                    for n, o in zip(new, old) for arm in ("registered", "unregistered")))
    peak = new[0]["registered"]["gpu_peak_gb"]
    dsp = ds["registered"]["gpu_peak_gb"]
    print(f"GPU peak: this tree {peak:.3f} GB against DeepSpeed's {dsp:.3f} GB ({100 * (peak / dsp - 1):+.1f} %); "
          f"the tool before {old[0]['registered']['gpu_peak_gb']:.3f} GB "
          f"({100 * (old[0]['registered']['gpu_peak_gb'] / dsp - 1):+.1f} %)")

    apps = {}
    for line in open(os.path.join(folder, "apps-mistral8.txt")):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[1].endswith("MiB"):
            apps[parts[0]] = max(apps.get(parts[0], 0), int(parts[1].split()[0]))
    print("\nShared GPU: Mistral-7B-v0.3 cut to 8 layers, b4 s512 --offload-param, registered arm, "
          "another process leaving 11e9 bytes:\n")
    print(open(os.path.join(folder, "hog-mistral8.txt")).read().strip())
    d = dsref(os.path.join(folder, "shared-ds-mistral8.txt"))["registered"]
    t = tool(os.path.join(folder, "shared-mistral8.json"))["registered"]
    print(f"\nnvidia-smi's most per process (MiB): {apps}")
    print(f"DeepSpeed: ran, step median {d['step_median_s']:.3f} s, GPU peak {d['gpu_peak_gb']:.3f} GB, "
          f"reserved {d['gpu_reserved_peak_gb']:.3f} GB, locked {d['pins']['locked_bytes']:,} B")
    print(f"the tool: ok={t['ok']}: {t.get('error', '')}")


if __name__ == "__main__":
    main(sys.argv[1])
