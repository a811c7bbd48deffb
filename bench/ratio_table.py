#!/usr/bin/env python3
"""The partial-offload table of issue 38 (ds_config offload_optimizer.ratio): DeepSpeed 0.19.8
(bench/deepspeed/harness.py --offload-ratio, its DSREF lines) beside the tool
(zero3-offload-bench --offload-ratio, its --json documents), per shape, ratio and arm.

    python3 bench/ratio_table.py PATH... [--json OUT]

PATH: a folder (searched recursively), a file (*.txt / *.jsonl with DSREF= lines, or a tool
--json document), or a .tar.gz of them (bench/h200-ratio.sh's r.tar.gz). Needs no GPU.

Columns: DeepSpeed's sub-groups on the GPU (of all; elements), the median step of each side
(DSREF step_median_s; the tool's step_stats.median, else step_avg_s), tool / DeepSpeed, the
device peak (DSREF gpu_peak_gb, the steps only, / gpu_peak_with_init_gb where recorded; the
tool's gpu_peak_gb, set-up included), the locked bytes (DSREF pins.locked_bytes; the tool's
locked_bytes) and, for each side, the step's change from the next larger ratio of the same
shape and arm. Several runs of one (shape, ratio, arm) give the median of their medians.
The tool's arm `unregistered` is DeepSpeed's `pinned-unregistered`. A tool document's ratio is
read from its sweep entry's, workload's or arm's `offload_ratio`, else from the `--offload-ratio`
of the command line that its NAME.txt starts with (a comma list: one value per sweep entry in
order). Exit 0 with a table, 2 when nothing was found.
"""
import argparse
import json
import os
import re
import statistics
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dsref as dsref_lines  # noqa: E402  (bench/dsref.py: the DSREF line's one reader)

# tool arm -> DeepSpeed arm (both sides' names as they appear)
ARM_PAIRS = (("registered", "registered"), ("unregistered", "pinned-unregistered"), ("pageable", "pageable"))
TOOL_TO_DS = dict(ARM_PAIRS)


def model_name(model):
    """'synthetic-h4096-l8' stays; a config path or a built-in name becomes its base name."""
    base = os.path.basename(str(model).rstrip("/"))
    if base == "config.json":
        base = os.path.basename(os.path.dirname(str(model).rstrip("/")))
    return base[:-len(".json")] if base.endswith(".json") else base


def shape_of(model, batch, seq):
    return f"{model_name(model)} b{batch} s{seq}"


# ------------------------------------------------------------------------------------------
# Reading: every (name, text) of the paths given
# ------------------------------------------------------------------------------------------
def texts(paths):
    for p in paths:
        if os.path.isdir(p):
            for d, _, files in sorted(os.walk(p)):
                for f in sorted(files):
                    full = os.path.join(d, f)
                    if f.endswith((".tar.gz", ".tgz")):
                        yield from tar_texts(full)
                    elif f.endswith((".txt", ".jsonl", ".json", ".log")):
                        yield full, read(full)
        elif p.endswith((".tar.gz", ".tgz")):
            yield from tar_texts(p)
        else:
            yield p, read(p)


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def tar_texts(path):
    with tarfile.open(path) as t:
        for m in t.getmembers():
            if m.isfile() and m.name.endswith((".txt", ".jsonl", ".json", ".log")):
                yield f"{path}:{m.name}", t.extractfile(m).read().decode(errors="replace")


def collect(paths):
    """([DSREF dict], [(name, tool document)], {stem: first line of NAME.txt})."""
    dsref, seen, tool_docs, commands = [], set(), [], {}
    for name, text in texts(paths):
        if name.endswith(".json"):
            try:
                doc = json.loads(text)
            except ValueError:
                continue
            if isinstance(doc, dict) and is_tool_document(doc):
                tool_docs.append((name, doc))
            continue
        first = text.split("\n", 1)[0]
        if name.endswith(".txt") and first.startswith("$ "):
            commands[name[:-len(".txt")]] = first
        for d in dsref_lines.parse(text):
            key = json.dumps(d, sort_keys=True)
            if key not in seen:  # the same record in two files (NAME.ds.txt, dsref.jsonl) counts once
                seen.add(key)
                dsref.append(d)
    return dsref, tool_docs, commands


