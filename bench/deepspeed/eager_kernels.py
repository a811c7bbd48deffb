#!/usr/bin/env python3
"""The device kernels PyTorch eager launches per decoder layer, from a torch.profiler Chrome trace
of the model alone (bench/deepspeed/account.py's eager baseline), beside the Device calls the
tool's decoder makes per layer (src/step/decoder/decoder_math.cpp).

  python3 bench/deepspeed/eager_kernels.py TRACE.json.gz [TRACE ...] [--repo DIR] [--out OUT.md]
The eager traces carry no module events (with_modules and with_stack were off) but do carry
record_shapes, so an operator's role (which part of the layer) is inferred from the op order of
a Llama/Qwen2 decoder layer: the RMSNorm's `aten::pow` anchors each norm, the n-th `aten::linear`
of a layer is q, k, v, o, gate, up, down. Backward nodes get the layer and role of the forward op
that created them (the autograd `Sequence number` both carry). Standard library only."""
import argparse
import collections
import gzip
import json
import os
import re
import statistics
import sys

LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC", "cudaMemsetAsync")
DEVICE_CATS = ("kernel", "gpu_memset")  # what a launch puts on the GPU (copies are counted apart)
NOTES = ("What is measured: every count and time below the `eager` headings comes from one profiled forward + "
         "backward of the model alone (bf16, resident on the GPU, torch.profiler with record_shapes; the profiler "
         "lengthens host time, not device time). What is inferred: the role column (the trace has no module events; "
         "roles come from the op order of a Llama/Qwen2 layer) and the grouping into parts of the layer. The tool's "
         "columns are counted in its source (one CUDA kernel per Device call, two for rmsnorm_backward and sum), not "
         "measured: its fused decoder, which `--schedule stock` and `overlap` run. `--schedule deepspeed` runs eager's "
         "sequence instead (src/step/decoder/eager_decoder.cpp: 43 / 82 Device calls per Llama layer, 46 / 85 per Qwen2 "
         "layer; each run states them per module in DRIVERRESULT `device_ops`, docs/deepspeed.md compares them "
         "part by part). Device ops are kernels plus memsets (cuBLAS workspace / cuDNN zero-fills).")
LINEAR_ROLES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def load(path):
    with (gzip.open if path.endswith(".gz") else open)(path, "rt") as fh:
        t = json.load(fh)
    return t["traceEvents"] if isinstance(t, dict) else t


def _top_level(ops):
    """Map each cpu op's External id to its outermost enclosing op on the same thread: kernels
    name the innermost op (aten::addmm), the layer's structure is in the outermost (aten::linear)."""
    top, by_tid = {}, collections.defaultdict(list)
    for e in ops:
        by_tid[e["tid"]].append(e)
    for evs in by_tid.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        root_end, root = -1.0, None
        for e in evs:
            if e["ts"] >= root_end:
                root, root_end = e, e["ts"] + e["dur"]
            top[e["args"]["External id"]] = root
    return top


def index(events):
    """Cpu ops, device work and launch calls of one trace, linked by External id / correlation."""
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    top = _top_level(ops)
    phases = {e["name"]: (e["ts"], e["ts"] + e["dur"], e["tid"]) for e in events
              if e.get("cat") == "user_annotation" and e.get("ph") == "X"}
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and e.get("name") in LAUNCH_CALLS}
    device = [e for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS]
    kids = collections.defaultdict(list)  # top-level op id -> its device work
    for d in device:
        kids[id(top.get(d["args"].get("External id")))].append(d)
    return {"ops": ops, "top": top, "phases": phases, "launches": launches, "device": device, "kids": kids}


def _roots(ix, phase, main):
    """Top-level ops of a phase, in order; forward on the main thread, backward on the others
    (the autograd engine runs the backward nodes on its own device thread)."""
    a, b, tid = ix["phases"][phase]
    roots = {id(r): r for r in ix["top"].values() if a <= r["ts"] <= b and (r["tid"] == tid) == main}
    return sorted(roots.values(), key=lambda r: r["ts"])


