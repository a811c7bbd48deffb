#!/usr/bin/env python3
"""Real-DeepSpeed reference for zero3-offload-bench.

Runs the synthetic model of shared/REFERENCE.md section 2 under the real DeepSpeed
engine (ZeRO stage 3, bf16, offload_optimizer + offload_param to the CPU, AdamW through
DeepSpeedCPUAdam) on one GPU, one rank, and times each step. Three arms differ only in
how the host buffers are held (every arm runs with DS_PIN_MEMORY_BACKEND=native):

    registered           pin_memory true,  DS_PIN_MEMORY_REGISTER_DEVICE=1 (mlock + cudaHostRegister)
    pinned-unregistered  pin_memory true,  DS_PIN_MEMORY_REGISTER_DEVICE=0 (mlock only)
    pageable             pin_memory false

The parent runs each arm in its own subprocess (fresh CUDA context, fresh rendezvous port)
and prints one `DSREF={json}` line per arm on stdout; progress goes to stderr.

`--ranks N` runs each arm as N data-parallel ranks (ZeRO-3 partitions over N, NCCL), rank r
on the token ids of seed + r as the tool's `--gpus N`; on a machine with fewer GPUs than N
the ranks share GPU 0, each claiming a host of its own (NCCL_HOSTID, NCCL over loopback
sockets), exactly as the tool's ZOB_TEST_SHARE_DEVICE=1 does, so the two compare like with
like there. Rank 0's timings are reported (every step ends in collectives).

`--offload-ratio R` writes ds_config `zero_optimization.offload_optimizer.ratio` (partial
offload): DeepSpeed keeps sub-group i of the optimizer on the GPU, updated by torch.optim.AdamW,
when i < int((1 - R) * sub-groups), the rest on the CPU (DeepSpeedCPUAdam). Each DSREF line
records the ratio and the engine's sub-groups (element counts, device of each).

`--profile` runs one arm, then one more step under torch.profiler, and writes a per-phase
account of that step (copies, synchronisations, long CPU ops, kernels) that the C++ tool's
`--schedule deepspeed` imitates. See bench/deepspeed/README.md.

Needs CUDA and DeepSpeed 0.19.8 (bench/deepspeed/install-offline); the analysis of a saved
trace (`--analyze TRACE.json[.gz]`) needs neither.
"""

import argparse
import bisect
import contextlib
import gzip
import json
import math
import re
import os
import socket
import statistics
import subprocess
import sys
import time

ARMS = {
    # arm: (pin_memory in ds_config, DS_PIN_MEMORY_REGISTER_DEVICE)
    "registered": (True, "1"),
    "pinned-unregistered": (True, "0"),
    "pageable": (False, "0"),
}
DEFAULT_ARMS = "registered,pinned-unregistered,pageable"
PHASES = ("forward", "backward", "optimizer_step")


