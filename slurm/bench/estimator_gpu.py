#!/usr/bin/env python3
"""Peak GPU memory of reference workloads, for the estimator's error table
(docs/results/estimator-gpu-*.md): GPT-2 small/medium/large, a Llama-style 1B and 7B, and
ResNet-50, each in a fresh process on GPU 0 with random weights (no download).

Usage: estimator_gpu.py            every workload, one child process each, JSON lines
       estimator_gpu.py NAME       one workload in this process

Per workload: the CUDA context (NVML's used memory after CUDA starts, less before), PyTorch's
max_memory_allocated and max_memory_reserved, and the peak of NVML's used memory sampled every
5 ms while the workload runs, less the memory used before the process started CUDA. Read-only
with respect to the GPU's settings.
"""
import json, os, subprocess, sys, threading, time

W = {
    # name: (kind, shape, phase, dtype, batch, seq)
    "gpt2-small-train-fp32": ("gpt2", (12, 768, 12), "train", "fp32", 8, 1024),
    "gpt2-medium-train-fp32": ("gpt2", (24, 1024, 16), "train", "fp32", 8, 1024),
    "gpt2-large-train-fp32": ("gpt2", (36, 1280, 20), "train", "fp32", 4, 1024),
    "gpt2-large-infer-fp16": ("gpt2", (36, 1280, 20), "infer", "fp16", 1, 1024),
    "llama-1b-train-bf16": ("llama", (16, 2048, 32, 5632), "train", "bf16", 4, 1024),
    "llama-1b-infer-bf16": ("llama", (16, 2048, 32, 5632), "infer", "bf16", 1, 2048),
    "llama-7b-infer-bf16": ("llama", (32, 4096, 32, 11008), "infer", "bf16", 1, 4096),
    "llama-7b-infer-bf16-b8": ("llama", (32, 4096, 32, 11008), "infer", "bf16", 8, 2048),
    "resnet50-train-fp32": ("resnet50", None, "train", "fp32", 64, 224),
    "resnet50-infer-fp32": ("resnet50", None, "infer", "fp32", 64, 224),
}


def nvml_used():
    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    return lambda: pynvml.nvmlDeviceGetMemoryInfo(h).used


def one(name):
    kind, shape, phase, dtype, batch, seq = W[name]
    used = nvml_used()
    base = used()
    import torch
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    context = used() - base
    peak = [0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], used())
            time.sleep(0.005)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    dt = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    if kind == "resnet50":
        import torchvision
        model = torchvision.models.resnet50().cuda()
        x = torch.randn(batch, 3, seq, seq, device="cuda")
        y = torch.randint(0, 1000, (batch,), device="cuda")
        params = sum(p.numel() for p in model.parameters())
        if phase == "train":
            opt = torch.optim.AdamW(model.parameters())
            for _ in range(3):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        else:
            model.eval()
            with torch.no_grad():
                for _ in range(3):
                    model(x)
    else:
        import transformers
        if kind == "gpt2":
            L, h, a = shape
            cfg = transformers.GPT2Config(n_layer=L, n_embd=h, n_head=a, n_positions=max(1024, seq))
            cls = transformers.GPT2LMHeadModel
        else:
            L, h, a, inter = shape
            cfg = transformers.LlamaConfig(num_hidden_layers=L, hidden_size=h, num_attention_heads=a,
                                           num_key_value_heads=a, intermediate_size=inter,
                                           max_position_embeddings=max(4096, seq), vocab_size=32000)
            cls = transformers.LlamaForCausalLM
        ids = torch.randint(0, cfg.vocab_size, (batch, seq), device="cuda")
        if phase == "train":
            # fp32 weights; bf16/fp16 through autocast (mixed precision: fp32 master weights).
            with torch.device("cuda"):
                model = cls(cfg)
            params = sum(p.numel() for p in model.parameters())
            opt = torch.optim.AdamW(model.parameters())
            ctx = torch.autocast("cuda", dtype=dt) if dt != torch.float32 else torch.autocast("cuda", enabled=False)
            for _ in range(3):
                with ctx:
                    loss = model(input_ids=ids, labels=ids).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        else:
            torch.set_default_dtype(dt)
            with torch.device("cuda"):
                model = cls(cfg).eval()
            torch.set_default_dtype(torch.float32)
            params = sum(p.numel() for p in model.parameters())
            with torch.no_grad():
                for _ in range(2):
                    out = model(input_ids=ids, use_cache=True)
                    del out
    torch.cuda.synchronize()
    time.sleep(0.05)
    stop.set()
    t.join()
    print(json.dumps({
        "name": name, "params": params, "phase": phase, "dtype": dtype, "batch": batch, "seq": seq,
        "context_bytes": context,
        "max_allocated_bytes": torch.cuda.max_memory_allocated(),
        "max_reserved_bytes": torch.cuda.max_memory_reserved(),
        "nvml_peak_bytes": peak[0] - base,
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
    }), flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        one(sys.argv[1])
    else:
        for name in W:
            r = subprocess.run([sys.executable, __file__, name], capture_output=True, text=True, timeout=240)
            if r.returncode != 0:
                print(json.dumps({"name": name, "error": r.stderr.strip().splitlines()[-3:]}), flush=True)
            else:
                print(r.stdout.strip(), flush=True)
