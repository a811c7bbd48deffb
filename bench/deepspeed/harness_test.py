#!/usr/bin/env python3
"""CI check of bench/deepspeed/harness.py's ds_config and partial offload (no torch, no GPU, no
DeepSpeed): `--offload-ratio` writes zero_optimization.offload_optimizer.ratio (and only when
given), is refused outside [0, 1], reaches the child with and without --no-offload-param; and
the sub-group split and device formula that harness.py checks DeepSpeed's engine against
(DeepSpeed 0.19.8 stage3.py: _create_fp16_sub_groups, subgroup_to_device) give the known
answers at the shapes bench/h200-ratio.sh runs. Exit 0 when every check passes; prints
'N passed, N failed'."""
import contextlib
import io
import json
import math
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
from checklist import Checks  # noqa: E402
import harness  # noqa: E402

# The ds_config harness.py gave DeepSpeed before --offload-ratio (registered arm, --batch 4):
# without the flag it must stay exactly this.
BEFORE = {
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 1,
    "steps_per_print": 1 << 30,
    "wall_clock_breakdown": False,
    "bf16": {"enabled": True},
    "optimizer": {"type": "AdamW",
                  "params": {"lr": 1e-4, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}},
    "zero_optimization": {"stage": 3,
                          "offload_optimizer": {"device": "cpu", "pin_memory": True},
                          "offload_param": {"device": "cpu", "pin_memory": True}},
}


def llama_numels(path):
    """Element counts of a Llama config's parameters in transformers' model.parameters() order
    (embedding; per layer q, k, v, o, gate, up, down, the two norms; the final norm; lm_head
    unless tied)."""
    with open(path) as f:
        c = json.load(f)
    h, inter, vocab = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    hd = c.get("head_dim") or h // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    layer = [h * q, h * kv, h * kv, q * h, h * inter, h * inter, inter * h, h, h]
    out = [vocab * h] + layer * c["num_hidden_layers"] + [h]
    if not c.get("tie_word_embeddings", False):
        out.append(vocab * h)
    return out


def refused(argv):
    """True when harness.parse_args exits with argparse's usage error (2)."""
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            harness.parse_args(argv)
        except SystemExit as e:
            return e.code == 2
    return False