def log(msg):
    print(f"[ds-ref] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------
# Deterministic data, the same as the C++ tool's src/model/model.cpp (counter-based
# splitmix64 hashes of (seed, stream, index)), so that losses can be compared with it.
# --------------------------------------------------------------------------------------
MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
PARAM_STREAM = 0x5041524D53  # "PARMS"
TOKEN_STREAM = 0x544F4B454E53  # "TOKENS"
MIX_C1 = 0xBF58476D1CE4E5B9
MIX_C2 = 0x94D049BB133111EB


def mix64(z):
    z &= MASK64
    z = ((z ^ (z >> 30)) * MIX_C1) & MASK64
    z = ((z ^ (z >> 27)) * MIX_C2) & MASK64
    return z ^ (z >> 31)


def counter_hash(seed, stream, index):
    return mix64(mix64(seed ^ stream) + (index + 1) * GOLDEN)


def token_ids(tokens, vocab, seed):
    return [counter_hash(seed, TOKEN_STREAM, t) % vocab for t in range(tokens)]


def param_layout(vocab, hidden, layers):
    """[(name, rows, cols, fan_in, offset)] in the tool's flat order (row-major tensors)."""
    h, f = hidden, 4 * hidden
    out, off = [], 0

    def add(name, rows, cols, fan_in):
        nonlocal off
        out.append((name, rows, cols, fan_in, off))
        off += rows * cols

    add("emb.weight", vocab, h, h)
    for i in range(layers):
        add(f"blocks.{i}.fc1.weight", f, h, h)
        add(f"blocks.{i}.fc1.bias", 1, f, h)
        add(f"blocks.{i}.fc2.weight", h, f, f)
        add(f"blocks.{i}.fc2.bias", 1, h, f)
    add("head.weight", vocab, h, h)
    return out, off


def param_value_ref(seed, index, fan_in):
    """One initial weight, in pure Python (double, then rounded to float32 on use)."""
    u = (counter_hash(seed, PARAM_STREAM, index) >> 40) * (1.0 / 16777216.0)
    return (1.0 / math.sqrt(fan_in)) * (2.0 * u - 1.0)


def _signed(v):
    v &= MASK64
    return v - (1 << 64) if v >= (1 << 63) else v


def param_values_torch(torch, seed, offset, count, fan_in, device):
    """The same values as param_value_ref for indices [offset, offset+count), as float32.

    int64 arithmetic wraps modulo 2**64 like the tool's uint64; logical right shifts are
    arithmetic shifts masked to the low (64 - k) bits."""
    def lsr(z, k):
        return (z >> k) & ((1 << (64 - k)) - 1)

    a = _signed(mix64(seed ^ PARAM_STREAM))
    idx = torch.arange(offset + 1, offset + count + 1, dtype=torch.int64, device=device)
    z = idx * _signed(GOLDEN) + a
    z = (z ^ lsr(z, 30)) * _signed(MIX_C1)
    z = (z ^ lsr(z, 27)) * _signed(MIX_C2)
    z = z ^ lsr(z, 31)
    u = lsr(z, 40).to(torch.float64) * (1.0 / 16777216.0)
    return ((1.0 / math.sqrt(fan_in)) * (2.0 * u - 1.0)).to(torch.float32)


# --------------------------------------------------------------------------------------
# The model (REFERENCE.md section 2)
# --------------------------------------------------------------------------------------
def build_model(torch, vocab, hidden, layers):
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(hidden, 4 * hidden, bias=True)
            self.fc2 = nn.Linear(4 * hidden, hidden, bias=True)

        def forward(self, x):
            return x + self.fc2(F.gelu(self.fc1(x)))  # gelu: erf form (approximate='none')

    class Synthetic(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(vocab, hidden)
            self.blocks = nn.ModuleList([Block() for _ in range(layers)])
            self.head = nn.Linear(hidden, vocab, bias=False)

        def forward(self, ids):
            x = self.emb(ids)
            for b in self.blocks:
                x = b(x)
            logits = self.head(x)
            # loss = sum of all logits. Summed with an fp32 accumulator and result so the
            # reported value keeps its digits; the gradient is the same (all ones).
            return logits.sum(dtype=torch.float32)

    return Synthetic()


def build_hf_model(torch, config_path, attn):
    """A Hugging Face causal LM built from a local config.json with random weights (the
    upstream script's --model, without the network). Returns (model, name, vocab). The
    forward returns the sum of the logits as the synthetic model does, so both sides of a
    side-by-side train the same loss."""
    from transformers import AutoConfig, AutoModelForCausalLM
    path = config_path
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    with open(path) as f:
        raw = json.load(f)
    cfg = AutoConfig.for_model(raw.pop("model_type"), **raw)
    inner = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)

    class LogitSum(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm = inner

        def forward(self, ids):
            return self.lm(input_ids=ids, use_cache=False).logits.sum(dtype=torch.float32)

    return LogitSum(), config_path, cfg.vocab_size


def init_like_tool(torch, model, vocab, hidden, layers, seed):
    """Fill the parameters with the C++ tool's initial values; self-check a few against
    the pure-Python reference. Returns a description of the init used."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    layout, total = param_layout(vocab, hidden, layers)
    params = dict(model.named_parameters())
    assert sum(p.numel() for p in params.values()) == total, "layout does not match the model"
    import struct
    chunk = 1 << 24
    with torch.no_grad():
        for name, rows, cols, fan_in, off in layout:
            p = params[name]
            flat = p.data.view(-1)
            n = rows * cols
            for s in range(0, n, chunk):
                c = min(chunk, n - s)
                flat[s:s + c].copy_(param_values_torch(torch, seed, off + s, c, fan_in, device))
            for i in (0, 1, 2, n // 2, n - 1):
                want = struct.unpack("f", struct.pack("f", param_value_ref(seed, off + i, fan_in)))[0]
                got = float(flat[i])
                if got != want:
                    raise RuntimeError(f"tool-init self-check failed at {name}[{i}]: {got!r} != {want!r}")
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return "tool"


# --------------------------------------------------------------------------------------
# Child: one arm
# --------------------------------------------------------------------------------------
def ds_config(batch, pin, offload_param=True, offload_ratio=None):
    """The arm's ds_config. offload_ratio None leaves `offload_optimizer.ratio` out (DeepSpeed's
    default 1.0: every sub-group on the CPU); a number writes it, 1.0 included."""
    offload_optimizer = {"device": "cpu", "pin_memory": pin}
    if offload_ratio is not None:
        # partial offload: DeepSpeed keeps sub-group i on the GPU (stepped by torch.optim.AdamW)
        # when i < int((1 - ratio) * sub-groups); see sub_group_devices
        offload_optimizer["ratio"] = float(offload_ratio)
    return {
        "train_micro_batch_size_per_gpu": batch,
        "gradient_accumulation_steps": 1,
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
        "bf16": {"enabled": True},
        "optimizer": {
            "type": "AdamW",
            "params": {"lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0},
        },
        "zero_optimization": {
            "stage": 3,
            # sub_group_size left at DeepSpeed's default (1e9 elements)
            "offload_optimizer": offload_optimizer,
            # --no-offload-param: the tool's copy_back loop (parameters stay on the device)
            **({"offload_param": {"device": "cpu", "pin_memory": pin}} if offload_param else {}),
        },
    }


# DeepSpeed 0.19.8's zero_optimization.sub_group_size default (runtime/zero/config.py)
DEFAULT_SUB_GROUP_SIZE = 1_000_000_000


def sub_group_split(numels, sub_group_size=DEFAULT_SUB_GROUP_SIZE):
    """Element counts of the ZeRO-3 sub-groups of one parameter group whose parameters have
    these (partition) element counts, in order: DeepSpeed 0.19.8's _create_fp16_sub_groups
    (stage3.py): one sub-group when the group is no larger than sub_group_size, else
    parameters are taken in order and a sub-group closes at the first parameter that brings
    it to sub_group_size or more (and at the last parameter)."""
    numels = [int(n) for n in numels]
    if not numels or sub_group_size is None or sub_group_size >= sum(numels):
        return [sum(numels)] if numels else []
    out, cur = [], 0
    for i, n in enumerate(numels):
        cur += n
        if cur >= sub_group_size or i == len(numels) - 1:
            out.append(cur)
            cur = 0
    return out


def sub_group_devices(count, ratio, device="cuda"):
    """Where DeepSpeed 0.19.8 keeps each sub-group's fp32 master, gradient and Adam states with
    offload_optimizer.ratio (stage3.py, subgroup_to_device): sub-group i is on the accelerator
    when i < int((1 - ratio) * count), else on the CPU. The expression is DeepSpeed's own, float
    rounding included (ratio 0.9 of 10 sub-groups: int(0.9999999999999998) = 0 on the device)."""
    on_device = int((1 - ratio) * count)
    return [device if i < on_device else "cpu" for i in range(count)]


def sub_group_record(optimizer, ratio, param_numels=None, world=1):
    """The sub-groups of the engine's ZeRO-3 optimizer as DSREF keys: their element counts
    (fp16_partitioned_groups_flat_numel), where each one lives (subgroup_to_device), and whether
    both agree with sub_group_split / sub_group_devices (param_numels: the model's parameter
    element counts before deepspeed.initialize, in model.parameters() order)."""
    numel = [int(n) for n in getattr(optimizer, "fp16_partitioned_groups_flat_numel", None) or []]
    s2d = getattr(optimizer, "subgroup_to_device", None)
    devices = [str(s2d.get(i)) for i in range(len(numel))] if isinstance(s2d, dict) else None
    backup = getattr(optimizer, "backup_optimizer", None)
    size = getattr(optimizer, "sub_group_size", None)
    rec = {
        "num_sub_groups": len(numel),
        "sub_group_numel": numel,
        # None where the optimizer has no subgroup_to_device (no offload_optimizer)
        "sub_group_device": devices,
        "sub_groups_on_device": sum(d != "cpu" for d in devices) if devices is not None else None,
        "sub_group_numel_on_device": (sum(n for n, d in zip(numel, devices) if d != "cpu")
                                      if devices is not None else None),
        "sub_group_size": int(size) if size is not None else None,
        "partial_offload": getattr(optimizer, "partial_offload", None),
        # torch.optim.AdamW for the device sub-groups; None at ratio 1.0 (DeepSpeed makes none)
        "backup_optimizer": type(backup).__name__ if backup is not None else None,
    }
    if devices is not None:
        rec["sub_group_device_matches_formula"] = devices == sub_group_devices(len(numel), ratio, "cuda")
    if param_numels is not None and size is not None and len(set(
            getattr(optimizer, "sub_group_to_group_id", {0: 0}).values())) <= 1:
        # one parameter group (the harness's); rank r's partition of each parameter is ceil(n / world)
        parts = [-(-int(n) // world) for n in param_numels]
        rec["sub_group_numel_matches_formula"] = numel == sub_group_split(parts, int(size))
    return rec


def pin_accounting():
    """What DeepSpeed's native pin manager holds: locked bytes, registered buffers."""
    try:
        from deepspeed.utils import pin_memory as pm
    except Exception:
        return {}
    m = getattr(pm, "_shared_native_pins", None)
    if m is None:
        return {"native_pins": None}
    locked = sum(end - begin for begin, end in m._ranges.items())
    reg = [b for b in m._device_registered]
    reg_bytes = sum(m._ranges.get(b, b) - b for b in reg)
    sizes = {}
    for begin, end in m._ranges.items():
        sizes[end - begin] = sizes.get(end - begin, 0) + 1
    return {"locked_buffers": len(m._ranges), "locked_bytes": locked,
            "registered_buffers": len(reg), "registered_bytes": reg_bytes,
            # buffer size in bytes -> how many (the same for locked and registered here)
            "locked_sizes": {str(k): v for k, v in sorted(sizes.items(), reverse=True)}}


def run_child(args):
    arm = args.child
    pin, _ = ARMS[arm]
    t_start = time.perf_counter()
    import torch
    import deepspeed
    if not torch.cuda.is_available():
        raise SystemExit("ds-ref: CUDA is not available; DeepSpeed's CPU offload reference needs a GPU")
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if args.memory_history:
        # From the start, so every block live at the step's peak has its allocation's frames.
        torch.cuda.memory._record_memory_history(max_entries=4_000_000, context="all", stacks="python")
    if args.device_memory is not None:
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
        if args.device_memory > total:
            raise SystemExit(f"ds-ref: --device-memory {args.device_memory} B exceeds the device's "
                             f"{total} B; give at most that")
        # The allocator refuses a cudaMalloc that would take its reserved bytes past this (after
        # freeing its cached segments), as a GPU of that size would.
        torch.cuda.set_per_process_memory_fraction(args.device_memory / total)
    torch.manual_seed(args.seed)

    model_name = f"synthetic-h{args.hidden}-l{args.layers}"
    if args.model_config:
        model, model_name, args.vocab = build_hf_model(torch, args.model_config, args.attn)
    else:
        model = build_model(torch, args.vocab, args.hidden, args.layers)
    params = sum(p.numel() for p in model.parameters())
    init = "torch-default"
    if args.init == "tool" and not args.model_config:
        init = init_like_tool(torch, model, args.vocab, args.hidden, args.layers, args.seed)

    eager = None
    if args.eager_baseline:
        import account
        ids_cpu = torch.tensor(token_ids(args.batch * args.seq, args.vocab, args.seed + rank),
                               dtype=torch.long).view(args.batch, args.seq)
        eager = account.eager_baseline(
            torch, model, ids_cpu, args.warmup, args.steps,
            os.path.join(args.profile_out, f"trace-eager-{arm}.json") if args.profile else None, log)
        torch.cuda.reset_peak_memory_stats()

    # element counts in model.parameters() order (tied tensors once), for the sub-group check
    param_numels = [p.numel() for p in model.parameters()]
    config = ds_config(args.batch, pin, args.offload_param, args.offload_ratio)
    engine, optimizer, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=config)
    inner = getattr(optimizer, "optimizer", None)
    opt_name = type(inner).__name__ if inner is not None else type(optimizer).__name__
    ratio = 1.0 if args.offload_ratio is None else args.offload_ratio
    sub_groups = sub_group_record(optimizer, ratio, param_numels, world)
    # Data parallel as the tool's --gpus N: rank r on the token ids of seed + r.
    ids = torch.tensor(token_ids(args.batch * args.seq, args.vocab, args.seed + rank),
                       dtype=torch.long).view(args.batch, args.seq).to(engine.device)
    torch.cuda.synchronize()
    init_s = time.perf_counter() - t_start
    # Memory through deepspeed.initialize (since the process started, or since --eager-baseline's
    # reset): the peaks, and what stays allocated once the engine is ready (with ratio < 1 the
    # device sub-groups' fp32 master, gradient and Adam states among it).
    init_mem = {"peak": torch.cuda.max_memory_allocated(), "reserved_peak": torch.cuda.max_memory_reserved(),
                "allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved()}
    log(f"{arm}: engine ready in {init_s:.1f} s ({opt_name}, {params} params, offload ratio {ratio}: "
        f"{sub_groups['sub_groups_on_device']} of {sub_groups['num_sub_groups']} sub-groups on the device "
        f"{sub_groups['sub_group_numel']} {sub_groups['sub_group_device']}, pins {pin_accounting()})")
    for k in ("sub_group_device_matches_formula", "sub_group_numel_matches_formula"):
        if sub_groups.get(k) is False:
            log(f"{arm}: WARNING: {k} is false: DeepSpeed's sub-groups are not what harness.py's "
                f"sub_group_split / sub_group_devices predict")
    if args.memory_history:
        import memory_peak  # the marker block memory_peak.py finds the step loop's start by
        marker = torch.empty(memory_peak.MARKER_BYTES, dtype=torch.uint8, device="cuda")
        del marker
    torch.cuda.reset_peak_memory_stats()

    steps_s, fwd_s, bwd_s, opt_s, losses = [], [], [], [], []
    total = args.warmup + args.steps
    for i in range(total):
        # --timing upstream (the default) is the upstream script's loop: one sync before
        # and one after the step, nothing inside it, so the phase split is the host's issue
        # time only. --timing phases adds a sync after forward and after backward.
        inner_sync = args.timing == "phases"
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = engine(ids)
        if inner_sync:
            torch.cuda.synchronize()
        t1 = time.perf_counter()
        engine.backward(loss)
        if inner_sync:
            torch.cuda.synchronize()
        t2 = time.perf_counter()
        engine.step()
        torch.cuda.synchronize()
        t3 = time.perf_counter()
        lv = float(loss.detach().float().item())
        losses.append(lv)
        tag = "warmup" if i < args.warmup else "step"
        log(f"{arm}: {tag} {i + 1}/{total}: {t3 - t0:.3f} s (fwd {t1 - t0:.3f} bwd {t2 - t1:.3f} "
            f"opt {t3 - t2:.3f}) loss {lv:.6g}")
        if i >= args.warmup:
            steps_s.append(t3 - t0)
            fwd_s.append(t1 - t0)
            bwd_s.append(t2 - t1)
            opt_s.append(t3 - t2)

    if args.memory_history:
        path = f"{args.memory_history}-{arm}.pickle"
        torch.cuda.memory._dump_snapshot(path)
        torch.cuda.memory._record_memory_history(enabled=None)
        log(f"{arm}: memory snapshot written to {path} (bench/deepspeed/memory_peak.py reads it)")
    result = {
        "arm": arm,
        "ranks": world,
        "deepspeed_version": deepspeed.__version__,
        "torch_version": torch.__version__,
        "model": model_name,
        "attn_implementation": args.attn if args.model_config else None,
        "params": params,
        "batch": args.batch,
        "seq": args.seq,
        "offload_param": args.offload_param,
        "steps": args.steps,
        "warmup": args.warmup,
        "step_avg_s": statistics.fmean(steps_s),
        "step_min_s": min(steps_s),
        "step_median_s": statistics.median(steps_s),
        "steps_s": steps_s,
        "forward_avg_s": statistics.fmean(fwd_s),
        "backward_avg_s": statistics.fmean(bwd_s),
        "optimizer_avg_s": statistics.fmean(opt_s),
        # peak of torch's allocator over warmup + timed steps (reset after initialize)
        "gpu_peak_gb": torch.cuda.max_memory_allocated() / 1e9,
        "loss_first": losses[0],
        "loss_last": losses[-1],
        # additions
        "pin_memory": pin,
        "register": (os.environ.get("DS_PIN_MEMORY_REGISTER_DEVICE") == "1") if pin else None,
        "pin_backend": os.environ.get("DS_PIN_MEMORY_BACKEND"),
        "vocab": args.vocab,
        "tokens_per_step": args.batch * args.seq,
        "seed": args.seed,
        "init": init,
        "losses": losses,
        "optimizer": opt_name,
        "device_name": torch.cuda.get_device_name(0),
        "init_s": init_s,
        "device_memory_bytes": args.device_memory,
        "pins": pin_accounting(),
        # partial offload (offload_optimizer.ratio) and the sub-groups it splits
        "offload_ratio": ratio,
        "offload_ratio_in_config": args.offload_ratio is not None,
        **sub_groups,
        # device memory beside gpu_peak_gb, 1e9 B: the caching allocator's reserved peak over the
        # steps; the peaks through deepspeed.initialize; allocated / reserved once it returned
        "gpu_reserved_peak_gb": torch.cuda.max_memory_reserved() / 1e9,
        "gpu_init_peak_gb": init_mem["peak"] / 1e9,
        "gpu_init_reserved_peak_gb": init_mem["reserved_peak"] / 1e9,
        "gpu_peak_with_init_gb": max(init_mem["peak"], torch.cuda.max_memory_allocated()) / 1e9,
        "gpu_after_init_allocated_gb": init_mem["allocated"] / 1e9,
        "gpu_after_init_reserved_gb": init_mem["reserved"] / 1e9,
        "ds_config": config,
    }

    result["timing"] = args.timing
    if eager is not None:
        result["eager"] = eager
    if args.account:
        import account
        result["hook_timers"] = account.hook_timers(torch, engine, ids, log)
    if args.profile:
        result["profile"] = profile_one_step(torch, engine, ids, args)
    result["wall_s"] = time.perf_counter() - t_start
    if rank == 0:
        print("DSREF=" + json.dumps(result), flush=True)


def profile_one_step(torch, engine, ids, args):
    from torch.profiler import ProfilerActivity, profile, record_function
    arm = args.child
    out = args.profile_out
    rank = int(os.environ.get("RANK", "0"))
    if rank != 0:  # every rank profiles the same step (collectives); rank 0's is the report
        out = f"{out}-rank{rank}"
    os.makedirs(out, exist_ok=True)
    trace_path = os.path.join(out, f"trace-{arm}.json")
    log(f"{arm}: profiling one step (with_stack={args.profile_stack}) ...")
    torch.cuda.synchronize()
    import account
    ranges = account.profile_ranges(torch, engine) if args.account else contextlib.nullcontext()
    with ranges, profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                         with_stack=args.profile_stack) as prof:
        # The harness's synchronize() calls sit between the ranges, so they are counted
        # in no phase; every sync inside a range is DeepSpeed's (or torch's) own.
        torch.cuda.synchronize()
        with record_function("forward"):
            loss = engine(ids)
        torch.cuda.synchronize()
        with record_function("backward"):
            engine.backward(loss)
        torch.cuda.synchronize()
        with record_function("optimizer_step"):
            engine.step()
        torch.cuda.synchronize()
    prof.export_chrome_trace(trace_path)
    with open(trace_path) as f:
        trace = json.load(f)
    report = analyze_trace(trace)
    report["host_account"] = account.host_account(trace)
    report["kernel_counts"] = account.kernel_counts(trace)
    report["arm"] = arm
    report["command"] = " ".join(sys.argv)
    json_path = os.path.join(out, f"profile-{arm}.json")
    text_path = os.path.join(out, f"profile-{arm}.txt")
    with open(json_path, "w") as f:
        json.dump(report, f, indent=1)
    with open(text_path, "w") as f:
        f.write(render_text(report))
        f.write(account.render_account(report["host_account"], f"{arm} (DeepSpeed step)"))
    with open(trace_path, "rb") as src, gzip.open(trace_path + ".gz", "wb", compresslevel=6) as dst:
        dst.write(src.read())
    os.remove(trace_path)
    log(f"{arm}: profile written: {text_path}, {json_path}, {trace_path}.gz")
    return {"text": text_path, "json": json_path, "trace": trace_path + ".gz",
            "phase_ms": {p: report["phases"][p]["cpu_ms"] for p in PHASES if p in report["phases"]},
            "host_account": report["host_account"],
            "kernels": {p: {"total": d["total"], "gpu_ms": d["gpu_ms"]} for p, d in report["kernel_counts"].items()}}


