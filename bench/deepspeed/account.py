"""Where a DeepSpeed ZeRO-3 offload step's host time goes (issue 23's account).

Three measurements, each made in the harness's arm child after its timed steps:

* `hook_timers`: DeepSpeed's per-module hooks, its parameter coordinator and its gradient
  hook wrapped with perf_counter timers for one whole step (no profiler): calls, total and
  exclusive microseconds per function, and the calls per module class. The wrappers cost
  about a microsecond each; the step they time is reported beside the timed ones.
* `profile_ranges`: the same functions, and the optimizer step's own (`OPTIMIZER_STEP`),
  wrapped in torch.profiler record_function ranges (`ds::NAME`) for the profiled step, so
  that `host_account` can split the host timeline.
* `eager_baseline`: the same model without DeepSpeed, all parameters resident on the GPU in
  bf16, forward + backward timed as the upstream loop times a step (one sync before and one
  after), and one profiled forward + backward: transformers' own Python and kernels.

`host_account(trace)` (pure Python, no torch) splits each phase's wall time, instant by
instant, into exclusive rows that add up to the phase: host waits (synchronize calls),
copy calls (a copy from unregistered memory blocks its caller), allocator calls, other CUDA
runtime calls (kernel launches), aten operators' own time (dispatch and CPU compute; calls
of 1 ms or more are listed as CPU passes), DeepSpeed's Python (the ds:: ranges' own time),
and the rest (transformers' and autograd's Python, the harness). In backward the autograd
thread's innermost event wins whenever it has one; the main thread's otherwise.
"""

import bisect
import contextlib
import functools
import time

# (owner attribute path on the engine, function name, short name)
HOOKED = (
    ("optimizer.parameter_offload", "pre_sub_module_forward_function", "pre_forward"),
    ("optimizer.parameter_offload", "post_sub_module_forward_function", "post_forward"),
    ("optimizer.parameter_offload", "pre_sub_module_backward_function", "pre_backward"),
    ("optimizer.parameter_offload", "post_sub_module_backward_function", "post_backward"),
    ("optimizer.parameter_offload.param_coordinator", "fetch_sub_module", "fetch_sub_module"),
    ("optimizer.parameter_offload.param_coordinator", "release_sub_module", "release_sub_module"),
    ("optimizer", "reduce_ready_partitions_and_remove_grads", "grad_hook_reduce"),
    ("optimizer", "independent_gradient_partition_epilogue", "grad_epilogue"),
)

# ZeRO-3's optimizer step, function by function (stage3.py's step() calls each as self.NAME),
# ranged in the profile only: where a step at offload_optimizer.ratio < 1 spends its time.
OPTIMIZER_STEP = (
    ("optimizer", "_partition_all_parameters", "opt.partition_all_parameters"),
    ("optimizer", "_overflow_check_and_loss_scale_update", "opt.overflow_check"),
    ("optimizer", "_get_norm_groups", "opt.norm_groups"),
    ("optimizer", "_prepare_sub_group", "opt.prepare_sub_group"),
    ("optimizer", "unscale_and_clip_grads", "opt.unscale_and_clip"),
    ("optimizer", "_optimizer_step", "opt.optimizer_step"),
    ("optimizer", "_reassign_or_swap_out_partitioned_parameters", "opt.reassign"),
    ("optimizer", "_unflatten_partitioned_parameters", "opt.unflatten"),
    ("optimizer", "_release_sub_group", "opt.release_sub_group"),
    ("optimizer", "_post_step", "opt.post_step"),
)

SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
COPY_CALLS = ("cudaMemcpyAsync", "cudaMemcpy", "cudaMemcpy2DAsync", "cudaMemcpyPeerAsync")
ALLOC_CALLS = ("cudaMalloc", "cudaFree", "cudaHostAlloc", "cudaFreeHost", "cudaMallocHost",
               "cudaHostRegister", "cudaHostUnregister", "cudaMallocAsync", "cudaFreeAsync")
CPU_PASS_US = 1000.0


