"""The peer of bench/cuda/cuda_train_bench: the same Llama-style decoder in PyTorch (RMSNorm,
grouped-query attention through scaled_dot_product_attention's flash kernel, rotate-half RoPE,
SwiGLU, tied embedding), bf16 autocast over fp32 master weights, fused AdamW, on the same
config, batch and sequence length. Prints step time, tokens/s, MFU and one JSON line.
   python3 bench/cuda/torch_llama.py CONFIG.toml --batch B --seq T [--steps N] [--compile]
"""
import argparse, json, math, time, tomllib

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        C, NH, NKV, H = c["d_model"], c["n_heads"], c["n_kv_heads"], c["ffn_hidden"]
        self.NH, self.NKV, self.HS = NH, NKV, C // NH
        self.ln1 = nn.RMSNorm(C, eps=c["norm_eps"])
        self.qkv = nn.Linear(C, (NH + 2 * NKV) * self.HS, bias=False)
        self.o = nn.Linear(NH * self.HS, C, bias=False)
        self.ln2 = nn.RMSNorm(C, eps=c["norm_eps"])
        self.gu = nn.Linear(C, 2 * H, bias=False)
        self.down = nn.Linear(H, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q, k, v = self.qkv(self.ln1(x)).split([self.NH * self.HS, self.NKV * self.HS, self.NKV * self.HS], -1)
        q = q.view(B, T, self.NH, self.HS).transpose(1, 2)
        k = k.view(B, T, self.NKV, self.HS).transpose(1, 2)
        v = v.view(B, T, self.NKV, self.HS).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, -1))
        g, u = self.gu(self.ln2(x)).chunk(2, -1)
        return x + self.down(F.silu(g) * u)


def rope(x, cos, sin):
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], -1)
    return x * cos + rot * sin


class Model(nn.Module):
    def __init__(self, c, T):
        super().__init__()
        self.emb = nn.Embedding(c["vocab_size"], c["d_model"])
        self.blocks = nn.ModuleList(Block(c) for _ in range(c["n_layers"]))
        self.lnf = nn.RMSNorm(c["d_model"], eps=c["norm_eps"])
        HS = c["d_model"] // c["n_heads"]
        inv = c["rope_theta"] ** (-torch.arange(0, HS // 2, dtype=torch.float64) * 2 / HS)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
        ang = torch.cat([ang, ang], -1)
        self.register_buffer("cos", ang.cos().float(), persistent=False)
        self.register_buffer("sin", ang.sin().float(), persistent=False)
        for mod in self.modules():  # Smelt's init: every matrix N(0, 0.02), norms at 1
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                nn.init.normal_(mod.weight, 0.0, 0.02)

    def forward(self, idx, targets):
        x = self.emb(idx)
        for b in self.blocks:
            x = b(x, self.cos, self.sin)
        logits = self.lnf(x) @ self.emb.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def flops_per_token(c, T):  # params.cpp's train_flops_per_token: 6 x matmul parameters + 12 L C T
    C, L, V, H = c["d_model"], c["n_layers"], c["vocab_size"], c["ffn_hidden"]
    HS = C // c["n_heads"]
    per_layer = C * (c["n_heads"] + 2 * c["n_kv_heads"]) * HS + c["n_heads"] * HS * C + 3 * C * H
    return 6 * (L * per_layer + V * C) + 12 * L * C * T


def main():
    p = argparse.ArgumentParser()
    p.add_argument("config")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--peak-tflops", type=float, default=989.0)
    a = p.parse_args()
    with open(a.config, "rb") as f:
        c = {"rope_theta": 10000.0, "norm_eps": 1e-5, **tomllib.load(f)["model"]}
    torch.manual_seed(0)
    m = Model(c, a.seq).cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    step_fn = torch.compile(m) if a.compile else m
    idx = torch.randint(0, c["vocab_size"], (a.batch, a.seq), device="cuda")
    tgt = torch.randint(0, c["vocab_size"], (a.batch, a.seq), device="cuda")
    times = []
    for s in range(3 + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_fn(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if s >= 3:
            times.append(time.perf_counter() - t0)
    step = sum(times) / len(times)
    tok_s = a.batch * a.seq / step
    fl = flops_per_token(c, a.seq) * tok_s
    name = torch.cuda.get_device_name()
    print(f"{name}  PyTorch {torch.__version__}{' compiled' if a.compile else ''}  B={a.batch} T={a.seq}  "
          f"step {step * 1e3:.2f} ms  {tok_s:.0f} tokens/s  MFU {100 * fl / (a.peak_tflops * 1e12):.1f}%  "
          f"loss {loss.item():.4f}")
    print(json.dumps({"gpu": name, "config": a.config, "torch": torch.__version__, "compiled": a.compile,
                      "B": a.batch, "T": a.seq, "step_ms": step * 1e3, "tokens_per_s": tok_s,
                      "tflops": fl / 1e12, "mfu_peak": fl / (a.peak_tflops * 1e12)}))


if __name__ == "__main__":
    main()
