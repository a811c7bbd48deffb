#!/usr/bin/env python3
"""bench/pool_trace_compare.py on hand-made traces (a block the plan counts fresh that the run
split smaller; the first pool and walk taken unless asked), and, given the binary, through
zero3-offload-bench itself: the dry run's ZOB_PLAN_TRACE walk peaks at the bytes of the plan's
step parts (plan.device_parts named as the walk names them), and the run's ZOB_POOL_TRACE peak is
the run's gpu_peak_gb.

    python3 bench/pool_trace_compare_test.py [path/to/zero3-offload-bench]
"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pool_trace_compare as ptc  # noqa: E402
from checklist import Checks  # noqa: E402

check = Checks()
MIB = 1 << 20

with tempfile.TemporaryDirectory() as d:
    run = os.path.join(d, "run.trace")
    plan = os.path.join(d, "plan.trace")
    # The run: a fixed 10 MiB buffer, then a 36 MiB block freed and a 35 MiB one split from it,
    # a 4 MiB block beside it (peak 49 MiB). A second pool follows that must not be read.
    with open(run, "w") as f:
        f.write("# pool of process 1\n")
        f.write(f"a 0x10 {10 * MIB} compute {10 * MIB} {10 * MIB}\n")
        f.write(f"a 0x20 {36 * MIB} compute {46 * MIB} {46 * MIB}\n")
        f.write(f"f 0x20 {36 * MIB} compute {10 * MIB} {46 * MIB}\n")
        f.write(f"a 0x20 {35 * MIB} compute {45 * MIB} {46 * MIB}\n")
        f.write(f"a 0x30 {4 * MIB} compute {49 * MIB} {52 * MIB}\n")
        f.write("# pool of process 2\n")
        f.write(f"a 0x10 {99 * MIB} compute {99 * MIB} {99 * MIB}\n")
    # The walk: 36 MiB taken twice (fresh each time) and the 4 MiB one.
    with open(plan, "w") as f:
        f.write("# walk of process 1\n")
        f.write(f"a {36 * MIB} {36 * MIB} saved activations\n")
        f.write(f"f {36 * MIB} 0 saved activations\n")
        f.write(f"a {36 * MIB} {36 * MIB} saved activations\n")
        f.write(f"a {4 * MIB} {40 * MIB} module scratch\n")
        f.write("# walk of process 1\n")
        f.write(f"a {7 * MIB} {7 * MIB} logits\n")
    c = ptc.compare(ptc.sections(run, "# pool")[0], ptc.sections(plan, "# walk")[0])
    check(c["run_peak"] == 49 * MIB, f"the run's peak is its largest allocated figure ({c['run_peak']})")
    check(c["walk_peak"] == 40 * MIB, f"the walk's peak ({c['walk_peak']})")
    check(dict(c["run_only"]) == {10 * MIB: 1, 35 * MIB: 1}, f"run only: the fixed and the split block {c['run_only']}")
    check(c["plan_only"] == [(36 * MIB, 1, ["saved activations x1"])], f"plan only: the fresh block {c['plan_only']}")
    second = ptc.compare(ptc.sections(run, "# pool")[1], ptc.sections(plan, "# walk")[1])
    check(second["run_peak"] == 99 * MIB and second["walk_peak"] == 7 * MIB, "--pool/--walk 1: the second sections")
    check(ptc.main([run, plan, "--walk", "5"]) == 2, "a walk that is not there: exit 2")

    binary = sys.argv[1] if len(sys.argv) > 1 else None
    if binary:
        model = ["--device", "cpu", "--schedule", "deepspeed", "--hidden", "256", "--layers", "3",
                 "--vocab", "4096", "--seq", "128", "--batch", "2", "--arms", "pageable"]
        env = dict(os.environ, ZOB_PLAN_TRACE=plan + ".bin", ZOB_POOL_TRACE=run + ".bin")
        pj, rj = os.path.join(d, "plan.json"), os.path.join(d, "run.json")
        dry = subprocess.run([binary, *model, "--dry-run", "--json", pj], env=env, capture_output=True, text=True)
        check(dry.returncode == 0, f"the dry run exits 0 ({dry.returncode}: {dry.stderr[-300:]})")
        wet = subprocess.run([binary, *model, "--steps", "1", "--warmup", "0", "--repeats", "1", "--json", rj],
                             env=env, capture_output=True, text=True)
        check(wet.returncode == 0, f"the run exits 0 ({wet.returncode}: {wet.stderr[-300:]})")
        walks = ptc.sections(plan + ".bin", "# walk")
        pools = ptc.sections(run + ".bin", "# pool")
        check(len(walks) >= 1 and len(pools) >= 1, f"{len(walks)} walk(s), {len(pools)} pool(s) traced")
        if walks and pools and os.path.exists(pj) and os.path.exists(rj):
            p = json.load(open(pj))["plan"]
            # ds_step_part_name's parts (src/step/deepspeed/deepspeed_memory.cpp): the walk's
            walked = ("fetched parameters", "module gradients", "saved activations", "module scratch",
                      "logits", "bucket copy", "gradient partition copies", "norm views (fp64)",
                      "norms", "fp32 gradient casts")
            step = sum(x["bytes"] for x in p["device_parts"] if x["name"] in walked)
            walk_peak = ptc.plan_peak(walks[0])[0]
            check(walk_peak == step, f"the walk's peak {walk_peak} is the plan's step parts {step}")
            run_peak = ptc.run_peak(pools[0])[0]
            measured = json.load(open(rj))["pageable"]["gpu_peak_gb"]
            check(abs(run_peak / 1e9 - measured) < 1e-6, f"the pool trace's peak {run_peak} is the run's {measured} GB")

sys.exit(check.summary())