def _resolve(engine, path):
    obj = engine
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _install(engine, make_wrapper, functions=HOOKED):
    """Instance-level wrappers (the hooks call `self.NAME(...)`, so an instance attribute
    wins); returns an undo function. Names a DeepSpeed version lacks are skipped."""
    undo, missing = [], []
    for path, fn, short in functions:
        owner = _resolve(engine, path)
        orig = getattr(owner, fn, None) if owner is not None else None
        if orig is None:
            missing.append(f"{path}.{fn}")
            continue
        setattr(owner, fn, make_wrapper(short, orig))
        undo.append((owner, fn))

    def restore():
        for owner, fn in undo:
            with contextlib.suppress(AttributeError):
                delattr(owner, fn)
    return restore, missing


class HookTimers:
    def __init__(self):
        self.total = {}
        self.own = {}
        self.calls = {}
        self.by_module = {}
        self._stack = []

    def wrapper(self, short, orig):
        @functools.wraps(orig)
        def timed(*a, **k):
            if a and short in ("pre_forward", "pre_backward"):
                key = (short, type(a[0]).__name__)
                self.by_module[key] = self.by_module.get(key, 0) + 1
            self._stack.append(0.0)
            t = time.perf_counter()
            try:
                return orig(*a, **k)
            finally:
                d = time.perf_counter() - t
                inner = self._stack.pop()
                if self._stack:
                    self._stack[-1] += d
                self.total[short] = self.total.get(short, 0.0) + d
                self.own[short] = self.own.get(short, 0.0) + d - inner
                self.calls[short] = self.calls.get(short, 0) + 1
        return timed

    def report(self):
        return {
            "functions": {k: {"calls": self.calls[k], "total_ms": round(self.total[k] * 1e3, 3),
                              "own_ms": round(self.own[k] * 1e3, 3),
                              "own_us_per_call": round(self.own[k] * 1e6 / self.calls[k], 1)}
                          for k in sorted(self.total, key=lambda k: -self.total[k])},
            "own_ms_all": round(sum(self.own.values()) * 1e3, 3),
            "module_calls": {f"{h} {m}": n for (h, m), n in sorted(self.by_module.items())},
        }


def hook_timers(torch, engine, ids, log):
    """One step with DeepSpeed's hook functions timed; returns the report."""
    timers = HookTimers()
    restore, missing = _install(engine, timers.wrapper)
    try:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = engine(ids)
        t1 = time.perf_counter()
        engine.backward(loss)
        t2 = time.perf_counter()
        engine.step()
        torch.cuda.synchronize()
        t3 = time.perf_counter()
    finally:
        restore()
    rep = timers.report()
    rep.update({"step_s": round(t3 - t0, 4), "forward_issue_s": round(t1 - t0, 4),
                "backward_issue_s": round(t2 - t1, 4), "optimizer_s": round(t3 - t2, 4),
                "missing": missing})
    log(f"hook timers: step {t3 - t0:.3f} s, DeepSpeed hook functions' own time {rep['own_ms_all']:.1f} ms")
    return rep


@contextlib.contextmanager
def profile_ranges(torch, engine):
    from torch.profiler import record_function

    def wrapper(short, orig):
        @functools.wraps(orig)
        def ranged(*a, **k):
            with record_function("ds::" + short):
                return orig(*a, **k)
        return ranged

    restore, _ = _install(engine, wrapper, HOOKED + OPTIMIZER_STEP)
    try:
        yield
    finally:
        restore()


