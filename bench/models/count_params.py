#!/usr/bin/env python3
"""Hugging Face's parameter count next to zero3-offload-bench's, for --model configs.

Each FILE is the --json output of a dry run, e.g.
    zero3-offload-bench --model Qwen2.5-7B --dry-run --json qwen7.json
The script rebuilds the model from workload.architecture with transformers' own config class
(LlamaConfig / MistralConfig / Qwen2Config) on the meta device (no memory, no download, no
network) and counts sum(p.numel() for p in model.parameters()), the upstream script's n_params.
Prints one line per file; exits 1 when any count differs, 2 on bad input.

    python3 bench/models/count_params.py F.json [F.json ...]
    bench/models/count_params.py --bench build/release/zero3-offload-bench   # every built-in
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

BUILTIN = ["Llama-3.2-1B", "Llama-3.2-3B", "Llama-3.1-8B", "Llama-3.1-70B", "Mistral-7B-v0.3",
           "Qwen2.5-0.5B", "Qwen2.5-1.5B", "Qwen2.5-3B", "Qwen2.5-7B", "Qwen2.5-14B",
           "Qwen2.5-32B", "Qwen2.5-72B"]


def hf_count(workload):
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config

    arch = workload["architecture"]
    config_class = {"llama": LlamaConfig, "mistral": MistralConfig, "qwen2": Qwen2Config}[arch["model_type"]]
    kwargs = dict(vocab_size=workload["vocab"], hidden_size=workload["hidden"],
                  num_hidden_layers=workload["layers"], intermediate_size=arch["intermediate_size"],
                  num_attention_heads=arch["num_attention_heads"],
                  num_key_value_heads=arch["num_key_value_heads"], head_dim=arch["head_dim"],
                  tie_word_embeddings=arch["tie_word_embeddings"], rope_theta=arch["rope_theta"],
                  rms_norm_eps=arch["rms_norm_eps"])
    if arch["model_type"] == "llama":
        kwargs["attention_bias"] = False
    config = config_class(**kwargs)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def dry_run_files(bench, directory):
    files = []
    for name in BUILTIN:
        path = os.path.join(directory, name + ".json")
        # The pre-flight may refuse the big ones on a small host (exit 2): the plan is written.
        proc = subprocess.run([bench, "--model", name, "--dry-run", "--device", "cpu", "--json", path],
                              capture_output=True, text=True)
        if not os.path.exists(path):
            sys.exit(f"count_params: {bench} --model {name} wrote no JSON (rc {proc.returncode}): "
                     f"{proc.stderr.strip()}")
        files.append(path)
    return files


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="*", help="--json files of --model dry runs")
    p.add_argument("--bench", help="run the dry runs of every built-in config with this binary")
    args = p.parse_args()
    files = list(args.files)
    tmp = tempfile.TemporaryDirectory()
    if args.bench:
        files += dry_run_files(args.bench, tmp.name)
    if not files:
        p.error("give --json files or --bench BINARY")
    try:
        import torch  # noqa: F401
        import transformers
    except ImportError as e:
        sys.exit(f"count_params: needs torch and transformers ({e}); install them, e.g. offline "
                 "with bench/deepspeed/install-offline")
    print(f"transformers {transformers.__version__}")
    print(f"{'model':<28}{'zero3-offload-bench':>22}{'transformers':>16}  verdict")
    bad = 0
    for path in files:
        try:
            with open(path) as f:
                workload = json.load(f)["workload"]
        except (OSError, ValueError, KeyError) as e:
            sys.exit(f"count_params: {path}: not a dry run's --json file ({e})")
        if not workload.get("architecture"):
            sys.exit(f"count_params: {path}: the synthetic model; run the dry run with --model")
        ours, theirs = workload["params"], hf_count(workload)
        same = ours == theirs
        bad += not same
        print(f"{workload['model']:<28}{ours:>22}{theirs:>16}  {'equal' if same else 'DIFFERENT'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
