#!/usr/bin/python3
"""A whole training run of Smelt's decoder in PyTorch, for tests/model/loss_curve_test.cpp: the
same initial weights, the same batches (one per step), the same warmup + cosine LR schedule,
clip_grad_norm_ and torch.optim.AdamW, in float64 and again in float32. Not the single-step
reference (llama_ref.py, whose forward() this reuses unchanged).

Usage: /usr/bin/python3 llama_train_ref.py IN.bin OUT.bin [f64|f32]   (Debian's python3-torch)
(both precisions by default; naming one lets a caller run the two side by side)

Files are "SMTN" tensor files (format in llama_ref.py).
Input tensors:
  "config.int"   i32 [V, C, L, NH, NKV, H, tied, B, T, steps, warmup]
  "config.float" f32 [rope_theta, norm_eps, lr_peak, lr_min, beta1, beta2, eps, weight_decay,
                      grad_clip]
  "inputs", "targets"  i32 (steps, B, T): batch k is used by step k (target -1 = no loss)
  every parameter under its Hugging Face Llama name, as in llama_ref.py
Output tensors (all f32, shape (steps)):
  "lr"               the schedule computed here (the test checks it equals its own)
  "loss.f64", "loss.f32"   loss of step k's batch before step k's update (for each precision run)
  "norm.f64", "norm.f32"   global gradient norm before clipping (clip_grad_norm_'s return)
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import forward, read_tensors, write_tensors  # noqa: E402


def lr_at(step, steps, warmup, peak, low):
    """Linear warmup over `warmup` steps (step 0 gets peak/warmup), then cosine from peak to low
    at the last step. The same formula as lr_at() in loss_curve_test.cpp."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - 1 - warmup)
    return low + 0.5 * (peak - low) * (1.0 + math.cos(math.pi * progress))


def train(weights, cfg, data, dtype):
    ci, cf = cfg["int"], cfg["float"]
    steps, warmup = ci[9], ci[10]
    peak, low, b1, b2, eps, wd, clip = cf[2:9]
    names = list(weights.keys())
    p = {n: weights[n].to(dtype).clone().requires_grad_(True) for n in names}
    # Decay on matrices except the embedding (and so the tied head); none on norms (as Smelt).
    is_decay = lambda n: p[n].dim() == 2 and n != "model.embed_tokens.weight"
    opt = torch.optim.AdamW([{"params": [p[n] for n in names if is_decay(n)], "weight_decay": wd},
                             {"params": [p[n] for n in names if not is_decay(n)],
                              "weight_decay": 0.0}],
                            lr=peak, betas=(b1, b2), eps=eps)
    losses, norms = [], []
    for k in range(steps):
        lr = lr_at(k, steps, warmup, peak, low)
        for g in opt.param_groups:
            g["lr"] = lr
        batch = {"inputs": data["inputs"][k], "targets": data["targets"][k]}
        opt.zero_grad()
        _, loss = forward(p, cfg, batch)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_([p[n] for n in names], clip if clip > 0 else math.inf)
        opt.step()
        losses.append(loss.item())
        norms.append(float(norm))
    return losses, norms


def main():
    torch.set_num_threads(1)
    t = read_tensors(sys.argv[1])
    ci = [int(v) for v in t.pop("config.int").tolist()]
    cf = [float(v) for v in t.pop("config.float").tolist()]
    # llama_ref.forward reads [V, C, L, NH, NKV, H, tied, B, T] and [theta, eps]: same positions.
    cfg = {"int": ci, "float": cf}
    data = {"inputs": t.pop("inputs"), "targets": t.pop("targets")}
    steps, warmup = ci[9], ci[10]
    out = {"lr": torch.tensor([lr_at(k, steps, warmup, cf[2], cf[3]) for k in range(steps)])}
    runs = sys.argv[3:] or ["f64", "f32"]
    for tag, dtype in (("f64", torch.float64), ("f32", torch.float32)):
        if tag not in runs:
            continue
        losses, norms = train(t, cfg, data, dtype)
        out["loss." + tag] = torch.tensor(losses)
        out["norm." + tag] = torch.tensor(norms)
    write_tensors(sys.argv[2], out)


if __name__ == "__main__":
    main()
