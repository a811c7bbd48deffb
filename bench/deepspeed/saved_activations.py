#!/usr/bin/env python3
"""What eager PyTorch saves for backward in one decoder layer of a Hugging Face model, beside
what the tool's deepspeed schedule holds per layer (issue 36: the GPU peak's gap).

For each MODEL:BATCH:SEQ, builds the model from bench/models/configs/MODEL.json (random bf16
weights on the GPU, transformers' sdpa attention as harness.py uses), runs one decoder layer's
forward under torch.autograd.graph.saved_tensors_hooks and sums the distinct storages autograd
keeps (what PyTorch frees during that layer's backward), and measures the whole model's
torch.cuda.memory_allocated() growth across forward (parameters resident, no DeepSpeed). Prints
one JSON line per model:
  {"model", "batch", "seq", "saved_per_layer_bytes", "saved": {shape/dtype: bytes},
   "forward_growth_bytes", "layers"}

Usage: saved_activations.py [--attn sdpa|eager] MODEL:BATCH:SEQ...
"""
import argparse
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIGS = os.path.join(HERE, "..", "models", "configs")


def build(name, attn, layers=None):
    from transformers import AutoConfig, AutoModelForCausalLM
    with open(os.path.join(CONFIGS, name + ".json")) as f:
        raw = json.load(f)
    if layers is not None:
        raw["num_hidden_layers"] = layers
    cfg = AutoConfig.for_model(raw.pop("model_type"), **raw)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)
    return model.to(dtype=torch.bfloat16, device="cuda"), cfg


def layer_saved(model, cfg, batch, seq):
    """Distinct storages autograd saves in one decoder layer's forward."""
    inner = model.model
    layer = inner.layers[0]
    x = torch.randn(batch, seq, cfg.hidden_size, device="cuda", dtype=torch.bfloat16,
                    requires_grad=True)
    pos = torch.arange(seq, device="cuda").unsqueeze(0).expand(batch, -1)
    cos_sin = inner.rotary_emb(x, pos)
    seen = {}

    def pack(t):
        if t.device.type == "cuda":
            s = t.untyped_storage()
            key = s.data_ptr()
            if key not in seen:
                seen[key] = (s.nbytes(), f"{list(t.shape)} {str(t.dtype).replace('torch.', '')}")
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = layer(x, position_embeddings=cos_sin, attention_mask=None, position_ids=pos)
    del out
    saved = {}
    for nbytes, what in seen.values():
        saved[what] = saved.get(what, 0) + nbytes
    # The layer's own parameters are saved too (by the linears and norms): not activations.
    params = {p.untyped_storage().data_ptr() for p in layer.parameters()}
    total = sum(n for k, (n, _) in seen.items() if k not in params)
    return total, saved


def forward_growth(name, attn, batch, seq):
    model, cfg = build(name, attn)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), device="cuda")
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    loss = model(input_ids=ids, use_cache=False).logits.sum(dtype=torch.float32)
    torch.cuda.synchronize()
    grown = torch.cuda.memory_allocated() - before
    del loss
    layers = cfg.num_hidden_layers
    del model
    torch.cuda.empty_cache()
    return grown, layers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--attn", choices=("sdpa", "eager"), default="sdpa")
    ap.add_argument("cases", nargs="+", help="MODEL:BATCH:SEQ")
    args = ap.parse_args()
    for case in args.cases:
        name, batch, seq = case.split(":")
        batch, seq = int(batch), int(seq)
        model, cfg = build(name, args.attn, layers=1)
        per_layer, saved = layer_saved(model, cfg, batch, seq)
        del model
        torch.cuda.empty_cache()
        grown, layers = forward_growth(name, args.attn, batch, seq)
        print(json.dumps({"model": name, "batch": batch, "seq": seq, "attn": args.attn,
                          "saved_per_layer_bytes": per_layer, "saved": saved,
                          "forward_growth_bytes": grown, "layers": layers}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