def eager_baseline(torch, model, ids, warmup, steps, profile_path, log):
    """The model without DeepSpeed: a bf16 copy resident on the GPU, forward + backward
    (no optimizer). Returns timings and, if profile_path, writes one profiled step's trace."""
    import copy
    import gzip
    import json
    import os
    import statistics
    m = copy.deepcopy(model).to(device="cuda", dtype=torch.bfloat16)
    m.train()
    ids = ids.to("cuda")

    def step():
        loss = m(ids)
        loss.backward()
        for p in m.parameters():
            p.grad = None

    fb, fwd = [], []
    for i in range(warmup + steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        if i >= warmup:
            fb.append(time.perf_counter() - t0)
    for i in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = m(ids)
        torch.cuda.synchronize()
        fwd.append(time.perf_counter() - t0)
        del loss
    out = {"forward_backward_median_s": statistics.median(fb), "forward_backward_s": fb,
           "forward_median_s": statistics.median(fwd), "peak_gb": torch.cuda.max_memory_allocated() / 1e9}
    if profile_path:
        from torch.profiler import ProfilerActivity, profile, record_function
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
            torch.cuda.synchronize()
            with record_function("forward"):
                loss = m(ids)
            torch.cuda.synchronize()
            with record_function("backward"):
                loss.backward()
            torch.cuda.synchronize()
            with record_function("optimizer_step"):
                pass
        raw = profile_path[:-3] if profile_path.endswith(".gz") else profile_path
        prof.export_chrome_trace(raw)
        with open(raw, "rb") as src, gzip.open(raw + ".gz", "wb", compresslevel=6) as dst:
            dst.write(src.read())
        with open(raw) as f:
            trace = json.load(f)
        os.remove(raw)
        out["account"] = host_account(trace)
        out["kernels"] = kernel_counts(trace)
    del m
    torch.cuda.empty_cache()
    log(f"eager baseline: forward+backward {out['forward_backward_median_s']:.4f} s, "
        f"forward {out['forward_median_s']:.4f} s")
    return out


# --------------------------------------------------------------------------------------
# Trace analysis (no torch)
# --------------------------------------------------------------------------------------
def _xs(trace):
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    out = []
    for e in events:
        if e.get("ph") == "X" and "ts" in e:
            out.append(dict(e, ts=float(e["ts"]), dur=float(e.get("dur", 0) or 0)))
    return out


def _phase_ranges(xs):
    ranges = {}
    for e in xs:
        if e.get("cat") == "user_annotation" and e.get("name") in ("forward", "backward", "optimizer_step"):
            ranges[e["name"]] = (e["ts"], e["ts"] + e["dur"], e.get("tid"))
    return ranges


def _row_of(e):
    cat, name = e.get("cat", ""), e.get("name", "")
    if cat in ("cuda_runtime", "cuda_driver"):
        if name in SYNC_CALLS:
            return "host wait (synchronize)"
        if name in COPY_CALLS:
            return "copy calls (host time)"
        if name in ALLOC_CALLS:
            return "allocator calls"
        return "launches and other CUDA calls"
    if cat == "cpu_op":
        return "CPU pass" if e["dur"] >= CPU_PASS_US else "aten operators (own time)"
    if cat == "user_annotation" and name.startswith("ds::"):
        return "DeepSpeed Python (hooks, coordinator)"
    return None


def _timeline(events):
    """Innermost-event intervals of one thread: a list of (start, end, row)."""
    evs = sorted(events, key=lambda e: (e["ts"], -e["dur"]))
    out, stack = [], []  # stack of (end, row)
    cur = None

    def emit(a, b, row):
        if b > a:
            out.append((a, b, row))

    for e in evs:
        a, b, row = e["ts"], e["ts"] + e["dur"], _row_of(e)
        if row is None:
            continue
        while stack and stack[-1][0] <= a:
            end, r = stack.pop()
            emit(cur, end, r)
            cur = end
        if stack:
            emit(cur, a, stack[-1][1])
        cur = a
        stack.append((b, row))
    while stack:
        end, r = stack.pop()
        emit(cur, end, r)
        cur = end
    return out


def _merge_threads(main_iv, other_iv, a, b, rest_row):
    """Exclusive time per row over [a, b]: another thread's innermost event wins where it
    has one (the autograd worker in backward); the main thread's otherwise; rest_row else."""
    bounds = {a, b}
    for s, e, _ in main_iv + other_iv:
        if e > a and s < b:
            bounds.add(max(a, s))
            bounds.add(min(b, e))
    pts = sorted(bounds)

    def lookup(iv, starts, t):
        i = bisect.bisect_right(starts, t) - 1
        if i >= 0 and iv[i][0] <= t < iv[i][1]:
            return iv[i][2]
        return None

    main_iv.sort()
    other_iv.sort()
    ms, os_ = [s for s, _, _ in main_iv], [s for s, _, _ in other_iv]
    rows = {}
    for x, y in zip(pts, pts[1:]):
        mid = (x + y) / 2
        r = lookup(other_iv, os_, mid) or lookup(main_iv, ms, mid) or rest_row
        rows[r] = rows.get(r, 0.0) + (y - x)
    return rows


def host_account(trace):
    xs = _xs(trace)
    ranges = _phase_ranges(xs)
    if not ranges:
        raise ValueError("trace lacks the forward / backward / optimizer_step ranges")
    main_tid = next(iter(ranges.values()))[2]
    by_tid = {}
    for e in xs:
        if e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver", "user_annotation"):
            by_tid.setdefault(e.get("tid"), []).append(e)
    main_iv = _timeline(by_tid.get(main_tid, []))
    other_iv = []
    for tid, evs in by_tid.items():
        if tid != main_tid and isinstance(tid, int) and tid > 0:
            other_iv += _timeline(evs)
    rest = "rest: Python outside the ds:: hooks (transformers, autograd engine, harness)"
    phases = {}
    for p, (a, b, _) in ranges.items():
        rows = _merge_threads(list(main_iv), list(other_iv), a, b, rest)
        passes = {}
        for e in by_tid.get(main_tid, []) + [e for t, v in by_tid.items() if t != main_tid for e in v]:
            if e.get("cat") == "cpu_op" and e["dur"] >= CPU_PASS_US and a <= e["ts"] < b:
                k = e["name"]
                c, d = passes.get(k, (0, 0.0))
                passes[k] = (c + 1, d + e["dur"])
        counts = {}
        for e in xs:
            if a <= e["ts"] < b and e.get("cat") in ("cuda_runtime", "cuda_driver"):
                r = _row_of(e)
                counts[r] = counts.get(r, 0) + 1
        phases[p] = {"wall_ms": round((b - a) / 1e3, 3),
                     "rows_ms": {k: round(v / 1e3, 3) for k, v in sorted(rows.items(), key=lambda kv: -kv[1])},
                     "calls": counts,
                     "cpu_passes": {k: {"count": c, "ms": round(d / 1e3, 3)}
                                    for k, (c, d) in sorted(passes.items(), key=lambda kv: -kv[1][1])}}
    return phases


def kernel_counts(trace):
    """Kernels per phase: count and GPU ms by kernel name (phase of the launching call)."""
    xs = _xs(trace)
    ranges = _phase_ranges(xs)
    launch = {}
    for e in xs:
        if e.get("cat") in ("cuda_runtime", "cuda_driver"):
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                launch[c] = e["ts"]
    out = {}
    for e in xs:
        if e.get("cat") != "kernel":
            continue
        t = launch.get((e.get("args") or {}).get("correlation"), e["ts"])
        phase = next((p for p, (a, b, _) in ranges.items() if a <= t <= b), "outside")
        d = out.setdefault(phase, {})
        name = e.get("name", "?")[:90]
        c, ms = d.get(name, (0, 0.0))
        d[name] = (c + 1, ms + e["dur"] / 1e3)
    return {p: {"total": sum(c for c, _ in d.values()),
                "gpu_ms": round(sum(ms for _, ms in d.values()), 3),
                "by_kernel": {k: {"count": c, "gpu_ms": round(ms, 3)}
                              for k, (c, ms) in sorted(d.items(), key=lambda kv: -kv[1][1])}}
            for p, d in out.items()}


def render_account(acc, title):
    lines = [f"{title}: host time by row (exclusive; rows add up to the phase)"]
    for p, d in acc.items():
        lines.append(f"  {p:<15} wall {d['wall_ms']:10.3f} ms")
        for k, v in d["rows_ms"].items():
            n = d["calls"].get(k)
            lines.append(f"    {k:<48} {v:10.3f} ms" + (f"  ({n} calls)" if n else ""))
        for k, v in list(d["cpu_passes"].items())[:8]:
            lines.append(f"      CPU pass {k:<40} x{v['count']:<4} {v['ms']:10.3f} ms")
    return "\n".join(lines) + "\n"