# --------------------------------------------------------------------------------------
# Trace analysis (pure Python over torch's Chrome trace; no torch needed)
# --------------------------------------------------------------------------------------
SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")


def _copy_kind(name):
    # "Memcpy HtoD (Pinned -> Device)" -> ("HtoD", "Pinned -> Device")
    direction = "?"
    for d in ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP"):
        if d in name:
            direction = d
    kind = name[name.find("(") + 1:name.rfind(")")] if "(" in name else ""
    return direction, kind


class _Enclosing:
    """Innermost event of a set (one thread) that contains a time point."""

    def __init__(self, events):
        self.by_tid = {}
        for e in events:
            self.by_tid.setdefault(e.get("tid"), []).append(e)
        self.starts = {}
        for tid, lst in self.by_tid.items():
            lst.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
            self.starts[tid] = [e["ts"] for e in lst]

    def find(self, tid, ts, max_back=4000):
        lst = self.by_tid.get(tid)
        if not lst:
            return None
        i = bisect.bisect_right(self.starts[tid], ts) - 1
        n = 0
        while i >= 0 and n < max_back:
            e = lst[i]
            if e["ts"] + e.get("dur", 0) >= ts:
                return e
            i -= 1
            n += 1
        return None


def _shapes(e):
    dims = (e.get("args") or {}).get("Input Dims")
    if dims is None:
        return None
    return [d for d in dims]


