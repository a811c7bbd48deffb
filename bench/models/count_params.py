#!/usr/bin/env python3
"""Parameter counts of Hugging Face architectures, by transformers itself, next to the tool's.

    count_params.py [--tool BIN] CONFIG.json...

For each config.json, builds the model with `transformers` on the meta device (no memory, no
weights, no network) and counts its parameters as `sum(p.numel() for p in model.parameters())`
(shared tensors once, as PyTorch's parameters() yields them). With --tool, also runs
`BIN --model CONFIG --dry-run --json F` and reads the tool's `workload.params`. Prints one line
per config, `COUNT name hf=N tool=M equal=yes|no`, and exits 1 if any pair differs. Needs torch +
transformers (the GPU machine's venv, transformers from bench/deepspeed/fetch-wheels
--with-transformers).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def hf_count(path):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    with open(path) as f:
        raw = json.load(f)
    cfg = AutoConfig.for_model(raw.pop("model_type"), **raw)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    return sum(p.numel() for p in model.parameters())


def tool_count(tool, path):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "plan.json")
        cp = subprocess.run([tool, "--model", path, "--dry-run", "--skip-preflight", "--json", out],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if cp.returncode != 0:
            return f"error(exit {cp.returncode}: {cp.stderr.strip().splitlines()[-1] if cp.stderr.strip() else ''})"
        with open(out) as f:
            return json.load(f)["workload"]["params"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tool", help="the zero3-offload-bench binary, to compare its counts")
    ap.add_argument("configs", nargs="+")
    args = ap.parse_args()
    bad = 0
    for path in args.configs:
        name = os.path.splitext(os.path.basename(path))[0]
        hf = hf_count(path)
        line = f"COUNT {name} hf={hf}"
        if args.tool:
            tool = tool_count(args.tool, path)
            equal = tool == hf
            bad += not equal
            line += f" tool={tool} equal={'yes' if equal else 'no'}"
        print(line, flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