def segment_forward(roots):
    """Split the forward's top-level ops into prelude, layers and head, with a role per op."""
    # The RMSNorm's variance: hidden_states.float().pow(2); nothing else in the model squares fp32.
    pows = [i for i, r in enumerate(roots)
            if r["name"] == "aten::pow" and (r["args"].get("Input type") or [""])[0] == "float"]
    starts = []
    for p in pows[0::2]:  # input_layernorm of each layer, then the final norm
        dims = roots[p]["args"].get("Input Dims", [None])[0]
        while p > 0 and roots[p - 1]["name"] == "aten::to" and roots[p - 1]["args"].get("Input Dims", [0])[0] == dims:
            p -= 1  # the fp32 upcast of the same tensor opens the norm
        starts.append(p)
    layers, where = [roots[a:b] for a, b in zip(starts, starts[1:])], {}
    for li, ops in enumerate(layers):
        for op, role in zip(ops, layer_roles(ops)):
            where[id(op)] = ("layer", li, role)
    for op in roots[:starts[0]]:
        role = "embed_tokens" if op["name"] == "aten::embedding" else "rotary_emb, positions, mask"
        where[id(op)] = ("prelude", 0, role)
    seen_linear = False
    for op in roots[starts[-1]:]:
        seen_linear |= op["name"] == "aten::linear"
        role = "lm_head" if op["name"] == "aten::linear" else ("loss (logits, sum)" if seen_linear else "norm (RMSNorm)")
        where[id(op)] = ("head", 0, role)
    return layers, where


def layer_roles(ops):
    """Roles of one Llama/Qwen2 decoder layer's top-level ops, from their order."""
    roles, n_lin, seen_add = [], 0, False
    for op in ops:
        name = op["name"]
        if name == "aten::linear":
            n_lin += 1
            roles.append(LINEAR_ROLES[min(n_lin, 7) - 1])
        elif n_lin == 0:
            roles.append("input_layernorm (RMSNorm)")
        elif n_lin <= 3:
            roles.append(_attention_role(name, n_lin))
        elif n_lin == 4:
            first_add = name == "aten::add" and not seen_add
            seen_add |= first_add
            roles.append("residual add" if first_add else "post_attention_layernorm (RMSNorm)")
        else:
            roles.append("SiLU(gate) * up" if n_lin < 7 else "residual add")
    return roles


def _attention_role(name, n_lin):
    if name in ("aten::view", "aten::transpose", "aten::reshape", "aten::contiguous"):
        return "heads view/transpose" if n_lin < 3 else "heads view/transpose, attn output"
    return ("sdpa" if "scaled_dot_product" in name else "repeat_kv (GQA)" if name in ("aten::expand", "aten::repeat_interleave")
            else "rotary (apply_rotary_pos_emb)")


def label(op):
    """An op with the shapes and dtypes record_shapes kept (first two inputs)."""
    dims = [d for d in (op["args"].get("Input Dims") or []) if d][:2]
    types = [t for t in (op["args"].get("Input type") or []) if t and t != "Scalar"][:2]
    short = [t.replace("c10::BFloat16", "bf16").replace("long int", "i64") for t in types]
    return f"{op['name']} {' '.join(map(str, dims))} {'/'.join(short)}".strip()


