#!/usr/bin/python3
"""An independent Hugging Face -> GGUF converter, for the tests of `smelt import --gguf FILE`
(tests/ckpt/import_gguf_test.cpp). Not Smelt code and not read from it: the byte layout follows
ggml's docs/gguf.md (GGUF v3), the naming, metadata and tensor conventions follow llama.cpp's
convert_hf_to_gguf.py for LlamaForCausalLM (arch "llama"), Qwen2ForCausalLM (arch "qwen2") and
Qwen3ForCausalLM (arch "qwen3").

Usage (Debian's python3-torch; no gguf or transformers package needed):
  /usr/bin/python3 gguf_convert.py convert HF_DIR --pre NAME --out OUTTYPE:OUT.gguf[:CRAFT] [--out ...]
  /usr/bin/python3 gguf_convert.py shrink-tokenizer IN.json OUT.json --vocab N

convert: HF_DIR as tests/reference/hf_family.py writes it (config.json, safetensors, tokenizer.json,
tokenizer_config.json). --pre is tokenizer.ggml.pre (convert derives it from a hash of the
tokenizer's output; here the caller names it: "llama-bpe" for Llama 3, "qwen2" for Qwen2). Each --out
writes one file (OUTTYPE f32, f16, bf16 or q8_0), so one run (one start of torch) writes several.
  Tensors: token_embd.weight, blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm,
  ffn_gate, ffn_up, ffn_down}.weight, blk.N.attn_{q,k,v}.bias (qwen2), blk.N.attn_{q,k}_norm.weight
  (qwen3: QK-norm, from self_attn.{q,k}_norm.weight), output_norm.weight,
  output.weight (untied only), rope_freqs.weight (llama with rope_scaling llama3: per-dimension
  frequency factors, as convert's generate_extra_tensors). ne is the torch shape reversed. The llama
  arch's q/k rows are permuted as convert's permute(w, n_head, n_head_kv) (llama.cpp rotates
  adjacent pairs there; qwen2 and qwen3 are NEOX RoPE and not permuted).
  Types: 1-D tensors F32 always; matrices F32, F16, BF16 (round to nearest even) or Q8_0 (blocks of
  32: fp16 d = max|x|/127, int8 q = round-half-away(x / d), as gguf-py's quants.py; a row that is
  not whole blocks falls back to F16).
  Metadata: general.architecture, general.name, general.file_type, general.quantization_version
  (q8_0); {arch}.context_length, embedding_length, block_count, feed_forward_length,
  attention.head_count, attention.head_count_kv, rope.freq_base, attention.layer_norm_rms_epsilon,
  llama: vocab_size and rope.dimension_count; attention.key_length / value_length when config.json
  has head_dim; rope.scaling.type "linear" + rope.scaling.factor for linear scaling;
  tokenizer.ggml.model "gpt2", pre, tokens (id order; ids missing from the tokenizer up to
  vocab_size are "[PAD<id>]" UNUSED), token_type (1 normal, 3 control = special added token,
  4 user-defined = other added token, 5 unused), merges ("a b"), bos/eos (/padding) token ids,
  add_bos_token, tokenizer.chat_template.
  CRAFT: a deliberately unsupported file, for refusal tests: "arch=NAME" (general.architecture
  NAME, the keys unchanged), "rename=NAME" (general.architecture and the {arch}.* keys NAME, the
  tensors unchanged: e.g. a qwen2 file's biases under qwen3), "type=TENSOR=GGMLTYPE" (that tensor's type written as e.g. Q4_K, its
  data zeros of that type's size), "tokenizer_model=NAME" (tokenizer.ggml.model NAME), "u32=KEY=N"
  (an extra u32 metadata key, e.g. llama.expert_count).
shrink-tokenizer: a byte-level BPE tokenizer.json cut to its first N vocabulary ids (merges whose
  result is cut are dropped; added tokens renumbered N, N+1, ... in id order), so a test model with
  a real tokenizer's first ranks stays small.
GGUF v3 bytes (little-endian): "GGUF", u32 3, u64 n_tensors, u64 n_kv; kv = string key, u32 type,
value (string: u64 len + bytes; array: u32 elem type, u64 count, elems); tensor infos = string name,
u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset (from the data section, multiple of
alignment 32); zero padding to 32; data.
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np

torch = None  # imported by convert only (shrink-tokenizer needs no torch)

# gguf value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
# ggml tensor types
GGML = {"F32": 0, "F16": 1, "Q8_0": 8, "Q4_K": 12, "Q6_K": 14, "BF16": 30}
# (block elements, block bytes)
GGML_BLOCK = {0: (1, 4), 1: (1, 2), 8: (32, 34), 12: (256, 144), 14: (256, 210), 30: (1, 2)}
FILE_TYPE = {"f32": 0, "f16": 1, "q8_0": 7, "bf16": 32}  # llama_ftype
ALIGN = 32
TOK_NORMAL, TOK_CONTROL, TOK_USER_DEFINED, TOK_UNUSED = 1, 3, 4, 5


def fail(msg):
    print("[gguf_convert] " + msg, file=sys.stderr)
    sys.exit(1)


# ---------------------------------------------------------------------------------------------
# GGUF writer

def s_bytes(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


class Writer:
    def __init__(self):
        self.kv = []        # (key, bytes of type + value)
        self.tensors = []   # (name, ne, type, data bytes)

    def add(self, key, vtype, value):
        if vtype == STRING:
            body = s_bytes(value)
        elif vtype == ARRAY:
            etype, items = value
            body = struct.pack("<IQ", etype, len(items))
            if etype == STRING:
                body += b"".join(s_bytes(x) for x in items)
            else:
                fmt = {I32: "<i", U32: "<I", F32: "<f"}[etype]
                body += b"".join(struct.pack(fmt, x) for x in items)
        else:
            fmt = {U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q"}[vtype]
            body = struct.pack(fmt, value)
        self.kv.append((key, struct.pack("<I", vtype) + body))

    def tensor(self, name, ne, gtype, data):
        blk, size = GGML_BLOCK[gtype]
        n = math.prod(ne)
        if ne[0] % blk or len(data) != n // blk * size:
            fail(f"tensor {name}: {len(data)} bytes for ne {ne} of type {gtype}")
        self.tensors.append((name, ne, gtype, data))

    def write(self, path):
        head = b"GGUF" + struct.pack("<IQQ", 3, len(self.tensors), len(self.kv))
        for k, v in self.kv:
            head += s_bytes(k) + v
        off = 0
        for name, ne, gtype, data in self.tensors:
            head += s_bytes(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne)
            head += struct.pack("<IQ", gtype, off)
            off += (len(data) + ALIGN - 1) // ALIGN * ALIGN
        head += b"\0" * (-len(head) % ALIGN)
        with open(path + ".tmp", "wb") as f:
            f.write(head)
            for _, _, _, data in self.tensors:
                f.write(data)
                f.write(b"\0" * (-len(data) % ALIGN))
        os.replace(path + ".tmp", path)


# ---------------------------------------------------------------------------------------------
# tensor encodings

def np_roundf(x):
    """C's roundf: half away from zero (gguf-py quants.np_roundf)."""
    a = np.abs(x)
    fl = np.floor(a)
    return np.sign(x) * (fl + np.floor(2 * (a - fl)))


