#!/usr/bin/python3
"""Independent reader of `smelt export --format hf` output, for tests/ckpt/export_hf_test.cpp.
Parses model.safetensors from the format spec (8-byte little-endian header length, JSON header,
raw little-endian data) without the safetensors package, checks config.json and the tensor names
and shapes Hugging Face's LlamaForCausalLM expects for it, then computes logits with the forward
of tests/reference/llama_ref.py (HF rotate_half RoPE, float64).

Usage: /usr/bin/python3 hf_export_check.py EXPORT_DIR IN.bin OUT.bin
IN (SMTN, see llama_ref.py): "inputs" i32 (B,T). OUT: "logits" f32 (B,T,V).
Exits non-zero with a message on any mismatch with the format or the expected layout.
"""
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402


def fail(msg):
    sys.stderr.write("hf_export_check: " + msg + "\n")
    sys.exit(1)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    if 8 + n > len(data):
        fail("%s: header length %d beyond the file" % (path, n))
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    spans, out = [], {}
    for name, e in header.items():
        if e["dtype"] != "F32":
            fail("%s: %s has dtype %s, expected F32" % (path, name, e["dtype"]))
        b, end = e["data_offsets"]
        numel = 1
        for d in e["shape"]:
            numel *= d
        if end - b != 4 * numel:
            fail("%s: %s data_offsets %s do not match shape %s" % (path, name, e["data_offsets"], e["shape"]))
        spans.append((b, end))
        out[name] = torch.frombuffer(bytearray(body[b:end]), dtype=torch.float32).reshape(e["shape"]).clone()
    spans.sort()
    pos = 0
    for b, end in spans:  # the spec: the data region is covered without holes or overlaps
        if b != pos:
            fail("%s: data not contiguous at byte %d" % (path, b))
        pos = end
    if pos != len(body):
        fail("%s: %d bytes of data after the last tensor" % (path, len(body) - pos))
    return out, meta


def main():
    d = sys.argv[1]
    cfg = json.load(open(os.path.join(d, "config.json")))
    if cfg.get("architectures") != ["LlamaForCausalLM"] or cfg.get("model_type") != "llama":
        fail("config.json: not a LlamaForCausalLM config")
    if cfg.get("torch_dtype") != "float32" or cfg.get("hidden_act") != "silu":
        fail("config.json: torch_dtype / hidden_act")
    V, C, L = cfg["vocab_size"], cfg["hidden_size"], cfg["num_hidden_layers"]
    NH, NKV, H = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"]
    tied = bool(cfg["tie_word_embeddings"])
    HS = C // NH
    if cfg.get("head_dim", HS) != HS:
        fail("config.json: head_dim")
    tensors, meta = read_safetensors(os.path.join(d, "model.safetensors"))
    if meta.get("format") != "pt":
        fail("model.safetensors: __metadata__.format must be 'pt' for transformers")
    # What LlamaForCausalLM(config).state_dict() holds (lm_head only when untied).
    want = {"model.embed_tokens.weight": [V, C], "model.norm.weight": [C]}
    for i in range(L):
        p = "model.layers.%d." % i
        want.update({p + "input_layernorm.weight": [C], p + "post_attention_layernorm.weight": [C],
                     p + "self_attn.q_proj.weight": [NH * HS, C], p + "self_attn.k_proj.weight": [NKV * HS, C],
                     p + "self_attn.v_proj.weight": [NKV * HS, C], p + "self_attn.o_proj.weight": [C, NH * HS],
                     p + "mlp.gate_proj.weight": [H, C], p + "mlp.up_proj.weight": [H, C],
                     p + "mlp.down_proj.weight": [C, H]})
    if not tied:
        want["lm_head.weight"] = [V, C]
    got = {k: list(v.shape) for k, v in tensors.items()}
    if got != want:
        missing = sorted(set(want) - set(got))
        extra = sorted(set(got) - set(want))
        wrong = sorted(k for k in set(want) & set(got) if want[k] != got[k])
        fail("tensor set differs: missing %s, extra %s, wrong shape %s" % (missing, extra, wrong))
    inp = llama_ref.read_tensors(sys.argv[2])["inputs"]
    B, T = inp.shape
    p = {k: v.to(torch.float64) for k, v in tensors.items()}
    rcfg = {"int": [V, C, L, NH, NKV, H, 1 if tied else 0, B, T],
            "float": [float(cfg["rope_theta"]), float(cfg["rms_norm_eps"])]}
    batch = {"inputs": inp, "targets": torch.zeros(B, T, dtype=torch.int32)}
    torch.set_num_threads(1)
    with torch.no_grad():
        logits, _ = llama_ref.forward(p, rcfg, batch)
    llama_ref.write_tensors(sys.argv[3], {"logits": logits})


if __name__ == "__main__":
    main()