def main():
    check = Checks()
    # ds_config: unchanged without the flag, the key written (as a float in [0, 1]) with it.
    check(harness.ds_config(4, True) == BEFORE, "without --offload-ratio the ds_config is the one before it")
    check("ratio" not in harness.ds_config(4, False)["zero_optimization"]["offload_optimizer"],
          "without --offload-ratio no ratio key (pageable arm)")
    for r in (1.0, 0.5, 0.25, 0.0):
        cfg = harness.ds_config(4, True, True, r)
        oo = cfg["zero_optimization"]["offload_optimizer"]
        ok = (oo.get("ratio") == r and isinstance(oo["ratio"], float) and 0.0 <= oo["ratio"] <= 1.0
              and oo["device"] == "cpu" and "offload_param" in cfg["zero_optimization"])
        check(ok, f"ratio {r}: offload_optimizer.ratio = {r} (a float in [0, 1]), offload_param kept")
        rest = json.loads(json.dumps(cfg))
        del rest["zero_optimization"]["offload_optimizer"]["ratio"]
        check(rest == BEFORE, f"ratio {r}: every other key as before")
    cb = harness.ds_config(4, True, False, 0.5)["zero_optimization"]
    check(cb["offload_optimizer"].get("ratio") == 0.5 and "offload_param" not in cb,
          "--no-offload-param (the copy-back loop): the ratio key, no offload_param")
    check(harness.ds_config(4, True, True, 1)["zero_optimization"]["offload_optimizer"]["ratio"] == 1.0
          and isinstance(harness.ds_config(4, True, True, 1)["zero_optimization"]["offload_optimizer"]["ratio"],
                         float), "an integer ratio is written as a float (1 -> 1.0)")

    # The flag: parsed, bounded, passed to the child.
    a = harness.parse_args([])
    check(a.offload_ratio is None and "--offload-ratio" not in harness.child_argv(a, "registered"),
          "no flag: offload_ratio None, the child gets none")
    a = harness.parse_args(["--offload-ratio", "0.25", "--no-offload-param"])
    argv = harness.child_argv(a, "pinned-unregistered")
    i = argv.index("--offload-ratio") if "--offload-ratio" in argv else -1
    check(a.offload_ratio == 0.25 and i > 0 and float(argv[i + 1]) == 0.25 and "--no-offload-param" in argv,
          "--offload-ratio 0.25 --no-offload-param: both reach the child")
    a = harness.parse_args(["--offload-ratio", "1.0"])
    check(a.offload_ratio == 1.0 and "--offload-ratio" in harness.child_argv(a, "registered"),
          "--offload-ratio 1.0 given explicitly reaches the child (the key is then written)")
    for bad in ("1.5", "-0.1", "nan", "inf", "half"):
        check(refused(["--offload-ratio", bad]), f"--offload-ratio {bad} is refused")
    check(not refused(["--offload-ratio", "0"]) and not refused(["--offload-ratio", "1"]),
          "the bounds 0 and 1 are accepted")

    # --device-memory: the tool's size syntax (decimal GB, binary GiB), refused when not a size.
    a = harness.parse_args(["--device-memory", "25GB"])
    argv = harness.child_argv(a, "registered")
    i = argv.index("--device-memory") if "--device-memory" in argv else -1
    check(a.device_memory == 25 * 10**9 and i > 0 and harness.device_memory_arg(argv[i + 1]) == 25 * 10**9,
          "--device-memory 25GB is 25e9 B and reaches the child as it is")
    check(harness.device_memory_arg("1.5GiB") == 3 * 2**29 and harness.device_memory_arg("4096") == 4096,
          "--device-memory: GiB binary, a bare number in bytes")
    check("--device-memory" not in harness.child_argv(harness.parse_args([]), "registered"),
          "no --device-memory: the child gets none")
    for bad in ("0GB", "-1GB", "25 G", "lots", ""):
        check(refused(["--device-memory", bad]), f"--device-memory {bad!r} is refused")

    # The sub-group split (default sub_group_size 1e9) and where each sub-group lives.
    lay, total = harness.param_layout(32000, 4096, 8)
    synth = [rows * cols for _, rows, cols, _, _ in lay]
    groups = harness.sub_group_split(synth)
    # emb + blocks 0-5 + blocks.6.fc1.weight = 131,072,000 + 6 * 134,238,208 + 67,108,864
    check(groups == [1003610112, 332439552] and sum(groups) == total == 1336049664,
          f"synthetic h4096 l8: 2 sub-groups {groups} (the first closes at blocks.6.fc1.weight)")
    want = {1.0: ["cpu", "cpu"], 0.5: ["cuda", "cpu"], 0.25: ["cuda", "cpu"], 0.0: ["cuda", "cuda"]}
    for r, d in want.items():
        check(harness.sub_group_devices(len(groups), r) == d,
              f"synthetic h4096 l8, ratio {r}: {d} (int((1 - {r}) * 2) = {int((1 - r) * 2)} on the GPU)")
    lay, total = harness.param_layout(32000, 2048, 12)
    d = harness.sub_group_split([rows * cols for _, rows, cols, _, _ in lay])
    check(d == [total] and harness.sub_group_devices(1, 0.5) == ["cpu"] and harness.sub_group_devices(1, 0.0) == ["cuda"],
          "defaults (0.53 B params): one sub-group, on the CPU for every ratio above 0")
    llama = llama_numels(os.path.join(here, "..", "models", "configs", "Llama-3.2-3B.json"))
    lg = harness.sub_group_split(llama)
    check(sum(llama) == 3212749824 and lg == [1007456256, 1006694400, 1006694400, 191904768],
          f"Llama-3.2-3B (3,212,749,824 params, tied head): 4 sub-groups {lg}")
    check(harness.sub_group_devices(4, 0.5) == ["cuda", "cuda", "cpu", "cpu"]
          and harness.sub_group_devices(4, 0.25) == ["cuda", "cuda", "cuda", "cpu"],
          "Llama-3.2-3B: ratio 0.5 keeps 2 sub-groups on the GPU, 0.25 keeps 3")
    # DeepSpeed's float expression, not the exact fraction: (1 - 0.9) * 10 = 0.9999999999999998.
    check(harness.sub_group_devices(10, 0.9).count("cuda") == 0
          and harness.sub_group_devices(10, 0.7).count("cuda") == 3,
          "int((1 - ratio) * n) as DeepSpeed rounds it: ratio 0.9 of 10 -> 0 on the GPU, 0.7 -> 3")
    check(harness.sub_group_split([5, 5, 5], 10) == [10, 5] and harness.sub_group_split([5, 5], 10) == [10]
          and harness.sub_group_split([3, 4, 12, 1], 10) == [19, 1] and harness.sub_group_split([], 10) == [],
          "a sub-group closes at the parameter that reaches sub_group_size, and at the last")

    # sub_group_record reads an engine's optimizer (a stand-in with DeepSpeed's attribute names).
    class Opt:
        fp16_partitioned_groups_flat_numel = groups
        subgroup_to_device = {0: "cuda", 1: "cpu"}
        sub_group_size = 1_000_000_000
        partial_offload = 0.5
        sub_group_to_group_id = {0: 0, 1: 0}

        class backup_optimizer:  # noqa: N801 (DeepSpeed's attribute name; its class is AdamW)
            pass

    rec = harness.sub_group_record(Opt(), 0.5, synth, 1)
    check(rec["num_sub_groups"] == 2 and rec["sub_groups_on_device"] == 1
          and rec["sub_group_numel_on_device"] == 1003610112 and rec["sub_group_device"] == ["cuda", "cpu"]
          and rec["sub_group_device_matches_formula"] and rec["sub_group_numel_matches_formula"]
          and rec["partial_offload"] == 0.5 and json.loads(json.dumps(rec)) == rec,
          "sub_group_record: counts, devices, both formulas agree, JSON-serialisable")
    check(harness.sub_group_record(Opt(), 0.25, synth, 1)["sub_group_device_matches_formula"]
          and not harness.sub_group_record(Opt(), 1.0, synth, 1)["sub_group_device_matches_formula"],
          "sub_group_record: the device check follows the ratio")
    check(math.isclose(rec["sub_group_numel_on_device"] / sum(synth), 0.7512, abs_tol=1e-3),
          "synthetic h4096 l8 at ratio 0.5: 75 % of the elements on the GPU, not 50 %")

    class Opt2(Opt):  # two ranks: each parameter's partition is ceil(n / 2) elements
        fp16_partitioned_groups_flat_numel = [4, 3]
        subgroup_to_device = {0: "cpu", 1: "cpu"}
        sub_group_size = 4
        sub_group_to_group_id = {0: 0, 1: 0}

    r2 = harness.sub_group_record(Opt2(), 1.0, [7, 5], 2)
    check(r2["sub_group_numel_matches_formula"] and not harness.sub_group_record(Opt2(), 1.0, [7, 5], 1)[
        "sub_group_numel_matches_formula"], "--ranks 2: the split is of ceil(n / 2) per parameter")
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