def backward_map(ix, where):
    """Place every backward node in the layer and role of the forward op that created it."""
    a, b, tid = ix["phases"]["forward"]
    seq = {}
    for e in ix["ops"]:
        s = e["args"].get("Sequence number")
        if s is not None and e["tid"] == tid and a <= e["ts"] <= b:
            # Ops record the counter's next value; the one that creates the node is the last op
            # (by time) carrying it. Keep its outermost op: the one that was segmented.
            if s not in seq or e["ts"] >= seq[s][0]:
                seq[s] = (e["ts"], ix["top"][e["args"]["External id"]])
    seq = {s: root for s, (_, root) in seq.items()}
    out, last = {}, ("head", 0, "loss (logits, sum)")
    for node in _roots(ix, "backward", main=False):
        fwd = seq.get(node["args"].get("Sequence number"))
        place = where.get(id(fwd)) if fwd is not None else None
        if place is None:  # AccumulateGrad & co: no forward op; it follows its layer's nodes
            place = (last[0], last[1], "AccumulateGrad / other") if "AccumulateGrad" in node["name"] else last
        out[id(node)] = (place, fwd)
        last = place
    return out


def tally(ix, roots, place_of, opname):
    """(segment, role, op label) -> [device ops, device us, kernel names]; per-layer counts."""
    rows = collections.defaultdict(lambda: [0, 0.0, collections.Counter()])
    per_layer = collections.Counter()
    for r in roots:
        seg, li, role = place_of(r) or (None, 0, "")
        for d in (ix["kids"].get(id(r), []) if seg else []):
            row = rows[(seg, role, opname(r))]
            row[0], row[1] = row[0] + 1, row[1] + d["dur"]
            row[2][_short_kernel(d["name"])] += 1
            per_layer[li] += seg == "layer"
    return rows, per_layer


def _short_kernel(name):
    # Template arguments make every elementwise kernel look alike; keep the functor that differs.
    if name.startswith("Memset"):
        return "memset"
    found = (re.search(pat, name) for pat in (r"nvjet\w+|cudnn\w*", r"\w+(?:_kernel|Kernel|Copy)\w*"))
    base = next((m.group(0) for m in found if m), name[:40])
    fun = re.findall(r"(\w+Functor\w*|\w+_functor\w*)", name)
    return base[:44] + (f"<{fun[-1][:28]}>" if fun else "")


def phase_totals(ix, phase):
    """Device ops, device time, launch calls and host gaps between launches in one phase."""
    a, b, _ = ix["phases"][phase]
    calls = sorted((c for c in ix["launches"].values() if a <= c["ts"] <= b), key=lambda c: c["ts"])
    corr = {c["args"]["correlation"] for c in calls}
    dev = [d for d in ix["device"] if d["args"].get("correlation") in corr]
    gaps = [y["ts"] - (x["ts"] + x["dur"]) for x, y in zip(calls, calls[1:]) if y["tid"] == x["tid"]]
    span = (max(d["ts"] + d["dur"] for d in dev) - min(d["ts"] for d in dev)) if dev else 0.0
    return {"kernels": sum(d["cat"] == "kernel" for d in dev),
            "memsets": sum(d["cat"] == "gpu_memset" for d in dev),
            "device_ms": sum(d["dur"] for d in dev) / 1e3, "launch_calls": len(calls),
            "host_ms": (b - a) / 1e3, "gpu_span_ms": span / 1e3,
            "gap_median_us": statistics.median(gaps) if gaps else 0.0,
            "gap_mean_us": statistics.fmean(gaps) if gaps else 0.0}


# ---- The tool's side: Device calls per layer, counted in its source (not a trace) ----
# Device calls that are more than one kernel on CUDA (src/backends/cuda/cuda_model_kernels.cu:
# launch_rmsnorm_backward launches a dx and a dw kernel; cuda_kernels.cu: launch_sum two passes).
# A gemm is one cuBLAS call; that cuBLAS picks one kernel for it is a hypothesis, not read here.
CUDA_KERNELS = {"rmsnorm_backward": 2, "sum": 2}


def _body(src, signature):
    """The text of a C++ function body that starts after `signature`."""
    i = src.index("{", src.index(signature))
    depth, j = 0, i
    while True:
        depth += {"{": 1, "}": -1}.get(src[j], 0)
        if depth == 0:
            return src[i + 1:j]
        j += 1


