#!/usr/bin/python3
"""Runs the real binary and validates its DRIVERRESULT (and --json file) against
docs/result-schema.json with python3-jsonschema (Draft 2020-12).

usage: check_result_schema.py BINARY SCHEMA
"""
import copy
import json
import os
import subprocess
import sys
import tempfile

import jsonschema

SMALL = ["--device", "cpu", "--hidden", "64", "--layers", "2", "--batch", "2", "--seq", "16",
         "--vocab", "512", "--steps", "2", "--warmup", "1"]


def driver_result(binary, args, env_extra=None, expect_rc=0):
    env = dict(os.environ)
    env.update(env_extra or {})
    p = subprocess.run([binary] + SMALL + args, capture_output=True, text=True, env=env,
                       timeout=120)
    if p.returncode != expect_rc:
        sys.exit(f"FAIL: {args}: exit {p.returncode}, expected {expect_rc}\n{p.stderr}")
    lines = [l for l in p.stdout.splitlines() if l.startswith("DRIVERRESULT=")]
    if len(lines) != 1:
        sys.exit(f"FAIL: {args}: {len(lines)} DRIVERRESULT lines\n{p.stdout}")
    return json.loads(lines[0][len("DRIVERRESULT="):])


def model_result(binary, model, extra=()):
    """--model: a decoder config.json of tests/models (SMALL's --hidden / --vocab are refused)."""
    args = ["--device", "cpu", "--model", model, "--batch", "2", "--seq", "8", "--steps", "2",
            "--warmup", "1", "--arms", "registered,unregistered"] + list(extra)
    p = subprocess.run([binary] + args, capture_output=True, text=True, timeout=120)
    lines = [l for l in p.stdout.splitlines() if l.startswith("DRIVERRESULT=")]
    if p.returncode != 0 or len(lines) != 1:
        sys.exit(f"FAIL: {args}: exit {p.returncode}\n{p.stderr}")
    return json.loads(lines[0][len("DRIVERRESULT="):])


def must_fail(validator, doc, what):
    if validator.is_valid(doc):
        sys.exit(f"FAIL: the schema accepts a document with {what}")


