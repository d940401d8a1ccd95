#!/usr/bin/env python3
"""One load phase on GPU 0 for slurm/bench/hardware.sh: prints one JSON line per phase.

Usage: gpu_load.py PHASE SECONDS   (PHASE: idle, matmul, copy)
Read-only with respect to the GPU's settings: it only allocates memory and runs kernels.
"""
import json, sys, time

phase, seconds = sys.argv[1], float(sys.argv[2])
label = sys.argv[3] if len(sys.argv) > 3 else phase
start = time.time()
work = 0.0
if phase == "idle":
    time.sleep(seconds)
else:
    import torch
    dev = torch.device("cuda:0")
    if phase == "matmul":
        n = 8192
        a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
        torch.cuda.synchronize()
        start = time.time()
        while time.time() - start < seconds:
            for _ in range(20):
                c = a @ b
            torch.cuda.synchronize()
            work += 20 * 2 * n**3
    elif phase == "copy":
        x = torch.empty(2 * 1024**3, device=dev, dtype=torch.uint8)
        y = torch.empty_like(x)
        torch.cuda.synchronize()
        start = time.time()
        while time.time() - start < seconds:
            for _ in range(10):
                y.copy_(x)
            torch.cuda.synchronize()
            work += 10 * 2 * x.numel()
end = time.time()
rate = work / (end - start) / 1e12
print(json.dumps({"phase": label, "start": start, "end": end, "tera_per_s": rate}), flush=True)