# DecoderMath's helpers that choose between the fused and the eager decoder: their fused Device
# calls (the eager ones are eager_decoder.cpp's, counted by the tool itself in device_ops).
FUSED_HELPERS = {"norm_forward": ["rmsnorm_forward"], "norm_backward": ["rmsnorm_backward"],
                 "heads_forward": ["to_heads"] * 3, "heads_backward": ["from_heads"] * 3}


def _conditional_calls(body):
    """(Device call, condition) in a C++ body; condition 'bias' / 'tied' for the calls that exist
    only for models with q/k/v biases (Qwen2) or a tied lm_head, else ''."""
    blocks = [(m.start(), m.start() + len(_body(body[m.start():], "{")) + 2, m.group(1))
              for m in re.finditer(r"if \((bias|tied)_\) \{", body)]
    calls = []
    for m in re.finditer(r"\b(?:dev\.|dev_->)?(\w+)\(", body):
        name = m.group(1)
        if name in FUSED_HELPERS:
            line = body[body.rfind("\n", 0, m.start()) + 1:m.start()]
            if "void " not in line:
                calls += [(n, "") for n in FUSED_HELPERS[name]]
            continue
        if name == "linear":
            name = "gemm"  # DecoderMath::linear is one gemm
        elif "dev" not in body[max(0, m.start() - 5):m.start() + 5]:
            continue  # not a Device call (a helper such as attention_backward, saved, sqrt)
        line = body[body.rfind("\n", 0, m.start()) + 1:m.start()]
        cond = next((c for a, b, c in blocks if a <= m.start() < b), "")
        cond = cond or next((c for c in ("bias", "tied") if f"if ({c}_)" in line), "")
        calls.append((name, cond))
    return calls


def tool_calls(repo):
    """The tool's Device calls per decoder layer and outside the layers (embedding, head)."""
    with open(os.path.join(repo, "src", "step", "decoder", "decoder_math.cpp")) as fh:
        src = fh.read()
    parts = {"forward": ["layer_forward"], "backward": ["layer_backward", "attention_backward"],
             "outside forward": ["forward", "head_forward"], "outside backward": ["backward", "head_backward"]}
    return {k: [c for f in fs for c in _conditional_calls(_body(src, f"void DecoderMath::{f}("))]
            for k, fs in parts.items()}


def tool_summary(calls, bias, tied=True):
    """Per call name: (Device calls, CUDA kernels)."""
    keep = {"": True, "bias": bias, "tied": tied}
    c = collections.Counter(n for n, cond in calls if keep[cond])
    return {n: (k, k * CUDA_KERNELS.get(n, 1)) for n, k in sorted(c.items())}


# ---- Side by side and rendering ----
# Which part of a layer an eager role and a tool call belong to (a judgement, stated in the output).
GROUPS = ("RMSNorm x2", "projections (7 gemm, q/k/v bias)", "rotary, heads layout, GQA repeat",
          "attention core (sdpa | QK^T, softmax, PV)", "SiLU * up", "residual adds", "other")
TOOL_GROUP = {"rmsnorm_forward": 0, "rmsnorm_backward": 0, "gemm": 1, "bias_add": 1, "column_sum": 1,
              "to_heads": 2, "from_heads": 2, "gemm_strided_batched": 3, "causal_softmax_forward": 3,
              "causal_softmax_backward": 3, "silu_mul_forward": 4, "silu_mul_backward": 4,
              "residual_add": 5}


def eager_group(role):
    for key, g in (("RMSNorm", 0), ("_proj", 1), ("rotary", 2), ("heads", 2), ("repeat_kv", 2),
                   ("sdpa", 3), ("SiLU", 4), ("residual", 5)):
        if key in role:
            return g
    return 6