def _dtypes(e):
    types = (e.get("args") or {}).get("Input type")
    return [t.replace("c10::", "") for t in types] if types else None


_ADDR = re.compile(r" (?:object )?at 0x[0-9a-f]+")


def _clean_py(name):
    """'<built-in method copy_ of Tensor object at 0x7f..>' -> '<built-in method copy_ of Tensor>'."""
    return _ADDR.sub("", name)


def _is_frame_of_interest(name):
    # DeepSpeed's own code, the model's modules and this harness; not torch's call
    # machinery, DeepSpeed's NVTX wrapper or C built-ins.
    if name.startswith("deepspeed/utils/nvtx.py"):
        return False
    return name.startswith("deepspeed/") or name.startswith("nn.Module:") or name.startswith("harness.py")


def analyze_trace(trace):
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    xs = [e for e in events if e.get("ph") == "X" and "ts" in e]
    for e in xs:
        e["ts"] = float(e["ts"])
        e["dur"] = float(e.get("dur", 0) or 0)

    ranges = {}
    for e in xs:
        if e.get("cat") == "user_annotation" and e.get("name") in PHASES:
            ranges[e["name"]] = (e["ts"], e["ts"] + e["dur"])
    missing = [p for p in PHASES if p not in ranges]
    if missing:
        raise ValueError(f"trace lacks the record_function ranges {missing}")
    t0 = ranges["forward"][0]
    t_end = ranges["optimizer_step"][1]

    def phase_at(ts):
        for p, (a, b) in ranges.items():
            if a <= ts <= b:
                return p
        return "outside"

    def rel(ts):
        return round(ts - t0, 1)

    cat = lambda e: e.get("cat", "")
    runtime = [e for e in xs if cat(e) in ("cuda_runtime", "cuda_driver")]
    cpu_ops = [e for e in xs if cat(e) == "cpu_op"]
    pyfuncs = [e for e in xs if cat(e) == "python_function"]
    kernels = [e for e in xs if cat(e) == "kernel"]
    copies = [e for e in xs if cat(e) == "gpu_memcpy"]
    memsets = [e for e in xs if cat(e) == "gpu_memset"]
    launch_by_corr = {}
    for e in runtime:
        c = (e.get("args") or {}).get("correlation")
        if c is not None:
            launch_by_corr[c] = e
    enc_op = _Enclosing(cpu_ops)
    enc_py = _Enclosing([e for e in pyfuncs if _is_frame_of_interest(e["name"])])
    enc_builtin = _Enclosing([e for e in pyfuncs if e["name"].startswith("<built-in")])

    def launch_of(g):
        c = (g.get("args") or {}).get("correlation")
        return launch_by_corr.get(c)

    def gpu_phase(g):
        # A GPU event belongs to the phase whose range holds the CPU call that issued it
        # (a copy issued in backward and run later still counts for backward).
        lr = launch_of(g)
        return phase_at(lr["ts"]) if lr is not None else phase_at(g["ts"])

    def context(lr):
        ctx = {}
        if lr is None:
            return ctx
        op = enc_op.find(lr.get("tid"), lr["ts"])
        if op is not None:
            ctx["op"] = op["name"]
            sh = _shapes(op)
            if sh:
                ctx["op_shapes"] = sh
            ty = _dtypes(op)
            if ty:
                ctx["op_dtypes"] = ty
        py = enc_py.find(lr.get("tid"), lr["ts"])
        if py is not None:
            ctx["py"] = py["name"]
        bi = enc_builtin.find(lr.get("tid"), lr["ts"])
        if bi is not None:
            ctx["builtin"] = _clean_py(bi["name"])
        return ctx

    phases = {p: {"cpu_ms": round((b - a) / 1000, 3), "start_us": rel(a), "end_us": rel(b)}
              for p, (a, b) in ranges.items()}
    all_phases = list(PHASES) + ["outside"]

    # --- copies -------------------------------------------------------------------
    copy_rows = []
    for g in sorted(copies, key=lambda e: e["ts"]):
        a = g.get("args") or {}
        direction, kind = _copy_kind(g["name"])
        lr = launch_of(g)
        row = {"phase": gpu_phase(g), "dir": direction, "kind": kind,
               "bytes": int(a.get("bytes", 0) or 0), "stream": a.get("stream", g.get("tid")),
               "start_us": rel(g["ts"]), "dur_us": round(g["dur"], 1)}
        if lr is not None:
            row["call"] = lr["name"]
            row["call_us"] = round(lr["dur"], 1)
            row.update(context(lr))
        copy_rows.append(row)

    def group(rows):
        out = []
        for r in rows:
            key = (r["phase"], r["dir"], r["kind"], r["bytes"], r["stream"], r.get("call"),
                   r.get("op"), str(r.get("op_dtypes")), r.get("py"), r.get("builtin"))
            if out and out[-1]["_key"] == key:
                gr = out[-1]
                gr["count"] += 1
                gr["dur_us_total"] = round(gr["dur_us_total"] + r["dur_us"], 1)
                gr["call_us_total"] = round(gr["call_us_total"] + r.get("call_us", 0), 1)
                gr["end_us"] = round(r["start_us"] + r["dur_us"], 1)
            else:
                gr = {"_key": key, "count": 1, "phase": r["phase"], "dir": r["dir"],
                      "kind": r["kind"], "bytes_each": r["bytes"], "stream": r["stream"],
                      "start_us": r["start_us"], "end_us": round(r["start_us"] + r["dur_us"], 1),
                      "dur_us_total": r["dur_us"], "call": r.get("call"),
                      "call_us_total": r.get("call_us", 0), "op": r.get("op"),
                      "op_shapes": r.get("op_shapes"), "op_dtypes": r.get("op_dtypes"),
                      "py": r.get("py"), "builtin": r.get("builtin")}
                out.append(gr)
        for gr in out:
            del gr["_key"]
            gr["bytes_total"] = gr["bytes_each"] * gr["count"]
        return out

    copy_groups = group(copy_rows)
    for p in all_phases:
        per = {}
        for r in copy_rows:
            if r["phase"] != p:
                continue
            d = per.setdefault(r["dir"], {"count": 0, "bytes": 0, "gpu_us": 0.0, "kinds": {}})
            d["count"] += 1
            d["bytes"] += r["bytes"]
            d["gpu_us"] = round(d["gpu_us"] + r["dur_us"], 1)
            d["kinds"][r["kind"]] = d["kinds"].get(r["kind"], 0) + 1
        for d in per.values():
            d["gb_per_s"] = round(d["bytes"] / (d["gpu_us"] * 1e3), 2) if d["gpu_us"] > 0 else None
        # the same copies by what they are (direction, memory kind, size, stream, issuer),
        # in order of first appearance
        pattern = {}
        for r in copy_rows:
            if r["phase"] != p:
                continue
            key = (r["dir"], r["kind"], r["bytes"], str(r["stream"]), r.get("op"),
                   str(r.get("op_dtypes")), r.get("py"), r.get("builtin"))
            q = pattern.setdefault(key, {"dir": r["dir"], "kind": r["kind"], "bytes_each": r["bytes"],
                                         "stream": r["stream"], "count": 0, "gpu_us": 0.0, "call_us": 0.0,
                                         "op": r.get("op"), "op_dtypes": r.get("op_dtypes"),
                                         "py": r.get("py"), "builtin": r.get("builtin")})
            q["count"] += 1
            q["gpu_us"] = round(q["gpu_us"] + r["dur_us"], 1)
            q["call_us"] = round(q["call_us"] + r.get("call_us", 0), 1)
        if per or p != "outside":
            phases.setdefault(p, {})["copies"] = per
            phases[p]["copy_pattern"] = list(pattern.values())

    # --- runtime calls and synchronisations ---------------------------------------
    for p in all_phases:
        calls = {}
        syncs = []
        for e in runtime:
            if phase_at(e["ts"]) != p:
                continue
            c = calls.setdefault(e["name"], {"count": 0, "total_us": 0.0, "max_us": 0.0})
            c["count"] += 1
            c["total_us"] = round(c["total_us"] + e["dur"], 1)
            c["max_us"] = round(max(c["max_us"], e["dur"]), 1)
            if e["name"] in SYNC_CALLS:
                s = {"call": e["name"], "start_us": rel(e["ts"]), "dur_us": round(e["dur"], 1)}
                s.update(context(e))
                syncs.append(s)
        if calls or p != "outside":
            ph = phases.setdefault(p, {})
            ph["runtime_calls"] = dict(sorted(calls.items(), key=lambda kv: -kv[1]["total_us"]))
            ph["sync_counts"] = {n: sum(1 for s in syncs if s["call"] == n) for n in SYNC_CALLS}
            ph["syncs"] = sorted(syncs, key=lambda s: s["start_us"])

    # --- long CPU ops and python functions (> 1 ms) --------------------------------
    def nesting(evts):
        # depth of each event among the given ones (same thread), by containment
        out = []
        stack = []
        for e in sorted(evts, key=lambda e: (e.get("tid"), e["ts"], -e["dur"])):
            while stack and (stack[-1].get("tid") != e.get("tid") or
                             stack[-1]["ts"] + stack[-1]["dur"] < e["ts"]):
                stack.pop()
            out.append((e, len(stack)))
            stack.append(e)
        return sorted(out, key=lambda t: t[0]["ts"])

    for p in all_phases:
        long_ops = [e for e in cpu_ops if e["dur"] > 1000 and phase_at(e["ts"]) == p]
        long_py = [e for e in pyfuncs if e["dur"] > 1000 and phase_at(e["ts"]) == p
                   and _is_frame_of_interest(e["name"])]
        if not (long_ops or long_py) and p == "outside":
            continue
        ph = phases.setdefault(p, {})
        ph["cpu_ops_over_1ms"] = [
            {"name": e["name"], "depth": d, "start_us": rel(e["ts"]), "dur_ms": round(e["dur"] / 1000, 3),
             "input_shapes": _shapes(e), "input_dtypes": _dtypes(e)} for e, d in nesting(long_ops)]
        ph["python_over_1ms"] = [
            {"name": e["name"], "depth": d, "start_us": rel(e["ts"]), "dur_ms": round(e["dur"] / 1000, 3)}
            for e, d in nesting(long_py)]

    # --- kernels and memsets ---------------------------------------------------------
    for p in all_phases:
        ks = {}
        gpu_us = 0.0
        for k in kernels:
            if gpu_phase(k) != p:
                continue
            d = ks.setdefault(k["name"], {"count": 0, "total_us": 0.0, "streams": set()})
            d["count"] += 1
            d["total_us"] = round(d["total_us"] + k["dur"], 1)
            d["streams"].add((k.get("args") or {}).get("stream", k.get("tid")))
            gpu_us += k["dur"]
        for d in ks.values():
            d["streams"] = sorted(d["streams"], key=str)
        ms = [m for m in memsets if gpu_phase(m) == p]
        if ks or ms or p != "outside":
            ph = phases.setdefault(p, {})
            ph["kernels"] = [dict(name=n, **v) for n, v in
                             sorted(ks.items(), key=lambda kv: -kv[1]["total_us"])]
            ph["kernel_gpu_us"] = round(gpu_us, 1)
            ph["memsets"] = {"count": len(ms),
                             "bytes": sum(int((m.get("args") or {}).get("bytes", 0) or 0) for m in ms)}

    # GPU busy span of each phase's device work (first start to last end)
    for p in all_phases:
        g = [e for e in kernels + copies + memsets if gpu_phase(e) == p]
        if g and p in phases:
            a = min(e["ts"] for e in g)
            b = max(e["ts"] + e["dur"] for e in g)
            phases[p]["gpu_span_us"] = [rel(a), rel(b)]

    streams = sorted({str(r["stream"]) for r in copy_rows} |
                     {str((k.get("args") or {}).get("stream", k.get("tid"))) for k in kernels})
    return {
        "step_ms": round((t_end - t0) / 1000, 3),
        "phase_order": list(PHASES),
        "streams": streams,
        "phases": phases,
        "copies_ordered": copy_groups,
        "copies_compact": compress_copies(copy_groups),
        "copy_count": len(copy_rows),
        "notes": [
            "times in us relative to the start of the 'forward' range; step_ms spans forward..optimizer_step",
            "a GPU event (copy, kernel, memset) belongs to the phase whose range holds the CPU call that issued it",
            "copies_ordered: by GPU start; consecutive copies with equal phase/direction/kind/bytes/stream/call/op/python function are one group",
            "kind is CUPTI's memory kind: Pinned = page-locked memory the device knows (cudaHostAlloc/cudaHostRegister); Pageable = anything else, mlock-only included",
            "call_us: host time of the issuing runtime call (a copy from Pageable memory blocks the host thread for most of its duration)",
            "the harness's own cudaDeviceSynchronize calls lie between the ranges (phase 'outside')",
        ],
    }