def q8_0_bytes(t32):
    blocks = t32.reshape(-1, 32)
    d = np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)
    with np.errstate(divide="ignore", invalid="ignore"):
        qs = np_roundf(blocks / d)
    qs = np.where(d == 0, 0, qs)
    out = np.concatenate([d.astype("<f2").view(np.uint8), qs.astype(np.int8).view(np.uint8)], axis=1)
    return out.tobytes()


def encode(t64, outtype, name):
    """float64 torch tensor -> (ggml type, bytes)."""
    t32 = t64.to(torch.float32).contiguous().numpy()
    if t64.dim() <= 1 or outtype == "f32":
        return GGML["F32"], t32.astype("<f4").tobytes()
    if outtype == "f16" or (outtype == "q8_0" and t32.shape[-1] % 32):
        return GGML["F16"], t32.astype("<f2").tobytes()
    if outtype == "bf16":
        return GGML["BF16"], t64.to(torch.float32).to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
    if outtype == "q8_0":
        return GGML["Q8_0"], q8_0_bytes(t32)
    fail(f"--outtype {outtype}")


def permute(w, n_head, n_head_kv):
    """convert_hf_to_gguf.py LlamaModel.permute: rotate_half rows -> llama.cpp's adjacent pairs."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_factors(cfg, hs):
    """convert's LlamaModel.generate_extra_tensors for rope_type llama3."""
    rs = cfg["rope_scaling"]
    base = float(cfg.get("rope_theta", 10000.0))
    freqs = 1.0 / (base ** (torch.arange(0, hs, 2, dtype=torch.float32) / hs))
    factor = rs.get("factor", 8.0)
    low, high = rs.get("low_freq_factor", 1.0), rs.get("high_freq_factor", 4.0)
    old = rs.get("original_max_position_embeddings", 8192)
    low_wavelen, high_wavelen = old / low, old / high
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(1)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(out, dtype=torch.float32)


# ---------------------------------------------------------------------------------------------
# convert

