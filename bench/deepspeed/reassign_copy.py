#!/usr/bin/env python3
"""DeepSpeed's reassign at offload_optimizer.ratio < 1, alone: stage3.py's
`fp16_partitioned_groups_flat[i].data.copy_(fp32_partitioned_groups_flat[i].data)` for a
sub-group kept on the device, under --offload-param (a pinned CPU bf16 destination, a CUDA fp32
source). PyTorch runs that blocking copy_ as a D2H of the fp32 into a fresh CPU temporary
(at::empty_like, c10's CPU allocator) and a CPU cast (copy_requires_temporaries). This times the
whole copy_ and its two parts apart (a fresh pageable fp32 tensor filled from the device, then
the cast), each REPEATS times, and prints one JSON line: run it with and without
THP_MEM_ALLOC_ENABLE=1 / C10_THP_MEM_ALLOC_ENABLE=1 (c10 then madvises its allocations into
huge pages) to see what the temporary's page size does to the D2H.

  reassign_copy.py [NUMEL [REPEATS]]   (default: 1003610112, h4096 l8's device sub-group; 3)
"""
import json
import os
import statistics
import sys
import time


def timed(torch, fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t


def main():
    import torch
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1003610112
    repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    src = torch.randn(n, device="cuda", dtype=torch.float32)
    dst = torch.empty(n, dtype=torch.bfloat16).pin_memory()
    whole, d2h, cast = [], [], []
    for _ in range(repeats):
        whole.append(timed(torch, lambda: dst.copy_(src)))
        tmp = None

        def fill():
            nonlocal tmp
            tmp = torch.empty(n, dtype=torch.float32)  # fresh, as at::empty_like gives it
            tmp.copy_(src)
        d2h.append(timed(torch, fill))
        cast.append(timed(torch, lambda: dst.copy_(tmp)))
        ok = torch.equal(dst[:4096].float(), src[:4096].to(torch.bfloat16).float().cpu())
        del tmp
    env = {k: os.environ.get(k) for k in ("THP_MEM_ALLOC_ENABLE", "C10_THP_MEM_ALLOC_ENABLE")}
    with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
        thp = f.read().strip()
    print("REASSIGN=" + json.dumps({
        "numel": n, "repeats": repeats, "env": env, "thp": thp, "torch": torch.__version__,
        "copy_s": whole, "copy_median_s": statistics.median(whole),
        "d2h_fresh_s": d2h, "d2h_fresh_median_s": statistics.median(d2h),
        "d2h_gb_per_s": n * 4 / statistics.median(d2h) / 1e9,
        "cpu_cast_s": cast, "cpu_cast_median_s": statistics.median(cast),
        "values_ok": bool(ok)}))


if __name__ == "__main__":
    main()