def _fmt_bytes(n):
    if n >= 1 << 30:
        return f"{n / (1 << 30):.3f} GiB"
    if n >= 1 << 20:
        return f"{n / (1 << 20):.2f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.1f} KiB"
    return f"{n} B"


def _chains(ops):
    """Merge an op with its single long child when the child takes >= 90% of it
    (aten::to > aten::_to_copy > aten::copy_), for the text summary."""
    out = []
    i = 0
    while i < len(ops):
        o = dict(ops[i])
        j = i
        while j + 1 < len(ops):
            c = ops[j + 1]
            sibling = j + 2 < len(ops) and ops[j + 2]["depth"] == c["depth"]
            if c["depth"] == ops[j]["depth"] + 1 and c["dur_ms"] >= 0.9 * ops[j]["dur_ms"] and not sibling:
                o["name"] += " > " + c["name"]
                o["input_shapes"], o["input_dtypes"] = c["input_shapes"], c.get("input_dtypes")
                j += 1
            else:
                break
        out.append(o)
        i = j + 1
    return out


def _copy_key(g):
    return (g["phase"], g["dir"], g["kind"], g["bytes_each"], g["count"], str(g["stream"]), g.get("op"),
            str(g.get("op_dtypes")), g.get("py"), g.get("builtin"))