def main():
    binary, schema_path = sys.argv[1], sys.argv[2]
    with open(schema_path) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)

    with tempfile.TemporaryDirectory() as tmp:
        json_path = os.path.join(tmp, "result.json")
        doc = driver_result(binary, ["--repeats", "2", "--arms", "registered,unregistered",
                                     "--json", json_path])
        with open(json_path) as f:
            file_doc = json.load(f)
    # A failed arm (error key, nulls) and the offload_param loop's phases.
    failed = driver_result(binary, ["--arms", "registered,unregistered"],
                           {"ZOB_TEST_CHILD_FAULT": "registered:exit"}, expect_rc=1)
    # A device lost in the middle of the steps: failed_step and failed_phase.
    mid_run = driver_result(binary, ["--arms", "registered,unregistered"],
                            {"ZOB_TEST_DEVICE_FAULT": "registered:embedding_forward:2"},
                            expect_rc=1)
    offload = driver_result(binary, ["--offload-param", "--arms", "pageable,hostalloc"])
    # stock and overlap fuse Adam with the host cast: the adam_cast phase, both bounds.
    fused = driver_result(binary, ["--offload-param", "--schedule", "overlap", "--arms",
                                   "registered"])
    if "adam_cast" not in fused["registered"]["phases"] or \
            "physical_s" not in fused["registered"]["bound"]:
        sys.exit("FAIL: --schedule overlap --offload-param: no adam_cast phase or physical bound")
    v2 = driver_result(binary, ["--compat", "v2", "--ablate-register"])
    # --gpus: the ranks array, of a good arm and of one whose rank 1 died.
    ranked = driver_result(binary, ["--gpus", "2", "--repeats", "2"])
    ranked_failed = driver_result(binary, ["--gpus", "2", "--arms", "registered"],
                                  {"ZOB_TEST_RANK_FAULT": "registered:1:exit"}, expect_rc=1)

    models = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models")
    decoder = model_result(binary, os.path.join(models, "tiny-llama-tied"))
    if decoder["workload"]["architecture"]["model_type"] != "llama":
        sys.exit("FAIL: --model: workload.architecture does not describe the decoder")
    # deepspeed (the default schedule) runs the eager decoder by default, states its device ops
    # and counts them; with --decoder fused there are none to state.
    if "device_ops_plan" not in decoder or "device_ops" not in decoder["registered"]:
        sys.exit("FAIL: --model (eager decoder by default): no device_ops_plan / device_ops")
    if decoder["workload"].get("decoder") != "eager":
        sys.exit("FAIL: --model under deepspeed: workload.decoder is not \"eager\"")
    fused_decoder = model_result(binary, os.path.join(models, "tiny-llama-tied"),
                                 ["--decoder", "fused"])
    if "device_ops_plan" in fused_decoder or "device_ops" in fused_decoder["registered"]:
        sys.exit("FAIL: --model --decoder fused: device_ops_plan / device_ops present")
    if fused_decoder["workload"].get("decoder") != "fused":
        sys.exit("FAIL: --model --decoder fused: workload.decoder is not \"fused\"")

    for name, d in [("--repeats 2", doc), ("--json file", file_doc), ("failed arm", failed),
                    ("mid-run fault", mid_run),
                    ("--offload-param", offload), ("overlap --offload-param", fused),
                    ("--compat v2", v2), ("--gpus 2", ranked),
                    ("--gpus 2, rank 1 died", ranked_failed), ("--model", decoder),
                    ("--model --decoder fused", fused_decoder)]:
        errors = sorted(validator.iter_errors(d), key=lambda e: list(e.path))
        for e in errors:
            print(f"{name}: {'/'.join(map(str, e.path))}: {e.message}", file=sys.stderr)
        if errors:
            sys.exit(f"FAIL: {name}: {len(errors)} schema violations")
    if doc["repeats"] != 2 or len(doc["registered"]["rounds"]) != 2:
        sys.exit("FAIL: --repeats 2 did not give two rounds")

    # The schema must be able to fail: an undocumented key, a missing required key of the
    # Python contract, a wrong type.
    extra = copy.deepcopy(doc)
    extra["registered"]["undocumented"] = 1
    must_fail(validator, extra, "an undocumented arm key")
    missing = copy.deepcopy(doc)
    del missing["unregistered"]["step_avg_s"]
    must_fail(validator, missing, "no step_avg_s")
    wrong = copy.deepcopy(doc)
    wrong["speedup"] = "2.3x"
    must_fail(validator, wrong, "a string speedup")
    if len(ranked["registered"]["ranks"]) != 2 or len(ranked_failed["registered"]["ranks"]) != 2:
        sys.exit("FAIL: --gpus 2 did not give two ranks")
    if any("rank slice" not in k["placement"]["policy"] for k in ranked["registered"]["ranks"]):
        sys.exit("FAIL: --gpus 2: a rank's placement does not name its slice")
    bad_policy = copy.deepcopy(ranked)
    bad_policy["registered"]["ranks"][0]["placement"]["policy"] = "rank slice two"
    must_fail(validator, bad_policy, "a rank placement policy without its slice numbers")
    bad_arch = copy.deepcopy(decoder)
    bad_arch["workload"]["architecture"]["model_type"] = "gpt2"
    must_fail(validator, bad_arch, "an architecture of an unknown model_type")
    if mid_run["registered"]["failed_step"] != 2 or failed["registered"]["failed_step"] is not None:
        sys.exit("FAIL: failed_step is not the step of a mid-run fault, or not null outside one")
    # The CPU device has no registration: every arm says so; a failed arm was never asked.
    if {doc[a]["registered_at_driver"] for a in ("registered", "unregistered")} != \
            {"not-applicable"} or failed["registered"]["registered_at_driver"] != "not-checked":
        sys.exit("FAIL: registered_at_driver is not not-applicable on the CPU device, or not "
                 "not-checked for a failed arm")
    bad_driver = copy.deepcopy(doc)
    bad_driver["unregistered"]["registered_at_driver"] = "some"
    must_fail(validator, bad_driver, "a registered_at_driver that is no answer")
    bad_phase = copy.deepcopy(mid_run)
    bad_phase["registered"]["failed_phase"] = "setup"
    must_fail(validator, bad_phase, "a failed_phase that is no phase")
    print("ok: 9 documents valid against", schema_path)


if __name__ == "__main__":
    main()
