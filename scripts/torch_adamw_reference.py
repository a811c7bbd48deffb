"""Same-box reference for `zero3-offload-bench adam`: PyTorch's fused CPU AdamW on the same
number of fp32 parameters and threads (issue: CPU Adam at DRAM speed), and (issue 25) the same
AdamW followed by PyTorch's cast of the master into a bf16 copy (`copy_`, round to nearest
even), the separate passes the tool's fused Adam + cast is held against. The two are
interleaved in every repeat. Run on the GPU machine, whose image has PyTorch:
  python3 scripts/torch_adamw_reference.py PARAMS THREADS REPEATS
The keys of the first version (impl .. times_s: AdamW alone) keep their meaning; the `cast_`
keys are AdamW + cast."""
import json
import statistics
import sys
import time

import torch

n, threads, repeats = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
p = torch.randn(n)
g = torch.randn(n)
m = torch.zeros(n)
v = torch.zeros(n)
p_bf16 = torch.empty(n, dtype=torch.bfloat16)
step = torch.zeros(())


def adamw():
    torch._fused_adamw_([p], [g], [m], [v], [], [step], lr=1e-4, beta1=0.9, beta2=0.999,
                        weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


times, cast_times = [], []
for i in range(repeats + 1):  # the first of each is a warm-up
    dt = timed(adamw)
    dc = timed(lambda: (adamw(), p_bf16.copy_(p)))
    if i > 0:
        times.append(dt)
        cast_times.append(dc)
med = statistics.median(times)
cast_med = statistics.median(cast_times)
print(json.dumps({"impl": "torch._fused_adamw_", "torch": torch.__version__, "params": n,
                  "threads": threads, "median_s": med, "gparams_per_s": n / med / 1e9,
                  "gb_per_s": 28 * n / med / 1e9, "times_s": times,
                  "cast_impl": "torch._fused_adamw_ then bf16 copy_ of the master",
                  "cast_median_s": cast_med, "cast_gparams_per_s": n / cast_med / 1e9,
                  "cast_times_s": cast_times}))