def compress_copies(groups, max_period=16):
    """Fold repeated blocks of copy groups: [{"repeat": r, "block": [groups of the first
    repetition], "start_us", "end_us" (first start, last end over all repetitions)}]."""
    keys = [_copy_key(g) for g in groups]
    out, i, n = [], 0, len(groups)
    while i < n:
        best_r, best_p = 1, 1
        for p in range(1, max_period + 1):
            r = 1
            while i + (r + 1) * p <= n and keys[i + r * p:i + (r + 1) * p] == keys[i:i + p]:
                r += 1
            if r >= 2 and r * p > best_r * best_p:
                best_r, best_p = r, p
        span = groups[i:i + best_r * best_p]
        out.append({"repeat": best_r, "block": groups[i:i + best_p],
                    "start_us": span[0]["start_us"], "end_us": max(g["end_us"] for g in span),
                    "gpu_us_total": round(sum(g["dur_us_total"] for g in span), 1),
                    "call_us_total": round(sum(g["call_us_total"] for g in span), 1)})
        i += best_r * best_p
    return out


def _issuer(g):
    op = g.get("op")
    if op and g.get("op_dtypes"):
        op += "(" + ",".join(g["op_dtypes"]) + ")"
    return " / ".join(x for x in (op, g.get("builtin"), g.get("py")) if x) or "-"