def analyze(path):
    """Everything the report needs from one eager trace."""
    ix = index(load(path))
    fwd = _roots(ix, "forward", main=True)
    layers, where = segment_forward(fwd)
    bmap = backward_map(ix, where)
    f_rows, f_per = tally(ix, fwd, lambda r: where.get(id(r)), label)
    b_rows, b_per = tally(ix, list(_roots(ix, "backward", main=False)),
                          lambda r: bmap[id(r)][0],
                          lambda r: r["name"].split(": ")[-1] + (
                              f" <- {label(bmap[id(r)][1])}" if bmap[id(r)][1] is not None else ""))
    # Qwen2's q/k/v carry a bias: aten::linear then has three inputs (the tool adds bias_add calls).
    bias = any(len([d for d in op["args"].get("Input Dims", []) if d]) == 3 for op in layers[0]
               if op["name"] == "aten::linear")
    return {"path": path, "n_layers": len(layers), "bias": bias, "fwd": f_rows, "bwd": b_rows,
            "fwd_per_layer": f_per, "bwd_per_layer": b_per,
            "totals": {p: phase_totals(ix, p) for p in ("forward", "backward")}}


def _n(x):
    # Per-layer means: integers when every layer launches the same, else two decimals.
    return f"{x:.2f}".rstrip("0").rstrip(".")


def _op_table(rows, seg, n):
    out = ["| role | op (input dims, dtypes) | device ops | device us | most launched |", "|---|---|---|---|---|"]
    for (s, role, op), (k, us, names) in rows.items():
        kn = ", ".join(f"`{nm}` x{_n(c / n)}" for nm, c in names.most_common(3))
        out += [f"| {role} | `{op}` | {_n(k / n)} | {us / n:.1f} | {kn} |"] if s == seg else []
    return out


def render_totals(a):
    out = ["| phase | kernels | memsets | launch calls | device ms | host wall ms | GPU span ms | "
           "host gap between launches, median / mean us |", "|---|---|---|---|---|---|---|---|"]
    for p, t in a["totals"].items():
        out.append(f"| {p} | {t['kernels']} | {t['memsets']} | {t['launch_calls']} | {t['device_ms']:.2f} | "
                   f"{t['host_ms']:.2f} | {t['gpu_span_ms']:.2f} | {t['gap_median_us']:.1f} / {t['gap_mean_us']:.1f} |")
    return out


def render_side_by_side(a, tool):
    """Per layer and part of the layer: eager device ops and us (measured) vs the tool's calls."""
    n, out = a["n_layers"], ["| part of the layer | eager fwd device ops | eager fwd us | tool fwd calls (CUDA kernels) | "
                             "eager bwd device ops | eager bwd us | tool bwd calls (CUDA kernels) |", "|---|---|---|---|---|---|---|"]
    tot = [0] * 8
    for gi, gname in enumerate(GROUPS):
        row = []
        for ph, rows in (("forward", a["fwd"]), ("backward", a["bwd"])):
            mine = [v for (seg, role, _), v in rows.items() if seg == "layer" and eager_group(role) == gi]
            s = tool_summary(tool[ph], a["bias"])
            row += [sum(v[0] for v in mine) / n, sum(v[1] for v in mine) / n]
            row += [sum(v[i] for k, v in s.items() if TOOL_GROUP.get(k, 6) == gi) for i in (0, 1)]
        tot = [x + y for x, y in zip(tot, row)]
        out.append(f"| {gname} | {_n(row[0])} | {row[1]:.1f} | {row[2]} ({row[3]}) | {_n(row[4])} | "
                   f"{row[5]:.1f} | {row[6]} ({row[7]}) |")
    out.append(f"| **per layer** | **{_n(tot[0])}** | **{tot[1]:.1f}** | **{tot[2]} ({tot[3]})** | "
               f"**{_n(tot[4])}** | **{tot[5]:.1f}** | **{tot[6]} ({tot[7]})** |")
    return out


