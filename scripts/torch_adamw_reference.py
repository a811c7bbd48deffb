"""Same-box reference for `zero3-offload-bench adam`: PyTorch's fused CPU AdamW on the same
number of fp32 parameters and threads (issue: CPU Adam at DRAM speed). Run on the GPU machine,
whose image has PyTorch:  python3 scripts/torch_adamw_reference.py PARAMS THREADS REPEATS"""
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
step = torch.zeros(())
times = []
for i in range(repeats + 1):
    t0 = time.perf_counter()
    torch._fused_adamw_([p], [g], [m], [v], [], [step], lr=1e-4, beta1=0.9, beta2=0.999,
                        weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    dt = time.perf_counter() - t0
    if i > 0:
        times.append(dt)
med = statistics.median(times)
print(json.dumps({"impl": "torch._fused_adamw_", "torch": torch.__version__, "params": n,
                  "threads": threads, "median_s": med, "gparams_per_s": n / med / 1e9,
                  "gb_per_s": 28 * n / med / 1e9, "times_s": times}))