def render_text(rep):
    L = []
    w = L.append
    w(f"DeepSpeed reference profile: arm {rep.get('arm', '?')}")
    if rep.get("command"):
        w(f"command: {rep['command']}")
    w(f"one step: {rep['step_ms']:.3f} ms (forward..optimizer_step, CPU ranges); "
      f"{rep['copy_count']} copies; streams {', '.join(rep['streams'])}")
    for n in rep["notes"]:
        w(f"  note: {n}")
    w("")
    phases = rep["phases"]
    for p in list(rep["phase_order"]) + ["outside"]:
        ph = phases.get(p)
        if not ph:
            continue
        w("=" * 100)
        if "cpu_ms" in ph:
            w(f"PHASE {p}: {ph['cpu_ms']:.3f} ms on the CPU [{ph['start_us']:.0f} .. {ph['end_us']:.0f} us]"
              + (f", GPU work issued here spans [{ph['gpu_span_us'][0]:.0f} .. {ph['gpu_span_us'][1]:.0f}] us"
                 if "gpu_span_us" in ph else ""))
        else:
            w(f"PHASE {p} (between/after the ranges: the harness's own syncs, late GPU work)")
        cps = ph.get("copies", {})
        if cps:
            w("  copies: " + "; ".join(
                f"{d} {v['count']}x {_fmt_bytes(v['bytes'])} ({v['bytes']} B) GPU {v['gpu_us'] / 1000:.3f} ms"
                f" = {v['gb_per_s']} GB/s, kinds {v['kinds']}" for d, v in sorted(cps.items())))
        else:
            w("  copies: none")
        for q in ph.get("copy_pattern", []):
            w(f"    {q['count']:>4}x {q['dir']:<5} {q['kind']:<20} {q['bytes_each']:>11} B  stream {q['stream']}  "
              f"GPU {q['gpu_us']:.1f} us  call {q['call_us']:.1f} us  {_issuer(q)}")
        sc = ph.get("sync_counts")
        if sc is not None:
            w("  syncs: " + ", ".join(f"{k} {v}" for k, v in sc.items()))
            for s in ph.get("syncs", []):
                w(f"    {s['start_us']:>10.1f} us  {s['call']:<22} {s['dur_us']:>9.1f} us  {_issuer(s)}")
        rc = ph.get("runtime_calls", {})
        if rc:
            w("  runtime calls (count, total us, max us):")
            for n, v in list(rc.items())[:15]:
                w(f"    {n:<36} {v['count']:>6} {v['total_us']:>11.1f} {v['max_us']:>10.1f}")
        ops = ph.get("cpu_ops_over_1ms", [])
        w(f"  CPU ops > 1 ms: {len(ops)} (a chain 'a > b > c' is an op whose only long child takes >= 90% "
          f"of it; shapes and dtypes are the innermost op's)")
        for o in _chains(ops):
            w(f"    {'  ' * o['depth']}{o['name']}  {o['dur_ms']:.3f} ms  at {o['start_us']:.0f} us  "
              f"shapes {o['input_shapes']} dtypes {o.get('input_dtypes')}")
        pys = ph.get("python_over_1ms", [])
        if pys:
            w(f"  Python functions > 1 ms (DeepSpeed / model / harness frames; the Python tracer "
              f"inflates these): {len(pys)}")
            for o in pys:
                w(f"    {'  ' * min(o['depth'], 30)}{o['name']}  {o['dur_ms']:.3f} ms  at {o['start_us']:.0f} us")
        ks = ph.get("kernels", [])
        if ks or "kernel_gpu_us" in ph:
            w(f"  kernels: {sum(k['count'] for k in ks)} launches, {ph.get('kernel_gpu_us', 0) / 1000:.3f} ms GPU; "
              f"memsets {ph.get('memsets', {})}")
            for k in ks:
                name = k["name"] if len(k["name"]) <= 110 else k["name"][:107] + "..."
                w(f"    {k['count']:>5}x {k['total_us']:>10.1f} us  streams {k['streams']}  {name}")
        w("")
    w("=" * 100)
    w("ORDERED COPIES, COMPACT (repeated blocks folded: 'xR' = the block below runs R times in a row;")
    w("  times of the block's rows are those of its first run; the xR line gives the span and GPU/call totals)")
    for c in compress_copies(rep["copies_ordered"]):
        ind = "  "
        if c["repeat"] > 1:
            w(f"  x{c['repeat']}  [{c['start_us']:.1f} .. {c['end_us']:.1f}] us  GPU {c['gpu_us_total']:.1f} us  "
              f"call {c['call_us_total']:.1f} us")
            ind = "      "
        for g in c["block"]:
            w(f"{ind}{g['phase']:<14} {g['count']:>3}x {g['dir']:<5} {g['kind']:<20} {g['bytes_each']:>11} B "
              f"s{g['stream']}  at {g['start_us']:.1f} us  GPU {g['dur_us_total']:.1f} us  call "
              f"{g['call_us_total']:.1f} us  {_issuer(g)}")
    w("")
    w("=" * 100)
    w("ORDERED COPIES (whole step; consecutive identical copies grouped)")
    w(f"  {'#':>3} {'phase':<14} {'n':>4} {'dir':<5} {'kind':<22} {'bytes each':>12} {'stream':>6} "
      f"{'start us':>10} {'end us':>10} {'GPU us':>9} {'call us':>9}  issuer")
    for i, g in enumerate(rep["copies_ordered"]):
        issuer = _issuer(g)
        w(f"  {i:>3} {g['phase']:<14} {g['count']:>4} {g['dir']:<5} {g['kind']:<22} {g['bytes_each']:>12} "
          f"{str(g['stream']):>6} {g['start_us']:>10.1f} {g['end_us']:>10.1f} {g['dur_us_total']:>9.1f} "
          f"{g['call_us_total']:>9.1f}  {issuer}")
    return "\n".join(L) + "\n"


# --------------------------------------------------------------------------------------
# Parent
# --------------------------------------------------------------------------------------
def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_argv(args, arm):
    argv = [sys.executable, os.path.abspath(__file__), "--child", arm,
            "--hidden", str(args.hidden), "--layers", str(args.layers), "--vocab", str(args.vocab),
            "--batch", str(args.batch), "--seq", str(args.seq), "--steps", str(args.steps),
            "--warmup", str(args.warmup), "--seed", str(args.seed), "--init", args.init,
            "--attn", args.attn]
    if not args.offload_param:
        argv.append("--no-offload-param")
    if args.offload_ratio is not None:
        argv += ["--offload-ratio", repr(args.offload_ratio)]
    if args.device_memory is not None:
        argv += ["--device-memory", str(args.device_memory)]
    if args.model_config:
        argv += ["--model-config", args.model_config]
    if args.profile:
        argv += ["--profile", "--profile-out", args.profile_out]
        if not args.profile_stack:
            argv.append("--no-profile-stack")
    argv += ["--timing", args.timing]
    if args.account:
        argv.append("--account")
    if args.eager_baseline:
        argv.append("--eager-baseline")
    if args.memory_history:
        argv += ["--memory-history", os.path.abspath(args.memory_history)]
    return argv


def gpu_count():
    try:
        out = subprocess.run(["nvidia-smi", "-L"], stdout=subprocess.PIPE, text=True, timeout=30).stdout
        return sum(1 for l in out.splitlines() if l.startswith("GPU "))
    except (OSError, subprocess.SubprocessError):
        return 0


def run_ranks(args, arm, reg, port):
    """Every rank of one arm; (worst exit code, rank 0's stdout), or (None, "") on timeout."""
    share = gpu_count() < args.ranks
    procs = []
    for r in range(args.ranks):
        env = dict(os.environ)
        env.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(r),
                    "WORLD_SIZE": str(args.ranks), "LOCAL_RANK": "0" if share else str(r),
                    "LOCAL_WORLD_SIZE": str(args.ranks),
                    "DS_PIN_MEMORY_BACKEND": "native", "DS_PIN_MEMORY_REGISTER_DEVICE": reg,
                    "PYTHONUNBUFFERED": "1"})
        if share and args.ranks > 1:  # NCCL refuses two ranks on one GPU of one host
            env.update({"NCCL_HOSTID": f"ds-ref-rank-{r}", "NCCL_SOCKET_IFNAME": "lo"})
        procs.append(subprocess.Popen(child_argv(args, arm), env=env, text=True,
                                      stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL))
    try:
        out, _ = procs[0].communicate(timeout=args.timeout or None)
        rcs = [procs[0].returncode] + [p.wait(timeout=60) for p in procs[1:]]
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
        return None, ""
    return max(rcs, key=abs), out


