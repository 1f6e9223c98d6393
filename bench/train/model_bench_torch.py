#!/usr/bin/python3
"""PyTorch side of bench/train/model_bench: the same decoder (tests/reference/llama_ref.py's
forward, eager float32) at the same sizes, forward + backward + AdamW on random tokens, tokens/s.
Usage: /usr/bin/python3 model_bench_torch.py CONFIG.toml [threads] [steps]
Debian's torch runs its GEMMs on OpenBLAS, whose own thread pool follows OPENBLAS_NUM_THREADS, not
torch.set_num_threads: bench/train/run sets it, so "1 thread" really is one core.
"""
import os
import sys
import time
import tomllib

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "reference"))
import llama_ref  # noqa: E402


def main():
    cfg = tomllib.load(open(sys.argv[1], "rb"))
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    torch.set_num_threads(threads)
    m, b = cfg["model"], cfg.get("bench", {})
    B, T = b.get("batch", 4), b.get("seq_len", 512)
    V, C, L, NH = m["vocab_size"], m["d_model"], m["n_layers"], m["n_heads"]
    NKV, H = m.get("n_kv_heads", NH), m["ffn_hidden"]
    tied = m.get("tie_embeddings", True)
    HS = C // NH
    shapes = {"model.embed_tokens.weight": (V, C)}
    for l in range(L):
        pre = "model.layers.%d." % l
        shapes.update({pre + "input_layernorm.weight": (C,),
                       pre + "self_attn.q_proj.weight": (NH * HS, C),
                       pre + "self_attn.k_proj.weight": (NKV * HS, C),
                       pre + "self_attn.v_proj.weight": (NKV * HS, C),
                       pre + "self_attn.o_proj.weight": (C, NH * HS),
                       pre + "post_attention_layernorm.weight": (C,),
                       pre + "mlp.gate_proj.weight": (H, C),
                       pre + "mlp.up_proj.weight": (H, C),
                       pre + "mlp.down_proj.weight": (C, H)})
    shapes["model.norm.weight"] = (C,)
    if not tied:
        shapes["lm_head.weight"] = (V, C)
    g = torch.Generator().manual_seed(1)
    p = {n: (torch.randn(s, generator=g) * 0.02 if len(s) == 2 else torch.ones(s)).requires_grad_(True)
         for n, s in shapes.items()}
    batch = {"inputs": torch.randint(0, V, (B, T), generator=g, dtype=torch.int32),
             "targets": torch.randint(0, V, (B, T), generator=g, dtype=torch.int32)}
    c = {"int": [V, C, L, NH, NKV, H, int(tied), B, T], "float": [m.get("rope_theta", 1e4), m.get("norm_eps", 1e-5)]}
    opt = torch.optim.AdamW(list(p.values()), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    times, cpu = [], 0.0
    for s in range(steps + 1):
        t0 = time.perf_counter()
        c0 = time.process_time()
        opt.zero_grad()
        _, loss = llama_ref.forward(p, c, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(p.values()), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        dc = time.process_time() - c0
        print("step %d loss %.4f %.3f s (cpu %.3f s)" % (s, loss.item(), dt, dc), flush=True)
        if s > 0:
            times.append(dt)
            cpu += dc
    print("torch threads %d batch %dx%d: mean %.0f tokens/s, best %.0f tokens/s" %
          (threads, B, T, B * T * len(times) / sum(times), B * T / min(times)))
    print("result torch threads %d best_tps %.1f mean_tps %.1f cpu_s_per_step %.3f blas_threads %s" %
          (threads, B * T / min(times), B * T * len(times) / sum(times), cpu / len(times),
           os.environ.get("OPENBLAS_NUM_THREADS", "default")))


if __name__ == "__main__":
    main()
