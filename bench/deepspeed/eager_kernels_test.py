#!/usr/bin/env python3
"""CI check of bench/deepspeed/eager_kernels.py (no torch, no GPU) on a small hand-made trace of one
decoder layer whose answer is known: kernels go to the outermost op that launched them, layers and
roles are found from the op order, backward nodes land on the forward op that created them (the
last op carrying their sequence number), the totals and launch gaps add up; and the tool's Device
calls are counted from C++ text. Exit 0 when every check passes; prints 'N passed, N failed'."""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # bench/
from checklist import Checks  # noqa: E402
import eager_kernels as ek  # noqa: E402

H = [2, 4, 8]  # [batch, seq, hidden]


class Trace:
    """Builds events: a cpu op at a time, optionally nested, with kernels launched from it."""

    def __init__(self):
        self.ev, self.ext, self.t = [], 0, {1: 0.0, 2: 0.0}

    def op(self, name, tid=1, dims=(), types=(), seq=None, kernels=0, memsets=0, nested=None):
        t0 = self.t[tid]
        self.ext += 1
        args = {"External id": self.ext, "Input Dims": list(dims), "Input type": list(types)}
        if seq is not None:
            args["Sequence number"] = seq
        self.ev.append({"ph": "X", "cat": "cpu_op", "name": name, "tid": tid, "pid": 1, "ts": t0, "dur": 50.0, "args": args})
        launcher = self.ext
        if nested:  # an inner op (aten::addmm inside aten::linear) launches the kernels
            self.ext += 1
            self.ev.append({"ph": "X", "cat": "cpu_op", "name": nested, "tid": tid, "pid": 1, "ts": t0 + 1, "dur": 40.0,
                            "args": {"External id": self.ext, "Input Dims": [], "Input type": [],
                                     **({"Sequence number": seq} if seq is not None else {})}})
            launcher = self.ext
        for i in range(kernels + memsets):
            corr = 10000 + len(self.ev)
            self.ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "tid": tid, "pid": 1,
                            "ts": t0 + 2 + 10 * i, "dur": 4.0, "args": {"correlation": corr}})
            self.ev.append({"ph": "X", "cat": "kernel" if i < kernels else "gpu_memset", "name": f"k_{name}_{i}",
                            "tid": 7, "pid": 0, "ts": 5000 + corr, "dur": 2.0,
                            "args": {"External id": launcher, "correlation": corr}})
        self.t[tid] = t0 + 100.0


def norm(tr, seq0):
    tr.op("aten::to", dims=[H], types=["c10::BFloat16"], kernels=1)
    tr.op("aten::pow", dims=[H], types=["float"], kernels=1, seq=seq0)
    tr.op("aten::mul", dims=[[8], H], types=["c10::BFloat16"] * 2, kernels=1)


def made_trace():
    tr = Trace()
    tr.ev.append({"ph": "X", "cat": "user_annotation", "name": "forward", "tid": 1, "pid": 1, "ts": 0.0, "dur": 5000.0})
    tr.op("aten::embedding", kernels=1)
    norm(tr, seq0=1)  # layer 0: input_layernorm
    for _ in range(3):  # q, k, v: the kernel is the nested addmm's
        tr.op("aten::linear", dims=[H, [8, 8]], types=["c10::BFloat16"] * 2, nested="aten::addmm", kernels=1)
    tr.op("aten::unsqueeze", seq=30)  # creates no node: the mul after it, same number, does
    tr.op("aten::mul", dims=[[2, 2, 4, 4], [1, 1, 4, 4]], types=["c10::BFloat16"] * 2, seq=30, kernels=2)
    tr.op("aten::scaled_dot_product_attention", kernels=1, memsets=1)
    tr.op("aten::linear", nested="aten::mm", kernels=1)  # o_proj
    tr.op("aten::add", kernels=1)  # residual
    norm(tr, seq0=2)  # post_attention_layernorm
    tr.op("aten::linear", nested="aten::mm", kernels=1)  # gate
    tr.op("aten::silu", kernels=1)
    tr.op("aten::linear", nested="aten::mm", kernels=1)  # up
    tr.op("aten::mul", kernels=1)
    tr.op("aten::linear", dims=[[2, 4, 16], [8, 16]], nested="aten::mm", seq=20, kernels=1)  # down
    tr.op("aten::add", kernels=1)
    norm(tr, seq0=3)  # final norm
    tr.op("aten::linear", nested="aten::mm", kernels=1)  # lm_head
    tr.op("aten::sum", kernels=1)
    tr.ev.append({"ph": "X", "cat": "user_annotation", "name": "backward", "tid": 1, "pid": 1, "ts": 5000.0, "dur": 5000.0})
    tr.t[2] = 5100.0
    tr.op("autograd::engine::evaluate_function: MmBackward0", tid=2, seq=20, kernels=2, memsets=1)
    tr.op("autograd::engine::evaluate_function: MulBackward0", tid=2, seq=30, kernels=3)
    tr.op("autograd::engine::evaluate_function: PowBackward0", tid=2, seq=1, kernels=3)
    tr.op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", tid=2, kernels=0)
    return {"traceEvents": tr.ev}