def run_parent(args):
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    bad = [a for a in arms if a not in ARMS]
    if bad or not arms or len(set(arms)) != len(arms):
        raise SystemExit(f"ds-ref: --arms must list distinct arms of {', '.join(ARMS)} (got {args.arms!r})")
    if args.profile and len(arms) != 1:
        raise SystemExit("ds-ref: --profile takes exactly one arm (e.g. --arms registered)")
    results, failed = [], []
    for arm in arms:
        pin, reg = ARMS[arm]
        port = free_port()
        log(f"arm {arm}: pin_memory={pin} DS_PIN_MEMORY_REGISTER_DEVICE={reg} port {port}"
            + (f", {args.ranks} ranks" if args.ranks > 1 else "")
            + (f", offload_optimizer.ratio {args.offload_ratio}" if args.offload_ratio is not None else ""))
        t = time.perf_counter()
        rc, out = run_ranks(args, arm, reg, port)
        if rc is None:
            log(f"arm {arm}: FAILED: no result within --timeout {args.timeout} s")
            failed.append(arm)
            continue
        lines = [l for l in out.splitlines() if l.startswith("DSREF=")]
        for l in out.splitlines():
            if not l.startswith("DSREF="):
                print(l, file=sys.stderr)
        if rc != 0 or not lines:
            log(f"arm {arm}: FAILED: a rank exited {rc}"
                + ("" if lines else " without a DSREF line") + " (its stderr is above)")
            failed.append(arm)
            continue
        print(lines[-1], flush=True)
        results.append(json.loads(lines[-1][len("DSREF="):]))
        log(f"arm {arm}: done in {time.perf_counter() - t:.1f} s wall")
    if results:
        log(f"{'arm':<20} {'avg step (s)':>12} {'min (s)':>9} {'median (s)':>10} {'fwd':>7} {'bwd':>7} "
            f"{'opt':>7} {'GPU peak (GB)':>13} {'ratio':>6} {'on GPU':>7}")
        for r in results:
            log(f"{r['arm']:<20} {r['step_avg_s']:>12.3f} {r['step_min_s']:>9.3f} {r['step_median_s']:>10.3f} "
                f"{r['forward_avg_s']:>7.3f} {r['backward_avg_s']:>7.3f} {r['optimizer_avg_s']:>7.3f} "
                f"{r['gpu_peak_gb']:>13.2f} {r['offload_ratio']:>6g} "
                f"{str(r['sub_groups_on_device']) + '/' + str(r['num_sub_groups']):>7}")
    if failed:
        raise SystemExit(f"ds-ref: arm(s) failed: {', '.join(failed)}")


def device_memory_arg(text):
    """--device-memory: bytes as the tool's flag takes them (B, KB, MB, GB, TB decimal; KiB, MiB,
    GiB, TiB binary; a bare number is bytes)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B|B)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 25GB)")
    unit = m.group(2) or "B"
    scale = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
             "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}[unit]
    n = int(float(m.group(1)) * scale)
    if n <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return n


def offload_ratio_arg(text):
    """--offload-ratio: a float in [0, 1] (DeepSpeed's own bounds for offload_optimizer.ratio)."""
    try:
        r = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}")
    if not 0.0 <= r <= 1.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must lie in [0, 1], got {text!r}")
    return r


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    # Defaults are the C++ tool's (src/cli/cli.cpp, include/zob/config.hpp).
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=4, help="timed steps per arm (default 4, as the tool)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2, as the tool)")
    ap.add_argument("--seed", type=int, default=42, help="seed of the token ids and (with --init tool) weights")
    ap.add_argument("--init", choices=("tool", "torch"), default="tool",
                    help="initial weights: the C++ tool's counter-hash values (default) or torch's own init")
    ap.add_argument("--model-config", metavar="PATH",
                    help="a Hugging Face config.json (or its folder): that architecture with random "
                    "weights (torch init) instead of the synthetic model; needs transformers")
    ap.add_argument("--attn", choices=("sdpa", "eager"), default="sdpa",
                    help="with --model-config: transformers' attention implementation (default sdpa, "
                    "what a user gets; eager = the tool's materialised softmax)")
    ap.add_argument("--no-offload-param", dest="offload_param", action="store_false",
                    help="offload the optimizer only (the tool's copy_back loop)")
    ap.add_argument("--offload-ratio", type=offload_ratio_arg, metavar="R", default=None,
                    help="ds_config zero_optimization.offload_optimizer.ratio, in [0, 1]: the share of "
                    "the optimizer's sub-groups kept on the CPU (DeepSpeedCPUAdam); sub-group i stays on the "
                    "GPU (torch.optim.AdamW) when i < int((1 - R) * sub-groups). Not given: the key is left "
                    "out (DeepSpeed's default 1.0, everything on the CPU); given, it is written, 1.0 included")
    ap.add_argument("--device-memory", type=device_memory_arg, metavar="SIZE", default=None,
                    help="cap what PyTorch's caching allocator may reserve on the GPU "
                    "(torch.cuda.set_per_process_memory_fraction of SIZE / the device's total), as "
                    "the tool's --device-memory caps its pool's reserved bytes")
    ap.add_argument("--arms", default=DEFAULT_ARMS, help=f"comma list of {', '.join(ARMS)}")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds per arm (0 = none)")
    ap.add_argument("--profile", action="store_true",
                    help="one arm: after the timed steps, profile one more step")
    ap.add_argument("--profile-out", default="ds-profile", help="folder for the profile's files")
    ap.add_argument("--no-profile-stack", dest="profile_stack", action="store_false",
                    help="profile without the Python tracer (no 'python_function' events)")
    ap.add_argument("--analyze", metavar="TRACE", help="analyse a saved Chrome trace (.json or .json.gz) "
                    "and print the text summary; needs no GPU")
    ap.add_argument("--analyze-json", metavar="FILE", help="with --analyze: also write the analysis as JSON here")
    ap.add_argument("--ranks", type=int, default=1,
                    help="data-parallel ranks per arm (default 1; more than the GPUs: they share GPU 0)")
    ap.add_argument("--timing", choices=("upstream", "phases"), default="upstream",
                    help="upstream (default): one sync before and one after each step, as the upstream "
                    "script; phases: also a sync after forward and after backward (phase wall times)")
    ap.add_argument("--account", action="store_true",
                    help="after the timed steps, one step with DeepSpeed's hook functions timed "
                    "(bench/deepspeed/account.py); with --profile, ds:: ranges and a host account")
    ap.add_argument("--eager-baseline", action="store_true",
                    help="before DeepSpeed: the same model as a resident bf16 copy on the GPU, forward + "
                    "backward timed (and profiled with --profile): transformers' own cost")
    ap.add_argument("--memory-history", metavar="PREFIX",
                    help="record torch.cuda.memory's allocation history from the child's start and "
                    "dump it after the steps to PREFIX-ARM.pickle (bench/deepspeed/memory_peak.py: "
                    "what is live at the step's peak)")
    ap.add_argument("--child", choices=tuple(ARMS), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    for k in ("hidden", "layers", "vocab", "batch", "seq", "steps"):
        if getattr(args, k) < 1:
            ap.error(f"--{k} must be >= 1")
    if args.warmup < 0:
        ap.error("--warmup must be >= 0")
    if args.ranks < 1:
        ap.error("--ranks must be >= 1")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.analyze:
        opener = gzip.open if args.analyze.endswith(".gz") else open
        with opener(args.analyze, "rt") as f:
            rep = analyze_trace(json.load(f))
        base = os.path.basename(args.analyze)
        for suffix in (".gz", ".json"):
            base = base[:-len(suffix)] if base.endswith(suffix) else base
        rep["arm"] = base[len("trace-"):] if base.startswith("trace-") else base
        rep["command"] = " ".join(["harness.py"] + sys.argv[1:])
        if args.analyze_json:
            with open(args.analyze_json, "w") as f:
                json.dump(rep, f, indent=1)
        sys.stdout.write(render_text(rep))
        return
    if args.child:
        args.profile_out = os.path.abspath(args.profile_out)
        run_child(args)
    else:
        args.profile_out = os.path.abspath(args.profile_out)
        run_parent(args)


if __name__ == "__main__":
    main()
