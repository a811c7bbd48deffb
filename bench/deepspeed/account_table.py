#!/usr/bin/env python3
"""Issue 23's tables from a results folder of bench/deepspeed/account-run / h200-account.sh:

    python3 bench/deepspeed/account_table.py results/h200/2026-12-02-deepspeed-account

For each case (a folder MODEL-bB-sS under any callN/), prints
1. the side by side: DeepSpeed's median step per arm (DSREF step_median_s, the upstream loop's
   timing) beside every tool run of that case (median of its step_times_s), ratios, speedups,
   seconds saved, and the issue's targets (arm +-20 %, speedup +-10 %, saving +-15 %);
2. per DeepSpeed arm, the account of its step whose rows add up to the measured step:
   the optimizer step, then forward + backward split into the model without DeepSpeed (eager
   baseline), DeepSpeed's hook functions (timed, no profiler) and the rest;
3. beside it the tool's phases (median host seconds) from its JSON.
Needs no GPU and no torch.
"""
import glob
import json
import os
import statistics
import sys


def load_cases(root):
    cases = {}
    for path in sorted(glob.glob(os.path.join(root, "call*", "*", ""))):
        name = os.path.basename(os.path.dirname(path))
        call = os.path.basename(os.path.dirname(os.path.dirname(path)))
        c = cases.setdefault(name, {"ds": {}, "tool": []})
        for f in sorted(glob.glob(os.path.join(path, "dsref.jsonl"))):
            for line in open(f):
                if line.startswith("DSREF="):
                    d = json.loads(line[len("DSREF="):])
                    d["_call"] = call
                    c["ds"][d["arm"]] = d
        # A call whose files did not come back keeps its returned output: the harness's
        # per-arm summary lines "[ds-ref] ARM avg min median fwd bwd opt peak".
        for f in sorted(glob.glob(os.path.join(path, "output-tail.txt"))):
            for line in open(f):
                parts = line.split()
                if len(parts) == 9 and parts[0] == "[ds-ref]" and parts[1] in ("registered", "pinned-unregistered"):
                    c["ds"].setdefault(parts[1], {"arm": parts[1], "_call": call + " (output tail)",
                                                  "step_median_s": float(parts[4])})
        for f in sorted(glob.glob(os.path.join(path, "tool*.json"))):
            t = json.load(open(f))
            t["_file"] = f"{call}/{os.path.basename(f)}"
            c["tool"].append(t)
    return cases


def tool_median(t, arm):
    return statistics.median(t[arm]["step_times_s"])


def pct(a, b):
    return f"{(a / b - 1) * 100:+.0f} %"


def side_by_side(name, c):
    ds = c["ds"]
    reg, unreg = ds.get("registered"), ds.get("pinned-unregistered")
    out = [f"### {name}", "",
           "| run | registered (s) | unregistered (s) | speedup | saved (s/step) |",
           "|---|---|---|---|---|"]
    if reg and unreg:
        r, u = reg["step_median_s"], unreg["step_median_s"]
        out.append(f"| DeepSpeed ({reg['_call']}, {unreg['_call']}) | {r:.3f} | {u:.3f} | {u / r:.2f}x | {u - r:.3f} |")
    elif reg:
        r = reg["step_median_s"]
        out.append(f"| DeepSpeed ({reg['_call']}) | {r:.3f} | | | |")
    for t in c["tool"]:
        tr, tu = tool_median(t, "registered"), tool_median(t, "unregistered")
        row = f"| tool `{t['_file']}` | {tr:.3f}"
        if reg:
            row += f" ({pct(tr, reg['step_median_s'])})"
        row += f" | {tu:.3f}"
        if unreg:
            row += f" ({pct(tu, unreg['step_median_s'])})"
        row += f" | {tu / tr:.2f}x"
        if reg and unreg:
            row += f" ({pct(tu / tr, unreg['step_median_s'] / reg['step_median_s'])})"
        row += f" | {tu - tr:.3f}"
        if reg and unreg:
            row += f" ({pct(tu - tr, unreg['step_median_s'] - reg['step_median_s'])})"
        out.append(row + " |")
    out.append("")
    out.append("Percentages: the tool against DeepSpeed (targets: each arm within +-20 %, speedup within "
               "+-10 %, seconds saved within +-15 %).")
    return out


def ms(x):
    return f"{x * 1e3:.0f}"