def main():
    check = Checks()
    ek.load = lambda path: made_trace()["traceEvents"]  # analyze() reads through load()
    a = ek.analyze("hand-made/trace.json")
    check(a["n_layers"] == 1, f"one decoder layer found between the norms (found {a['n_layers']})")
    fwd = {(seg, role, op.split(" ")[0]): v[0] for (seg, role, op), v in a["fwd"].items()}
    check(fwd.get(("layer", "q_proj", "aten::linear")) == 1, "a nested addmm's kernel counts for its aten::linear (q_proj)")
    check(fwd.get(("layer", "input_layernorm (RMSNorm)", "aten::pow")) == 1, "the first pow is input_layernorm's")
    check(fwd.get(("layer", "post_attention_layernorm (RMSNorm)", "aten::to")) == 1, "the upcast after o_proj's add opens the second norm")
    check(fwd.get(("layer", "residual add", "aten::add")) == 2, "both residual adds are found")
    check(fwd.get(("layer", "sdpa", "aten::scaled_dot_product_attention")) == 2, "sdpa: a kernel and a memset")
    check(fwd.get(("layer", "rotary (apply_rotary_pos_emb)", "aten::mul")) == 2, "rotary's mul launches 2")
    check(fwd.get(("head", "lm_head", "aten::linear")) == 1 and fwd.get(("head", "loss (logits, sum)", "aten::sum")) == 1,
          "the head: lm_head, then the loss's sum")
    check(fwd.get(("prelude", "embed_tokens", "aten::embedding")) == 1, "the embedding is the prelude")
    check(a["fwd_per_layer"][0] == 21, f"21 device ops in the layer (got {a['fwd_per_layer'][0]})")
    bwd = {(seg, role, op): v[0] for (seg, role, op), v in a["bwd"].items()}
    check(bwd.get(("layer", "down_proj", "MmBackward0 <- aten::linear [2, 4, 16] [8, 16]")) == 3,
          "a backward node lands on the forward op of its sequence number (down_proj), memset included")
    check(any(op.startswith("MulBackward0 <- aten::mul") for (_, _, op) in bwd),
          "a number shared by two ops goes to the last one (the mul, not the unsqueeze)")
    check(bwd.get(("layer", "input_layernorm (RMSNorm)", "PowBackward0 <- aten::pow [2, 4, 8] float")) == 3,
          "PowBackward0 is input_layernorm's")
    t = a["totals"]
    check(t["forward"]["kernels"] == 26 and t["forward"]["memsets"] == 1, f"forward totals 26 + 1 (got {t['forward']['kernels']} + {t['forward']['memsets']})")
    check(t["backward"]["kernels"] == 8 and t["backward"]["launch_calls"] == 9, "backward totals: 8 kernels, 9 launches")
    check(abs(t["forward"]["device_ms"] - 27 * 2e-3) < 1e-9, "device time sums the kernels' durations")
    check(abs(t["backward"]["gap_median_us"] - 6.0) < 1e-9, "the median host gap between launches (10 us apart, 4 us long)")
    cpp = ("void f() {\n  dev.gemm({x});\n  linear(a, b);\n  if (bias_) {\n    dev.bias_add(q);\n  }\n"
           "  if (tied_) dev_->residual_add(g);\n  helper(a);\n  std::sqrt(x);\n}\n")
    calls = ek._conditional_calls(ek._body(cpp, "void f("))
    check(calls == [("gemm", ""), ("gemm", ""), ("bias_add", "bias"), ("residual_add", "tied")],
          f"Device calls and their conditions from C++ text (got {calls})")
    check(ek.tool_summary(calls, bias=False, tied=True) == {"gemm": (2, 2), "residual_add": (1, 1)},
          "without a bias the bias_add is not counted")
    src = ek.tool_calls(os.path.join(here, "..", ".."))
    check(sum(n == "gemm" for n, _ in src["forward"]) == 7, "the tool's layer forward has 7 gemm (q, k, v, o, gate, up, down)")
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
