#!/usr/bin/python3
"""Independent PyTorch reference of Smelt's Llama-style decoder (docs/model.md), for
tests/model/model_test.cpp. Written from the architecture description, not from the C++ code:
plain float64 tensor maths with a full (T,T) attention matrix, autograd for every gradient, and
torch.optim.AdamW for optimizer steps.

Usage: /usr/bin/python3 llama_ref.py IN.bin OUT.bin   (Debian's python3-torch)

File format ("SMTN" tensor file, little-endian), used both ways:
  magic  4 bytes  b"SMTN"
  u32    version = 1
  u32    number of tensors
  per tensor:
    u32  name length, then the name (UTF-8, no terminator)
    u8   dtype: 0 = float32, 1 = int32
    u8   ndim, then ndim x i64 dims
    data dims-product elements of dtype, row-major
Input tensors: "config.int" i32 [V, C, L, NH, NKV, H, tied, B, T, steps, segments, positions];
"config.float" f32 [rope_theta, norm_eps, lr, beta1, beta2, eps, weight_decay, grad_clip];
optional "config.ext" i32 [head_dim (0: C/NH), qkv_bias, qk_norm, rope_scaling (0 none, 1 linear,
2 llama3), rope_original_max_seq_len] and "config.rope" f32 [factor, low_freq_factor,
high_freq_factor]: the open-weight families' features (Qwen2 q/k/v biases
"self_attn.{q,k,v}_proj.bias", Qwen3 QK-norm "self_attn.{q,k}_norm.weight", an explicit head size,
Llama 3.1 RoPE scaling), as Hugging Face's modelling code defines them;
"inputs", "targets" i32 (B,T) (target -1 = no loss); optional "segments", "positions" i32 (B,T);
every parameter under its Hugging Face Llama name (model.embed_tokens.weight, ...); optional
"precision.bf16" i32 (1) = 1: bf16 mixed precision of the linear layers and the attention
products (Bf16Linear, Bf16Matmul below).
LoRA (PEFT's definition: y = x W^T + scale * (drop(x) A^T) B^T on a target linear layer): the
adapters under PEFT's names ("base_model.model.model.layers.L.self_attn.q_proj.lora_A.weight",
"...lora_B.weight"; any of q/k/v/o_proj, gate/up/down_proj), "config.lora" f32 [scale], and
optional "lora_mask.model.layers.L.MODULE" f32 (B*T, in): the dropout factors (0 or 1/(1-p)) of
the adapter's input. The adapter products are plain float64 products (also under bf16, where
only the base is rounded).
Output tensors: "logits" f32 (B,T,V), "loss" f32 (1), "grad.<name>" for every parameter (from the
initial weights), and when steps > 0: "loss.step<k>" f32 (1) for k in [0, steps) (the loss before
step k) and "param.<name>" after the last step.
"""
import math
import struct
import sys

import torch


def read_tensors(path):
    out = {}
    with open(path, "rb") as f:
        data = f.read()
    assert data[:4] == b"SMTN", "not an SMTN file"
    version, count = struct.unpack_from("<II", data, 4)
    assert version == 1
    off = 12
    for _ in range(count):
        (n,) = struct.unpack_from("<I", data, off); off += 4
        name = data[off:off + n].decode(); off += n
        dtype, ndim = struct.unpack_from("<BB", data, off); off += 2
        dims = struct.unpack_from("<%dq" % ndim, data, off); off += 8 * ndim
        numel = math.prod(dims)
        dt = torch.float32 if dtype == 0 else torch.int32
        t = torch.frombuffer(bytearray(data[off:off + 4 * numel]), dtype=dt).reshape(dims)
        off += 4 * numel
        out[name] = t.clone()
    return out


def write_tensors(path, tensors):
    with open(path, "wb") as f:
        f.write(b"SMTN" + struct.pack("<II", 1, len(tensors)))
        for name, t in tensors.items():
            t = t.detach().contiguous()
            dtype = 1 if t.dtype == torch.int32 else 0
            if dtype == 0:
                t = t.to(torch.float32)
            nb = name.encode()
            f.write(struct.pack("<I", len(nb)) + nb + struct.pack("<BB", dtype, t.dim()))
            f.write(struct.pack("<%dq" % t.dim(), *t.shape))
            f.write(t.numpy().tobytes())


def bf16(t):
    return t.to(torch.bfloat16).to(t.dtype)