def tokenizer_meta(w, hf_dir, cfg, V, pre, model_name):
    with open(os.path.join(hf_dir, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    tc = {}
    tc_path = os.path.join(hf_dir, "tokenizer_config.json")
    if os.path.exists(tc_path):
        with open(tc_path, encoding="utf-8") as f:
            tc = json.load(f)
    m = tok["model"]
    if m.get("type") != "BPE":
        fail(f"{hf_dir}/tokenizer.json: model type {m.get('type')}: only byte-level BPE (gpt2) is converted")
    rev = {i: t for t, i in m["vocab"].items()}
    added = {a["id"]: a for a in tok.get("added_tokens") or []}
    for i, a in added.items():
        rev[i] = a["content"]
    if max(rev) >= V:
        fail(f"token id {max(rev)} >= vocab_size {V}")
    tokens, types = [], []
    for i in range(V):
        if i not in rev:
            tokens.append(f"[PAD{i}]")
            types.append(TOK_UNUSED)
        elif i in added:
            tokens.append(rev[i])
            types.append(TOK_CONTROL if added[i].get("special") else TOK_USER_DEFINED)
        else:
            tokens.append(rev[i])
            types.append(TOK_NORMAL)
    merges = [mm if isinstance(mm, str) else " ".join(mm) for mm in m.get("merges", [])]
    w.add("tokenizer.ggml.model", STRING, model_name)
    w.add("tokenizer.ggml.pre", STRING, pre)
    w.add("tokenizer.ggml.tokens", ARRAY, (STRING, tokens))
    w.add("tokenizer.ggml.token_type", ARRAY, (I32, types))
    w.add("tokenizer.ggml.merges", ARRAY, (STRING, merges))
    # SpecialVocab: tokenizer_config.json's tokens, else config.json's ids.
    by_content = {t: i for i, t in rev.items()}
    for role, key in (("bos", "bos_token_id"), ("eos", "eos_token_id"), ("pad", "padding_token_id")):
        tid = None
        t = tc.get(f"{role}_token")
        if isinstance(t, dict):
            t = t.get("content")
        if isinstance(t, str) and t in by_content:
            tid = by_content[t]
        elif isinstance(cfg.get(f"{role}_token_id"), int):
            tid = cfg[f"{role}_token_id"]
        if tid is not None:
            w.add(f"tokenizer.ggml.{key}", U32, tid)
    add_bos = tc.get("add_bos_token")
    if add_bos is None:  # Llama 3's post-processor adds <|begin_of_text|>; Qwen2's adds nothing
        add_bos = cfg["architectures"][0] == "LlamaForCausalLM" and "bos_token" in tc and tc["bos_token"] is not None
    w.add("tokenizer.ggml.add_bos_token", BOOL, bool(add_bos))
    if tc.get("chat_template"):
        w.add("tokenizer.chat_template", STRING, tc["chat_template"])


def convert_one(a, outtype, out, craft):
    with open(os.path.join(a.hf_dir, "config.json")) as f:
        cfg = json.load(f)
    hf_arch = cfg["architectures"][0]
    arch = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3"}.get(hf_arch)
    if arch is None:
        fail(f"{hf_arch}: this converter writes llama, qwen2 and qwen3 only")
    p = load_weights(a.hf_dir)
    C, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    NH = cfg["num_attention_heads"]
    NKV = cfg.get("num_key_value_heads") or NH
    HS = cfg.get("head_dim") or C // NH
    V = p["model.embed_tokens.weight"].shape[0]
    rs = cfg.get("rope_scaling") or {}
    rope_type = rs.get("rope_type", rs.get("type"))

    w = Writer()
    w.add("general.architecture", STRING, craft.get("arch") or arch)
    w.add("general.name", STRING, os.path.basename(os.path.normpath(a.hf_dir)))
    w.add(f"{arch}.block_count", U32, L)
    w.add(f"{arch}.context_length", U32, cfg["max_position_embeddings"])
    w.add(f"{arch}.embedding_length", U32, C)
    w.add(f"{arch}.feed_forward_length", U32, cfg["intermediate_size"])
    w.add(f"{arch}.attention.head_count", U32, NH)
    w.add(f"{arch}.attention.head_count_kv", U32, NKV)
    w.add(f"{arch}.rope.freq_base", F32, float(cfg.get("rope_theta", 10000.0)))
    w.add(f"{arch}.attention.layer_norm_rms_epsilon", F32, float(cfg["rms_norm_eps"]))
    if "head_dim" in cfg:
        w.add(f"{arch}.attention.key_length", U32, HS)
        w.add(f"{arch}.attention.value_length", U32, HS)
    w.add("general.file_type", U32, FILE_TYPE[outtype])
    if arch == "llama":
        w.add("llama.vocab_size", U32, V)
        w.add("llama.rope.dimension_count", U32, HS)
    if rope_type == "linear":
        w.add(f"{arch}.rope.scaling.type", STRING, "linear")
        w.add(f"{arch}.rope.scaling.factor", F32, float(rs["factor"]))
    elif rope_type not in (None, "default", "llama3"):
        fail(f"rope_scaling type {rope_type}: not converted")
    if outtype == "q8_0":
        w.add("general.quantization_version", U32, 2)
    if "u32" in craft:
        k, v = craft["u32"].rsplit("=", 1)
        w.add(k, U32, int(v))
    tokenizer_meta(w, a.hf_dir, cfg, V, a.pre, craft.get("tokenizer_model") or "gpt2")

    retype = dict([craft["type"].rsplit("=", 1)]) if "type" in craft else {}

    def put(name, t):
        gtype, data = encode(t, outtype, name)
        if name in retype:
            gtype = GGML[retype[name]]
            blk, size = GGML_BLOCK[gtype]
            data = bytes(t.numel() // blk * size)
        w.tensor(name, list(reversed(t.shape)), gtype, data)

    put("token_embd.weight", p["model.embed_tokens.weight"])
    if arch == "llama" and rope_type == "llama3":
        w.tensor("rope_freqs.weight", [HS // 2], GGML["F32"],
                 llama3_rope_factors(cfg, HS).numpy().astype("<f4").tobytes())
    names = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
             "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
             "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
             "self_attn.v_proj.bias": "attn_v.bias", "self_attn.q_norm.weight": "attn_q_norm.weight",
             "self_attn.k_norm.weight": "attn_k_norm.weight", "self_attn.o_proj.weight": "attn_output.weight",
             "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
             "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}
    for i in range(L):
        for hf, gg in names.items():
            key = f"model.layers.{i}.{hf}"
            if key not in p:
                continue
            t = p[key]
            if arch == "llama" and hf == "self_attn.q_proj.weight":
                t = permute(t, NH, NH)
            elif arch == "llama" and hf == "self_attn.k_proj.weight":
                t = permute(t, NH, NKV)
            put(f"blk.{i}.{gg}", t)
    put("output_norm.weight", p["model.norm.weight"])
    if "lm_head.weight" in p and not cfg.get("tie_word_embeddings", False):
        put("output.weight", p["lm_head.weight"])
    if "rename" in craft:
        new = craft["rename"]
        w.kv = [(new + k[len(arch):] if k.startswith(arch + ".") else k,
                 struct.pack("<I", STRING) + s_bytes(new) if k == "general.architecture" else v) for k, v in w.kv]
    w.write(out)


def cmd_convert(a):
    global torch, load_weights
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from hf_family import load_weights  # safetensors -> float64, from the format description
    torch.set_num_threads(2)
    for spec in a.out:
        parts = spec.split(":", 2)
        if len(parts) < 2 or parts[0] not in FILE_TYPE:
            fail(f"--out {spec}: expected OUTTYPE:PATH[:CRAFT], OUTTYPE one of {', '.join(sorted(FILE_TYPE))}")
        craft = dict([parts[2].split("=", 1)]) if len(parts) == 3 else {}
        convert_one(a, parts[0], parts[1], craft)


# ---------------------------------------------------------------------------------------------
# shrink-tokenizer

def cmd_shrink(a):
    with open(a.input, encoding="utf-8") as f:
        tok = json.load(f)
    m = tok["model"]
    vocab = {t: i for t, i in m["vocab"].items() if i < a.vocab}
    if len(vocab) != a.vocab:
        fail(f"{a.input}: ids 0..{a.vocab - 1} are not all in model.vocab")
    merges = []
    for mm in m.get("merges", []):
        l, r = mm.split(" ", 1) if isinstance(mm, str) else mm
        if l + r in vocab and l in vocab and r in vocab:
            merges.append(mm)
    m["vocab"], m["merges"] = vocab, merges
    added = sorted(tok.get("added_tokens") or [], key=lambda x: x["id"])
    for k, x in enumerate(added):
        x["id"] = a.vocab + k
    tok["added_tokens"] = added
    # Post-processors and decoders name special tokens by id in some files: keep only the ones by content.
    with open(a.output, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert")
    c.add_argument("hf_dir")
    c.add_argument("--pre", required=True)
    c.add_argument("--out", action="append", required=True)
    s = sub.add_parser("shrink-tokenizer")
    s.add_argument("input")
    s.add_argument("output")
    s.add_argument("--vocab", type=int, required=True)
    a = ap.parse_args()
    cmd_convert(a) if a.cmd == "convert" else cmd_shrink(a)


if __name__ == "__main__":
    main()
