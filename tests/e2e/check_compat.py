#!/usr/bin/python3
"""Drop-in check for CI scripts written against either version of the upstream Python script.

Runs the real binary (CPU device, tiny model) in --compat v1 (the default) and --compat v2
(with and without --ablate-register) and reads its stdout the two ways such scripts do: json.loads
of the DRIVERRESULT line, and a grep/cut pipeline over the summary line. The expected key orders
are written from the upstream printing code (v1: DeepSpeed PR #8618's driver; v2:
DeepSpeedExamples benchmarks/pin_memory/zero3_offload_bench.py run_arm / run_driver).

usage: check_compat.py BINARY
"""
import json
import re
import subprocess
import sys

SMALL = ["--device", "cpu", "--hidden", "64", "--layers", "2", "--batch", "2", "--seq", "16",
         "--vocab", "512", "--steps", "2", "--warmup", "1"]
# The per-arm keys each script printed, in its order; the tool's additions follow them.
V1_ARM = ["register", "device", "model", "params_b", "batch", "seq", "tokens_per_step", "steps",
          "step_avg_s", "step_min_s", "gpu_peak_gb"]
V2_ARM = ["pin_memory"] + V1_ARM
SUMMARY = r"speedup: (\d+\.\d\d)x   saved: (-?\d+\.\d{3}) s/step   throughput: (\d+) vs (\d+) tok/s"


def fail(msg):
    sys.exit("FAIL: " + msg)


def run(binary, args):
    p = subprocess.run([binary] + SMALL + args, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        fail(f"{args}: exit {p.returncode}\n{p.stderr}")
    return p.stdout


def pipeline(stdout, shell_tail):
    """What a CI script does with the tool's stdout: ... | grep ... | cut ... (fed the output
    of the run already checked, so both readings see the same numbers)."""
    return subprocess.run(["/bin/sh", "-c", shell_tail], input=stdout, capture_output=True,
                          text=True, timeout=60).stdout.strip()


def driver_result(stdout):
    lines = [l for l in stdout.splitlines() if l.startswith("DRIVERRESULT=")]
    if len(lines) != 1:
        fail(f"{len(lines)} DRIVERRESULT lines")
    return json.loads(lines[0][len("DRIVERRESULT="):])


def check_arm(doc, name, keys, pin, register):
    arm = doc[name]
    if list(arm.keys())[:len(keys)] != keys:
        fail(f"arm {name}: keys start {list(arm.keys())[:len(keys)]}, the script's are {keys}")
    if "pin_memory" in keys and arm["pin_memory"] is not pin:
        fail(f"arm {name}: pin_memory {arm['pin_memory']}, expected {pin}")
    if arm["register"] is not register:
        fail(f"arm {name}: register {arm['register']!r}, expected {register!r}")


def check_table(stdout, rows, prefix):
    lines = stdout.splitlines()
    for row in rows:
        if not any(l.split() and l.split()[0] == row for l in lines):
            fail(f"no table row '{row}' in:\n{stdout}")
    summary = [l for l in lines if re.fullmatch(prefix + SUMMARY, l)]
    if len(summary) != 1:
        fail(f"no single '{prefix}speedup: ...' summary line in:\n{stdout}")
    return float(re.fullmatch(prefix + SUMMARY, summary[0]).group(1))


def main():
    binary = sys.argv[1]
    # v1 (default): registered / unregistered, speedup = unregistered / registered.
    out = run(binary, [])
    doc = driver_result(out)
    if list(doc.keys())[:3] != ["registered", "unregistered", "speedup"]:
        fail(f"v1 top-level keys start {list(doc.keys())[:3]}")
    check_arm(doc, "registered", V1_ARM, None, True)
    check_arm(doc, "unregistered", V1_ARM, None, False)
    want = doc["unregistered"]["step_avg_s"] / doc["registered"]["step_avg_s"]
    if abs(doc["speedup"] - want) > 1e-9 * want:
        fail(f"v1 speedup {doc['speedup']} != unregistered / registered {want}")
    shown = check_table(out, ["registered", "unregistered"], "")
    if pipeline(out, "grep '^speedup:' | cut -d' ' -f2") != f"{shown:.2f}x":
        fail("v1: grep '^speedup:' | cut -d' ' -f2 does not give the speedup")

    # v2: unpinned / pinned, speedup = unpinned / pinned; pinned-unregistered after speedup.
    for ablate in (False, True):
        args = ["--compat", "v2"] + (["--ablate-register"] if ablate else [])
        out = run(binary, args)
        doc = driver_result(out)
        keys = ["unpinned", "pinned", "speedup"] + (["pinned-unregistered"] if ablate else [])
        if list(doc.keys())[:len(keys)] != keys:
            fail(f"{args}: top-level keys start {list(doc.keys())[:len(keys)]}, expected {keys}")
        if not ablate and "pinned-unregistered" in doc:
            fail("v2 without --ablate-register has a pinned-unregistered arm")
        check_arm(doc, "unpinned", V2_ARM, False, None)
        check_arm(doc, "pinned", V2_ARM, True, True)
        if ablate:
            check_arm(doc, "pinned-unregistered", V2_ARM, True, False)
        if doc["pinned"]["arm"] != "registered" or doc["unpinned"]["arm"] != "pageable":
            fail(f"{args}: v2 names map to the wrong arms")
        if doc["workload"]["loop"] != "offload_param":
            fail(f"{args}: v2 runs the script's offload_param loop, not {doc['workload']['loop']}")
        want = doc["unpinned"]["step_avg_s"] / doc["pinned"]["step_avg_s"]
        if abs(doc["speedup"] - want) > 1e-9 * want:
            fail(f"{args}: speedup {doc['speedup']} != unpinned / pinned {want}")
        rows = ["unpinned"] + (["pinned-unregistered", "pinned-registered"] if ablate else ["pinned"])
        shown = check_table(out, rows, "pinning ")
        if "================ ZeRO-3 CPU-offload step time ================" not in out:
            fail(f"{args}: no v2 banner")
        pinned = doc["pinned"]
        model_line = f"model: {pinned['model']}  params: {pinned['params_b']!r}B  device: {pinned['device']}"
        if model_line not in out.splitlines():
            fail(f"{args}: no line '{model_line}' (the v2 script's, with Python's float repr)")
        if pipeline(out, "grep '^pinning speedup:' | cut -d' ' -f3") != f"{shown:.2f}x":
            fail(f"{args}: grep '^pinning speedup:' | cut -d' ' -f3 does not give the speedup")
        parsed = pipeline(out, "grep '^DRIVERRESULT=' | cut -d= -f2- | /usr/bin/python3 -c "
                                        "'import json,sys; d=json.load(sys.stdin); print(sorted(d)[:0] or d[\"pinned\"][\"pin_memory\"])'")
        if parsed != "True":
            fail(f"{args}: the cut | json.load pipeline read {parsed!r}")
    print("ok: v1 and v2 outputs parse as their scripts' did")


if __name__ == "__main__":
    main()