class Bf16Linear(torch.autograd.Function):
    """y = x W^T with both inputs rounded to bf16 and the product summed in full precision; its
    backward rounds the incoming gradient to bf16 too: dx = bf16(dy) bf16(W), dW = bf16(dy)^T
    bf16(x). The definition of bf16 mixed precision for a linear layer (fp32 sums are the only
    rounding left on top of it)."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return bf16(x) @ bf16(w).T

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        g = bf16(dy)
        dw = g.reshape(-1, g.shape[-1]).T @ bf16(x).reshape(-1, x.shape[-1])
        return g @ bf16(w), dw


class Bf16Matmul(torch.autograd.Function):
    """a @ b with both rounded to bf16, and the incoming gradient rounded in backward: the
    attention products (scores, probabilities times values) under bf16 mixed precision."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return bf16(a) @ bf16(b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        g = bf16(g)
        return g @ bf16(b).transpose(-1, -2), bf16(a).transpose(-1, -2) @ g


LINEAR = {"bf16": False}
LORA = {"scale": 0.0, "masks": {}}


def linear(x, w):
    return Bf16Linear.apply(x, w) if LINEAR["bf16"] else x @ w.T


def matmul(a, b):
    return Bf16Matmul.apply(a, b) if LINEAR["bf16"] else a @ b


def adapted(p, pre, module, x, w):
    """The base linear layer `module` of layer prefix `pre` (model.layers.L.) with its LoRA adapter
    when there is one."""
    y = linear(x, w)
    a = "base_model.model." + pre + module + ".lora_A.weight"
    if a not in p:
        return y
    b = a.replace("lora_A", "lora_B")
    mask = LORA["masks"].get(pre + module)
    xd = x if mask is None else x * mask.reshape(x.shape).to(x.dtype)
    return y + LORA["scale"] * ((xd @ p[a].T) @ p[b].T)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def inv_freqs(hs, theta, scaling):
    """HF's rotary inverse frequencies, with rope_scaling as transformers' rope init functions
    define it: "linear" divides every frequency by the factor; "llama3" divides those whose
    wavelength exceeds original / low_freq_factor, keeps those below original / high_freq_factor
    and blends the ones between by smooth = (original / wavelen - low) / (high - low)."""
    inv_freq = theta ** (-torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    kind = scaling["type"]
    if kind == 1:
        return inv_freq / scaling["factor"]
    if kind == 2:
        factor, low, high, old = scaling["factor"], scaling["low"], scaling["high"], scaling["original"]
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old / low, inv_freq / factor, inv_freq)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < old / high) & ~(wavelen > old / low)
        return torch.where(medium, smoothed, scaled)
    return inv_freq


SCALING = {"type": 0}


def rope(x, pos, theta):
    # x (B, heads, T, HS); pos (B, T). HF Llama: angle = pos * theta^(-2i/HS), i < HS/2, duplicated.
    hs = x.shape[-1]
    inv_freq = inv_freqs(hs, theta, SCALING)
    ang = pos.to(torch.float64)[..., None] * inv_freq          # (B, T, HS/2)
    ang = torch.cat((ang, ang), dim=-1)[:, None]               # (B, 1, T, HS)
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)   # float64 angles, x's precision
    return x * cos + rotate_half(x) * sin