def is_tool_document(doc):
    return "workload" in doc and any(isinstance(doc.get(a), dict) for a in TOOL_TO_DS)


# ------------------------------------------------------------------------------------------
# Points: (shape, ratio, arm) -> values
# ------------------------------------------------------------------------------------------
def ds_points(dsref):
    out = {}
    for d in dsref:
        arm = d.get("arm")
        ratio = float(d.get("offload_ratio", 1.0))  # lines made before --offload-ratio: 1.0
        key = (shape_of(d.get("model"), d.get("batch"), d.get("seq")), ratio, arm)
        pins = d.get("pins") or {}
        out.setdefault(key, []).append({
            "step": d.get("step_median_s"),
            "peak": d.get("gpu_peak_gb"),
            "peak_init": d.get("gpu_peak_with_init_gb"),
            "locked": pins.get("locked_bytes"),
            "on_device": d.get("sub_groups_on_device"),
            "sub_groups": d.get("num_sub_groups"),
            "numel_on_device": d.get("sub_group_numel_on_device"),
        })
    return out


def command_ratios(command):
    m = re.search(r"--offload-ratio[= ]+([0-9.eE+-]+(?:,[0-9.eE+-]+)*)", command or "")
    return [float(x) for x in m.group(1).split(",")] if m else None


def tool_ratio(entry, workload, arm, from_command, index):
    for src in (entry or {}, workload, arm):
        if src.get("offload_ratio") is not None:
            return float(src["offload_ratio"])
    if from_command:
        if len(from_command) == 1:
            return from_command[0]
        if index is not None and index < len(from_command):
            return from_command[index]
    return None


def tool_points(tool_docs, commands):
    out = {}
    for name, doc in tool_docs:
        wl = doc.get("workload") or {}
        stem = name[:-len(".json")]
        from_command = command_ratios(commands.get(stem))
        sweep = doc.get("sweep") or []
        with_arms = [e for e in sweep if any(isinstance(e.get(a), dict) for a in TOOL_TO_DS)]
        if with_arms:  # a sweep: each entry holds its own (compact) arms
            configs = [(i, e, {a: e[a] for a in TOOL_TO_DS if isinstance(e.get(a), dict)})
                       for i, e in enumerate(with_arms)]
        else:  # one configuration: the top-level arms
            configs = [(None, sweep[0] if sweep else {}, {a: doc[a] for a in TOOL_TO_DS if isinstance(doc.get(a), dict)})]
        for index, entry, arms in configs:
            for arm_name, a in arms.items():
                if a.get("ok") is False:
                    continue
                ratio = tool_ratio(entry, wl, a, from_command, index)
                model = wl.get("model", a.get("model"))
                key = (shape_of(model, wl.get("batch", a.get("batch")), wl.get("seq", a.get("seq"))), ratio,
                       TOOL_TO_DS[arm_name])
                stats = a.get("step_stats") or {}
                out.setdefault(key, []).append({
                    "step": stats.get("median", a.get("step_avg_s")),
                    "peak": a.get("gpu_peak_gb"),
                    "locked": a.get("locked_bytes"),
                })
    return out


def med(runs, field):
    vals = [r[field] for r in runs if r.get(field) is not None]
    return statistics.median(vals) if vals else None


