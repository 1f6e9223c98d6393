#!/usr/bin/python3
"""PyTorch side of bench/train/model_bench: the same decoder (tests/reference/llama_ref.py's
forward) at the same sizes, forward + backward + clip + AdamW on random tokens, tokens/s; eager
float32, or bf16 autocast around forward + loss (fp32 master weights, gradients and AdamW state).
Not a reference for correctness (that is llama_ref.py, in float64).

Usage: /usr/bin/python3 model_bench_torch.py CONFIG.toml [threads] [steps]
           [--precision fp32|bf16] [--gemm-seconds S]
CONFIG: [model] (missing keys take Smelt's ModelConfig defaults, so both sides build one model);
batch and sequence length from [bench] batch / seq_len, else [data] batch_size / seq_len.
--gemm-seconds S > 0: after the steps, also time torch.mm at the model's GEMM shapes (forward,
dinp, dweight of every linear layer and the head at N = B*T rows) in the run's precision, about
S seconds a shape, and print the step-weighted rate: this back end's own ceiling for MFU.
Debian's torch runs fp32 GEMMs on OpenBLAS, whose own thread pool follows OPENBLAS_NUM_THREADS,
not torch.set_num_threads (bench/train/run sets both, so "1 thread" really is one core); bf16
GEMMs run on oneDNN (AMX or AVX512-BF16 where the CPU has them) on torch's OpenMP threads.
"""
import argparse
import os
import sys
import time
import tomllib

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "reference"))
import llama_ref  # noqa: E402

# Smelt's ModelConfig defaults (src/smelt/model/config.hpp), for keys a config leaves out
SMELT_DEFAULTS = {"vocab_size": 512, "d_model": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4,
                  "ffn_hidden": 176, "rope_theta": 10000.0, "norm_eps": 1e-5,
                  "tie_embeddings": True, "head_dim": 0, "qkv_bias": False, "qk_norm": False}


def bench_shape(cfg):
    b, d = cfg.get("bench", {}), cfg.get("data", {})
    return b.get("batch", d.get("batch_size", 4)), b.get("seq_len", d.get("seq_len", 512))


def param_shapes(V, C, L, NH, NKV, H, tied, HS=0, qkv_bias=False, qk_norm=False):
    HS = HS or C // NH
    shapes = {"model.embed_tokens.weight": (V, C)}
    for l in range(L):
        pre = "model.layers.%d." % l
        if qkv_bias:  # Qwen2
            shapes.update({pre + "self_attn.q_proj.bias": (NH * HS,), pre + "self_attn.k_proj.bias": (NKV * HS,),
                           pre + "self_attn.v_proj.bias": (NKV * HS,)})
        if qk_norm:  # Qwen3
            shapes.update({pre + "self_attn.q_norm.weight": (HS,), pre + "self_attn.k_norm.weight": (HS,)})
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
    return shapes


def gemm_rate(shapes, tied, N, dtype, seconds):
    """Step-weighted GFLOP/s of torch.mm over the linear layers' three GEMMs each (out = in W^T,
    dinp = dout W, dweight = dout^T in), each shape timed best of repeats for ~seconds."""
    mats = [s for n, s in shapes.items() if len(s) == 2 and (n != "model.embed_tokens.weight" or tied)]
    count = {}
    for out, inp in mats:  # (M, K, N) of C (M,N) = A (M,K) B (K,N), as many times a step
        for mkn in ((N, inp, out), (N, out, inp), (out, N, inp)):
            count[mkn] = count.get(mkn, 0) + 1
    flop = secs = 0.0
    for (M, K, Nn), k in count.items():
        a, b = torch.randn(M, K).to(dtype), torch.randn(K, Nn).to(dtype)
        torch.mm(a, b)  # warm-up (packing buffers, oneDNN primitive creation)
        best, t_end = 1e30, time.perf_counter() + seconds
        while True:
            t0 = time.perf_counter()
            torch.mm(a, b)
            t1 = time.perf_counter()
            best = min(best, t1 - t0)
            if t1 > t_end:
                break
        flop += 2.0 * M * K * Nn * k
        secs += best * k
    return flop / secs * 1e-9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("threads", nargs="?", type=int, default=1)
    ap.add_argument("steps", nargs="?", type=int, default=3)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--gemm-seconds", type=float, default=0)
    a = ap.parse_args()
    cfg = tomllib.load(open(a.config, "rb"))
    threads, steps, bf16 = a.threads, a.steps, a.precision == "bf16"
    torch.set_num_threads(threads)
    m = dict(SMELT_DEFAULTS, **cfg.get("model", {}))
    B, T = bench_shape(cfg)
    V, C, L, NH = m["vocab_size"], m["d_model"], m["n_layers"], m["n_heads"]
    NKV, H, tied = m["n_kv_heads"], m["ffn_hidden"], m["tie_embeddings"]
    shapes = param_shapes(V, C, L, NH, NKV, H, tied, m["head_dim"], m["qkv_bias"], m["qk_norm"])
    # the FLOP count of model_bench.cpp: 6 x matmul parameters + 12 x L x C x T
    matmul_params = sum(s[0] * s[1] for n, s in shapes.items()
                        if len(s) == 2 and (n != "model.embed_tokens.weight" or tied))
    flop_per_token = 6.0 * matmul_params + 12.0 * L * C * T
    print("model: V %d C %d L %d NH %d NKV %d H %d tied %d, %.2f M matmul params, batch %dx%d" %
          (V, C, L, NH, NKV, H, int(tied), matmul_params * 1e-6, B, T))
    print("flops: %.1f MFLOP per token, %.1f GFLOP per step" %
          (flop_per_token * 1e-6, flop_per_token * B * T * 1e-9))
    g = torch.Generator().manual_seed(1)
    p = {n: (torch.randn(s, generator=g) * 0.02 if len(s) == 2 or n.endswith(".bias") else torch.ones(s)).requires_grad_(True)
         for n, s in shapes.items()}
    batch = {"inputs": torch.randint(0, V, (B, T), generator=g, dtype=torch.int32),
             "targets": torch.randint(0, V, (B, T), generator=g, dtype=torch.int32)}
    c = {"int": [V, C, L, NH, NKV, H, int(tied), B, T], "float": [m["rope_theta"], m["norm_eps"]],
         "ext": [m["head_dim"], int(m["qkv_bias"]), int(m["qk_norm"]), 0, 0]}
    opt = torch.optim.AdamW(list(p.values()), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    times, cpu = [], 0.0
    for s in range(steps + 1):
        t0 = time.perf_counter()
        c0 = time.process_time()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
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
    gemm = gemm_rate(shapes, tied, B * T, torch.bfloat16 if bf16 else torch.float32,
                     a.gemm_seconds) if a.gemm_seconds > 0 else 0.0
    print("torch threads %d %s batch %dx%d: mean %.0f tokens/s, best %.0f tokens/s" %
          (threads, a.precision, B, T, B * T * len(times) / sum(times), B * T / min(times)))
    print("result torch threads %d precision %s best_tps %.1f mean_tps %.1f cpu_s_per_step %.3f "
          "blas_threads %s blas_core %s gemm_gflops %.1f" %
          (threads, a.precision, B * T / min(times), B * T * len(times) / sum(times),
           cpu / len(times), os.environ.get("OPENBLAS_NUM_THREADS", "default"),
           os.environ.get("OPENBLAS_CORETYPE", "installed"), gemm))


if __name__ == "__main__":
    main()