def forward(p, cfg, batch):
    V, C, L, NH, NKV, H, tied, B, T = cfg["int"][:9]
    theta, eps = cfg["float"][0], cfg["float"][1]
    ext = cfg.get("ext", [0, 0, 0, 0, 0])
    HS = ext[0] if ext[0] > 0 else C // NH
    inputs = batch["inputs"].long()
    x = p["model.embed_tokens.weight"][inputs]                 # (B,T,C)
    pos = batch.get("positions")
    if pos is None:
        pos = torch.arange(T)[None].expand(B, T)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    mask = causal[None].expand(B, T, T)
    if "segments" in batch:
        s = batch["segments"]
        mask = mask & (s[:, :, None] == s[:, None, :])
    for l in range(L):
        pre = "model.layers.%d." % l
        h = rms_norm(x, p[pre + "input_layernorm.weight"], eps)
        q = adapted(p, pre, "self_attn.q_proj", h, p[pre + "self_attn.q_proj.weight"])
        k = adapted(p, pre, "self_attn.k_proj", h, p[pre + "self_attn.k_proj.weight"])
        v = adapted(p, pre, "self_attn.v_proj", h, p[pre + "self_attn.v_proj.weight"])
        if ext[1]:  # Qwen2: nn.Linear(bias=True) on q, k and v only
            q = q + p[pre + "self_attn.q_proj.bias"]
            k = k + p[pre + "self_attn.k_proj.bias"]
            v = v + p[pre + "self_attn.v_proj.bias"]
        q = q.view(B, T, NH, HS)
        k = k.view(B, T, NKV, HS)
        if ext[2]:  # Qwen3: RMSNorm over head_dim on each head, before RoPE
            q = rms_norm(q, p[pre + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, p[pre + "self_attn.k_norm.weight"], eps)
        q = q.transpose(1, 2)
        k = k.transpose(1, 2)
        v = v.view(B, T, NKV, HS).transpose(1, 2)
        q, k = rope(q, pos, theta), rope(k, pos, theta)
        k = k.repeat_interleave(NH // NKV, dim=1)              # query head h uses kv head h // group
        v = v.repeat_interleave(NH // NKV, dim=1)
        att = matmul(q, k.transpose(-1, -2)) / math.sqrt(HS)   # (B,NH,T,T)
        att = att.masked_fill(~mask[:, None], float("-inf")).softmax(-1)
        y = matmul(att, v).transpose(1, 2).reshape(B, T, NH * HS)
        x = x + adapted(p, pre, "self_attn.o_proj", y, p[pre + "self_attn.o_proj.weight"])
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps)
        g = adapted(p, pre, "mlp.gate_proj", h, p[pre + "mlp.gate_proj.weight"])
        u = adapted(p, pre, "mlp.up_proj", h, p[pre + "mlp.up_proj.weight"])
        x = x + adapted(p, pre, "mlp.down_proj", torch.nn.functional.silu(g) * u, p[pre + "mlp.down_proj.weight"])
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if tied else p["lm_head.weight"]
    logits = linear(x, head)
    loss = torch.nn.functional.cross_entropy(logits.view(-1, V), batch["targets"].long().view(-1),
                                             ignore_index=-1)
    return logits, loss


def main():
    torch.set_num_threads(1)
    t = read_tensors(sys.argv[1])
    ci = [int(v) for v in t.pop("config.int").tolist()]
    cf = [float(v) for v in t.pop("config.float").tolist()]
    cfg = {"int": ci, "float": cf}
    if "config.ext" in t:
        ext = [int(v) for v in t.pop("config.ext").tolist()]
        cfg["ext"] = ext
        factor, low, high = [float(v) for v in t.pop("config.rope").tolist()]
        SCALING.update({"type": ext[3], "original": ext[4], "factor": factor, "low": low, "high": high})
    if "config.lora" in t:
        LORA["scale"] = float(t.pop("config.lora").tolist()[0])
        for n in [n for n in t if n.startswith("lora_mask.")]:
            LORA["masks"][n[len("lora_mask."):]] = t.pop(n).to(torch.float64)
    if "precision.bf16" in t:
        LINEAR["bf16"] = int(t.pop("precision.bf16").tolist()[0]) == 1
    steps, use_seg, use_pos = ci[9], ci[10], ci[11]
    batch = {"inputs": t.pop("inputs"), "targets": t.pop("targets")}
    for key, use in (("segments", use_seg), ("positions", use_pos)):
        if key in t:
            v = t.pop(key)
            if use:
                batch[key] = v
    names = list(t.keys())
    p = {n: t[n].to(torch.float64).requires_grad_(True) for n in names}
    logits, loss = forward(p, cfg, batch)
    loss.backward()
    out = {"logits": logits, "loss": loss.reshape(1)}
    for n in names:
        out["grad." + n] = p[n].grad.clone()
    if steps > 0:
        lr, b1, b2, eps, wd, clip = cf[2:8]
        # Decay on matrices except the embedding (and so the tied head); none on norms.
        decay = [p[n] for n in names if p[n].dim() == 2 and n != "model.embed_tokens.weight"]
        no_decay = [p[n] for n in names if not (p[n].dim() == 2 and n != "model.embed_tokens.weight")]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=lr, betas=(b1, b2), eps=eps)
        for k in range(steps):
            opt.zero_grad()
            _, loss = forward(p, cfg, batch)
            loss.backward()
            if clip > 0:
                torch.nn.utils.clip_grad_norm_([p[n] for n in names], clip)
            opt.step()
            out["loss.step%d" % k] = loss.detach().reshape(1)
        for n in names:
            out["param." + n] = p[n].detach()
    write_tensors(sys.argv[2], out)


if __name__ == "__main__":
    main()