def account(name, arm, d, tool):
    h = d.get("hook_timers")
    if not h:
        return []
    fn = h["functions"]
    own = lambda k: fn.get(k, {}).get("own_ms", 0.0) / 1e3
    calls = lambda k: fn.get(k, {}).get("calls", 0)
    per = lambda k: fn.get(k, {}).get("own_us_per_call", 0.0)
    # The account is of the hook-timer step (one un-profiled step after the timed ones), so
    # that its rows add up to one measured step; the timed median stands beside it.
    step = h["step_s"]
    opt = h["optimizer_s"]
    fb = h["forward_issue_s"] + h["backward_issue_s"]
    rows = [f"#### {name}, {arm}: one DeepSpeed step, {ms(step)} ms (timed steps: median {ms(d['step_median_s'])} ms)",
            "", "| row | ms | how it was measured |", "|---|---|---|",
            f"| optimizer step (`engine.step()` and the final sync) | {ms(opt)} | wall clock |",
            f"| forward + backward (issue time; device work left over runs into the optimizer step's sync) | {ms(fb)} | wall clock |"]
    hooks = 0.0
    eager = d.get("eager")
    if eager:
        e = eager["forward_backward_median_s"]
        rows.append(f"| - the model alone, no DeepSpeed (transformers' Python, PyTorch's dispatch, launches, kernels; "
                    f"parameters resident in bf16) | {ms(e)} | eager baseline, median of {len(eager['forward_backward_s'])} |")
    for k, what in (("fetch_sub_module", "parameter coordinator: fetch (H2D issue, waits, bookkeeping)"),
                    ("release_sub_module", "parameter coordinator: release"),
                    ("grad_hook_reduce", "gradient hook per parameter (bucket, D2H/H2D copies, casts)"),
                    ("grad_epilogue", "end of backward: last bucket flush and its waits"),
                    ("pre_forward", "module hooks' own Python: pre-forward"),
                    ("post_forward", "post-forward"), ("pre_backward", "pre-backward"),
                    ("post_backward", "post-backward")):
        if k in fn:
            hooks += own(k)
            rows.append(f"| - DeepSpeed: {what} | {ms(own(k))} | {calls(k)} calls, {per(k):.0f} us each (hook timers) |")
    if eager:
        rest = fb - eager["forward_backward_median_s"] - hooks
        rows.append(f"| - rest: DeepSpeed's per-module autograd Functions and output walks, waits outside its hooks | "
                    f"{ms(rest)} | forward + backward - the rows above |")
    prof = d.get("profile") or {}
    acc = prof.get("host_account")
    if acc:
        rows.append("")
        rows.append("Profiled step (torch.profiler, no Python tracer; the profiler lengthens forward and backward), "
                    "exclusive host rows per phase, ms:")
        rows.append("")
        keys = []
        for p in acc.values():
            for k in p["rows_ms"]:
                if k not in keys:
                    keys.append(k)
        rows.append("| row | " + " | ".join(acc) + " |")
        rows.append("|---|" + "---|" * len(acc))
        rows.append("| wall | " + " | ".join(f"{p['wall_ms']:.0f}" for p in acc.values()) + " |")
        for k in keys:
            rows.append(f"| {k} | " + " | ".join(
                f"{p['rows_ms'].get(k, 0):.0f}" + (f" ({p['calls'][k]})" if k in p["calls"] else "")
                for p in acc.values()) + " |")
        kern = prof.get("kernels", {})
        if kern:
            rows.append("")
            rows.append("Kernels: " + ", ".join(f"{p} {v['total']} ({v['gpu_ms']:.1f} ms GPU)" for p, v in kern.items())
                        + (f"; the model alone: forward {eager['kernels']['forward']['total']} "
                           f"({eager['kernels']['forward']['gpu_ms']:.1f} ms), backward "
                           f"{eager['kernels']['backward']['total']} ({eager['kernels']['backward']['gpu_ms']:.1f} ms)"
                           if eager and "kernels" in eager else "") + ".")
        passes = {}
        for p, v in acc.items():
            for k, x in v["cpu_passes"].items():
                if not k.startswith("autograd::") and not k.startswith("torch::autograd"):
                    passes[f"{p} {k}"] = x
        if passes:
            rows.append("CPU passes of 1 ms or more: " + ", ".join(
                f"{k} x{v['count']} {v['ms']:.0f} ms" for k, v in passes.items()) + ".")
    if tool:
        t = tool[0]
        tarm = "registered" if arm == "registered" else "unregistered"
        ph = t[tarm]["phases"]
        rows.append("")
        rows.append(f"The tool's plan, same case (`{t['_file']}`, {tarm}, median ms per phase, host / device): " +
                    ", ".join(f"{k} {ms(v.get('host_s') or 0)} / {ms(v.get('device_s') or 0)}"
                              for k, v in ph.items()) +
                    f"; step {ms(tool_median(t, tarm))} ms.")
    rows.append("")
    return rows


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    cases = load_cases(root)
    out = ["## Side by side", ""]
    for name, c in cases.items():
        out += side_by_side(name, c) + [""]
    out += ["## Accounts", ""]
    for name, c in cases.items():
        for arm, d in c["ds"].items():
            out += account(name, arm, d, c["tool"])
    print("\n".join(out))


if __name__ == "__main__":
    main()