# ------------------------------------------------------------------------------------------
# The table
# ------------------------------------------------------------------------------------------
def rows(ds, tool):
    keys = set(ds) | set(tool)
    arm_order = {ds_arm: i for i, (_, ds_arm) in enumerate(ARM_PAIRS)}

    def sort_key(k):
        shape, ratio, arm = k
        return (shape, arm_order.get(arm, 9), arm, -(ratio if ratio is not None else -1))

    out, prev = [], {}
    for k in sorted(keys, key=sort_key):
        shape, ratio, arm = k
        d, t = ds.get(k, []), tool.get(k, [])
        r = {"shape": shape, "ratio": ratio, "arm": arm, "ds_runs": len(d), "tool_runs": len(t),
             "ds_step_s": med(d, "step"), "tool_step_s": med(t, "step"),
             "ds_peak_gb": med(d, "peak"), "ds_peak_with_init_gb": med(d, "peak_init"),
             "tool_peak_gb": med(t, "peak"), "ds_locked_bytes": med(d, "locked"),
             "tool_locked_bytes": med(t, "locked"), "ds_on_device": med(d, "on_device"),
             "ds_sub_groups": med(d, "sub_groups"), "ds_numel_on_device": med(d, "numel_on_device")}
        r["tool_over_ds"] = (r["tool_step_s"] / r["ds_step_s"]
                             if r["ds_step_s"] and r["tool_step_s"] is not None else None)
        p = prev.get((shape, arm)) if ratio is not None else None
        r["vs_ratio"] = p["ratio"] if p else None
        for side in ("ds", "tool"):
            now, before = r[f"{side}_step_s"], p[f"{side}_step_s"] if p else None
            r[f"{side}_step_change"] = now / before - 1 if now is not None and before else None
        if ratio is not None:
            prev[(shape, arm)] = r
        out.append(r)
    return out


def ratio_text(r):
    return "?" if r is None else repr(float(r))  # 1.0, 0.5, 0.25


def f(v, fmt):
    return "—" if v is None else format(v, fmt)


def gb(v):
    return "—" if v is None else f"{v / 1e9:.2f}"


def pct(v):
    return "—" if v is None else f"{v * 100:+.1f} %"


def markdown(table):
    L = ["| shape | ratio | arm | DS sub-groups on GPU | DS step (s) | tool step (s) | tool / DS | "
         "DS peak: steps / +init (GB) | tool peak (GB) | DS locked (GB) | tool locked (GB) | "
         "DS step vs ratio before | tool step vs ratio before |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        on = "—"
        if r["ds_sub_groups"] is not None and r["ds_on_device"] is not None:
            on = f"{r['ds_on_device']:g} of {r['ds_sub_groups']:g}"
            if r["ds_numel_on_device"]:
                on += f" ({r['ds_numel_on_device'] / 1e9:.2f} B el.)"
        peak = f"{f(r['ds_peak_gb'], '.2f')} / {f(r['ds_peak_with_init_gb'], '.2f')}"
        vs = f" (vs {ratio_text(r['vs_ratio'])})" if r["vs_ratio"] is not None else ""
        runs = ""
        if r["ds_runs"] > 1 or r["tool_runs"] > 1:
            runs = f" [runs {r['ds_runs']}/{r['tool_runs']}]"
        L.append(f"| {r['shape']} | {ratio_text(r['ratio'])} | {r['arm']}{runs} | "
                 f"{on} | {f(r['ds_step_s'], '.3f')} | {f(r['tool_step_s'], '.3f')} | {f(r['tool_over_ds'], '.2f')} | "
                 f"{peak} | {f(r['tool_peak_gb'], '.2f')} | {gb(r['ds_locked_bytes'])} | "
                 f"{gb(r['tool_locked_bytes'])} | {pct(r['ds_step_change'])}{vs if r['ds_step_change'] is not None else ''} | "
                 f"{pct(r['tool_step_change'])}{vs if r['tool_step_change'] is not None else ''} |")
    return "\n".join(L) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="folders, files or .tar.gz holding DSREF lines and tool --json files")
    ap.add_argument("--json", metavar="OUT", help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    dsref, tool_docs, commands = collect(args.paths)
    table = rows(ds_points(dsref), tool_points(tool_docs, commands))
    if not table:
        print(f"ratio_table: no DSREF line and no tool document under {' '.join(args.paths)}", file=sys.stderr)
        return 2
    sys.stdout.write(markdown(table))
    if any(r["ratio"] is None for r in table):
        print("\nratio '?': a tool document without offload_ratio and without a NAME.txt command line "
              "giving --offload-ratio.")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(table, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
