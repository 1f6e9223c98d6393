#!/usr/bin/python3
"""PyTorch side of bench/lora: a plain LoRA on the same decoder (tests/reference/llama_ref.py's
forward, whose linear layers add scale * (x A^T) B^T where adapters are given) at the same sizes:
the base frozen (requires_grad off) in fp32, or stored in bf16 and run under bf16 autocast, the
adapters (rank R on q, k, v, o, gate, up, down; A small random, B random so every product counts)
trained by AdamW in fp32. Random tokens; tokens/s and peak resident memory.

Usage: /usr/bin/python3 lora_bench_torch.py CONFIG.toml [threads] [steps] [--rank R] [--base fp32|bf16]
"""
import argparse
import os
import resource
import sys
import time
import tomllib

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "reference"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "train"))
import llama_ref  # noqa: E402
from model_bench_torch import SMELT_DEFAULTS, bench_shape, param_shapes  # noqa: E402

MODULES = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
           "mlp.up_proj", "mlp.down_proj"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("threads", nargs="?", type=int, default=1)
    ap.add_argument("steps", nargs="?", type=int, default=3)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--base", choices=["fp32", "bf16"], default="fp32")
    a = ap.parse_args()
    cfg = tomllib.load(open(a.config, "rb"))
    torch.set_num_threads(a.threads)
    m = dict(SMELT_DEFAULTS, **cfg.get("model", {}))
    B, T = bench_shape(cfg)
    V, C, L, NH = m["vocab_size"], m["d_model"], m["n_layers"], m["n_heads"]
    NKV, H, tied = m["n_kv_heads"], m["ffn_hidden"], m["tie_embeddings"]
    shapes = param_shapes(V, C, L, NH, NKV, H, tied)
    bf16 = a.base == "bf16"
    g = torch.Generator().manual_seed(1)
    p = {}
    for n, s in shapes.items():  # the base, frozen; its layer matrices in bf16 for --base bf16
        w = torch.randn(s, generator=g) * 0.02 if len(s) == 2 else torch.ones(s)
        if bf16 and len(s) == 2 and n.startswith("model.layers."):
            w = w.to(torch.bfloat16)
        p[n] = w
    adapters = []
    for l in range(L):
        for mod in MODULES:
            out, inp = shapes["model.layers.%d.%s.weight" % (l, mod)]
            pre = "base_model.model.model.layers.%d.%s." % (l, mod)
            p[pre + "lora_A.weight"] = (torch.randn(a.rank, inp, generator=g) / inp ** 0.5).requires_grad_(True)
            p[pre + "lora_B.weight"] = (torch.randn(out, a.rank, generator=g) * 0.01).requires_grad_(True)
            adapters += [p[pre + "lora_A.weight"], p[pre + "lora_B.weight"]]
    llama_ref.LORA["scale"] = 2.0  # alpha / rank with alpha = 2 rank, as lora_bench
    batch = {"inputs": torch.randint(0, V, (B, T), generator=g, dtype=torch.int32),
             "targets": torch.randint(0, V, (B, T), generator=g, dtype=torch.int32)}
    c = {"int": [V, C, L, NH, NKV, H, int(tied), B, T], "float": [m["rope_theta"], m["norm_eps"]]}
    opt = torch.optim.AdamW(adapters, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    print("torch: %d adapter parameters (rank %d), base %s, batch %dx%d" %
          (sum(x.numel() for x in adapters), a.rank, a.base, B, T))
    times = []
    for s in range(a.steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            _, loss = llama_ref.forward(p, c, batch)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        print("step %d loss %.4f %.3f s" % (s, loss.item(), dt), flush=True)
        if s > 0:
            times.append(dt)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print("result torch threads %d base %s best_tps %.1f mean_tps %.1f peak_rss_mib %.1f" %
          (a.threads, a.base, B * T / min(times), B * T * len(times) / sum(times), peak))


if __name__ == "__main__":
    main()