def render_step(a, tool):
    """Whole forward / backward: eager device ops (measured) vs the tool's kernels (from source)."""
    n, out = a["n_layers"], ["| phase | where | eager device ops | eager device ms | tool Device calls (CUDA kernels) |",
                             "|---|---|---|---|---|"]
    for ph, rows in (("forward", a["fwd"]), ("backward", a["bwd"])):
        t_lay = [n * sum(v[i] for v in tool_summary(tool[ph], a["bias"]).values()) for i in (0, 1)]
        t_out = [sum(v[i] for v in tool_summary(tool["outside " + ph], a["bias"]).values()) for i in (0, 1)]
        for where, segs, tc in (("decoder layers", ("layer",), t_lay),
                                ("embedding, final norm, lm_head, loss", ("prelude", "head"), t_out)):
            k, us = (sum(v[i] for key, v in rows.items() if key[0] in segs) for i in (0, 1))
            out.append(f"| {ph} | {where} | {k} | {us / 1e3:.2f} | {tc[0]} ({tc[1]}) |")
        t = a["totals"][ph]
        out.append(f"| {ph} | **all (phase totals)** | **{t['kernels'] + t['memsets']}** | "
                   f"**{t['device_ms']:.2f}** | **{t_lay[0] + t_out[0]} ({t_lay[1] + t_out[1]})** |")
    return out


def render(a, tool, repo):
    n, fl, bl = a["n_layers"], a["fwd_per_layer"], a["bwd_per_layer"]
    out = [f"## {os.path.basename(os.path.dirname(a['path']))}", "",
           f"Trace `{os.path.relpath(a['path'], repo)}`: {n} decoder layers found; device ops (kernels + memsets) "
           f"per layer: forward {min(fl.values())}-{max(fl.values())}, backward {min(bl.values())}-{max(bl.values())}.",
           "" if any("_proj" in r for (_, r, _) in a["fwd"]) else "**No aten::linear in the layers: not an eager trace "
           "(DeepSpeed's replaces them), so the roles and parts below are wrong; only the totals hold.**",
           "", "### Totals (whole forward / backward, all layers; measured)", ""] + render_totals(a)
    out += ["", f"### Eager beside the tool, per decoder layer (tool: src/step/decoder/decoder_math.cpp, "
            f"{'with' if a['bias'] else 'without'} q/k/v bias)", ""] + render_side_by_side(a, tool)
    out += ["", "### Whole forward / backward (tool outside the layers: DecoderMath::forward, head_forward, "
            "backward, head_backward; tied lm_head)", ""] + render_step(a, tool)
    for title, rows, seg, k in (("Forward, per decoder layer (mean over layers)", a["fwd"], "layer", n),
                                ("Backward, per decoder layer (node <- the forward op that created it)", a["bwd"], "layer", n),
                                ("Forward, embedding and rotary_emb", a["fwd"], "prelude", 1),
                                ("Forward, final norm, lm_head, loss", a["fwd"], "head", 1),
                                ("Backward, embedding and rotary_emb", a["bwd"], "prelude", 1),
                                ("Backward, final norm, lm_head, loss", a["bwd"], "head", 1)):
        out += ["", f"### {title}", ""] + _op_table(rows, seg, k)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--repo", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--out", help="write the markdown here (default: stdout)")
    args = ap.parse_args(argv)
    repo = os.path.abspath(args.repo)
    rel = [os.path.relpath(os.path.abspath(t), repo) for t in args.traces]
    out = ["# The kernels eager PyTorch launches per decoder layer, beside the tool's Device calls", "",
           "Made by `python3 bench/deepspeed/eager_kernels.py " + " ".join(rel)
           + (f" --out {os.path.relpath(os.path.abspath(args.out), repo)}`" if args.out else "`") + " (no GPU).", ""]
    out += [NOTES, ""]
    tool = tool_calls(repo)
    for t in args.traces:
        out += render(analyze(t), tool, repo) + [""]
    text = "\n".join(out)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
