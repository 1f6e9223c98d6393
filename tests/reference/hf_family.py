#!/usr/bin/python3
"""Independent Hugging Face checkpoints of the Llama family, and an independent forward pass over
them, for the tests of `smelt import --hf DIR`. Not Smelt code and not read from it: the folder
layout follows what transformers' save_pretrained writes, the safetensors files follow the format
description (https://github.com/huggingface/safetensors#format), and the forward follows the
Hugging Face modelling code of LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and
Qwen3ForCausalLM, in float64 with a full (T,T) attention matrix.

Usage (Debian's python3-torch; the `python3` on PATH may lack torch):
  /usr/bin/python3 hf_family.py write OUT_DIR --family FAMILY --dtype {fp32,fp16,bf16} --shards N
                                      --seed S --tokenizer TOKENIZER_JSON [--vocab V] [--published]
                                     [--layers N]
  /usr/bin/python3 hf_family.py logprobs HF_DIR IN.smtn OUT.smtn

write: FAMILY is one of smollm2, llama3.2, mistral, qwen2.5, qwen3, llama3-untied-big-vocab (see
FAMILIES: each the published config.json of one model, scaled down in its size keys only).
OUT_DIR gets
  config.json              the family's keys, vocab_size, torch_dtype of --dtype (sorted, indent 2)
  model.safetensors        when N = 1; else model-0000k-of-0000N.safetensors (k = 1..N), split in
                           module order by cumulative bytes, and model.safetensors.index.json =
                           {"metadata": {"total_size": bytes}, "weight_map": {name: file}}
  generation_config.json   bos/eos ids and sampling keys as the family publishes them
  tokenizer.json           a byte copy of TOKENIZER_JSON
  tokenizer_config.json    bos/eos tokens, add_bos_token where the family has it, added_tokens_decoder,
                           a chat_template in the family's style, model_max_length, tokenizer_class
vocab_size = V, or (largest id in the tokenizer's model.vocab and added_tokens) + 1 rounded up to a
multiple of 64; rows past the tokenizer are padding, as in the published models. bos/eos are the
family's tokens where the tokenizer has them, else "<|endoftext|>", else its first added token.
A safetensors file: u64 LE header length n, n bytes of JSON {"__metadata__": {"format": "pt"},
name: {"dtype": "F32"|"F16"|"BF16", "shape": [...], "data_offsets": [b, e]}} padded with spaces
to a multiple of 8, then the tensors' little-endian bytes in name order (offsets relative to the
data start). Weights: torch.manual_seed(S), drawn in float32 in module order (so fp32, fp16 and
bf16 writes of one seed differ only by rounding), sized so attention is far from uniform and the
logits spread: projections normal(0, 1.5/sqrt(fan_in)), embeddings and lm_head normal(0, 2/sqrt(C)),
norm weights 1 + 0.1 normal, q_norm/k_norm 1 + 0.2 normal, Qwen2 q/k/v biases normal(0, 0.5).
Tied families write no lm_head.weight.

logprobs: IN is an "SMTN" tensor file (llama_ref.py's format, read and written by its
read_tensors/write_tensors) holding "tokens" i32 (B,T). HF_DIR's config.json and safetensors
(single or indexed; F32, F16, BF16 or F64) are read to float64 and run at positions 0..T-1 of each
row. OUT gets "logits" f32 (B,T,V) and "logprobs" f32 (B,T,V) = log_softmax of the float64 logits.
Refused with exit 1: other architectures, hidden_act other than silu, mlp_bias on Llama,
attention_bias on Llama/Qwen3 (it biases o_proj too), Qwen sliding windows in use, rope types
other than default, linear and llama3. Mistral's sliding_window, when set, masks keys q - k >= window.
"""
import argparse
import json
import math
import os
import shutil
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_ref import read_tensors, write_tensors  # noqa: E402

# ---------------------------------------------------------------------------------------------
# Families: the published config.json of each model, every key as its model card has it; the size
# keys are scaled down so a 2-layer model runs in seconds on 2 cores, each published value in a
# comment. vocab_size and torch_dtype are set by `write`.

LLAMA3_CHAT = ("{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
               "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim "
               "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
               "{{ content }}{% endfor %}{% if add_generation_prompt %}"
               "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
SMOLLM2_CHAT = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                "{% endif %}")
MISTRAL_CHAT = ("{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
                "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
                "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
                "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
                "{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant "
                "roles are supported!') }}{% endif %}{% endfor %}")
QWEN25_CHAT = ("{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\n' + messages[0]['content'] + "
               "'<|im_end|>\n' }}{%- else %}{{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. "
               "You are a helpful assistant.<|im_end|>\n' }}{%- endif %}{%- for message in messages %}"
               "{%- if not (message.role == 'system' and loop.first) %}{{- '<|im_start|>' + message.role + "
               "'\n' + message.content + '<|im_end|>\n' }}{%- endif %}{%- endfor %}"
               "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}")
QWEN3_CHAT = ("{%- for message in messages %}{{- '<|im_start|>' + message.role + '\n' + message.content + "
              "'<|im_end|>\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}"
              "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}"
              "{%- endif %}{%- endif %}")

# Each family: "config" (config.json less vocab_size/torch_dtype/bos/eos ids), "tied", token
# candidates per role ("bos", "eos", "pad", "unk": first present in the tokenizer wins),
# "generation" (generation_config.json less the ids), "tokenizer_config" (less the tokens),
# "gen_eos_list" (generation eos_token_id is [eos, pad], as Qwen3 publishes).
FAMILIES = {
    # HuggingFaceTB/SmolLM2-135M. Published: num_hidden_layers 30; widths kept (hidden 576, 9 heads,
    # 3 kv heads, intermediate 1536); vocab_size 49152.
    "smollm2": {
        "config": {
            "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "hidden_act": "silu", "hidden_size": 576, "initializer_range": 0.041666666666666664,
            "intermediate_size": 1536, "is_llama_config": True, "max_position_embeddings": 8192,
            "mlp_bias": False, "model_type": "llama", "num_attention_heads": 9,
            "num_hidden_layers": 2,  # published 30
            "num_key_value_heads": 3, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_interleaved": False,
            "rope_scaling": None, "rope_theta": 100000, "tie_word_embeddings": True,
            "transformers_version": "4.42.3", "use_cache": True},
        "bos": ["<|endoftext|>"], "eos": ["<|endoftext|>"], "unk": ["<|endoftext|>"],
        "generation": {"_from_model_config": True, "transformers_version": "4.42.3"},
        "tokenizer_config": {"add_prefix_space": False, "chat_template": SMOLLM2_CHAT,
                             "clean_up_tokenization_spaces": False, "model_max_length": 8192,
                             "tokenizer_class": "GPT2Tokenizer"},
    },
    # meta-llama/Llama-3.2-1B. Published: hidden_size 2048, num_attention_heads 32,
    # num_key_value_heads 8, intermediate_size 8192, num_hidden_layers 16, head_dim 64 (kept),
    # max_position_embeddings 131072 and rope_scaling.original_max_position_embeddings 8192; these two
    # are 2048 and 64 here so the llama3 scaling changes the frequencies used at short positions
    # (factor 32 kept: 64 x 32 = 2048). vocab_size 128256.
    "llama3.2": {
        "config": {
            "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "head_dim": 64, "hidden_act": "silu",
            "hidden_size": 256,  # published 2048
            "initializer_range": 0.02,
            "intermediate_size": 512,  # published 8192
            "max_position_embeddings": 2048,  # published 131072
            "mlp_bias": False, "model_type": "llama",
            "num_attention_heads": 4,  # published 32
            "num_hidden_layers": 2,  # published 16
            "num_key_value_heads": 1,  # published 8
            "pretraining_tp": 1, "rms_norm_eps": 1e-05,
            "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                             "original_max_position_embeddings": 64,  # published 8192
                             "rope_type": "llama3"},
            "rope_theta": 500000.0, "tie_word_embeddings": True, "transformers_version": "4.45.0.dev0",
            "use_cache": True},
        "bos": ["<|begin_of_text|>"], "eos": ["<|end_of_text|>"],
        "generation": {"_from_model_config": True, "do_sample": True, "temperature": 0.6, "top_p": 0.9,
                       "transformers_version": "4.45.0.dev0"},
        "tokenizer_config": {"chat_template": LLAMA3_CHAT, "clean_up_tokenization_spaces": True,
                             "model_input_names": ["input_ids", "attention_mask"], "model_max_length": 131072,
                             "tokenizer_class": "PreTrainedTokenizerFast"},
    },
    # mistralai/Mistral-7B-v0.3. Published: hidden_size 4096, num_attention_heads 32,
    # num_key_value_heads 8, intermediate_size 14336, num_hidden_layers 32; vocab_size 32768.
    "mistral": {
        "config": {
            "architectures": ["MistralForCausalLM"], "attention_dropout": 0.0, "hidden_act": "silu",
            "hidden_size": 256,  # published 4096
            "initializer_range": 0.02,
            "intermediate_size": 512,  # published 14336
            "max_position_embeddings": 32768, "model_type": "mistral",
            "num_attention_heads": 4,  # published 32
            "num_hidden_layers": 2,  # published 32
            "num_key_value_heads": 2,  # published 8
            "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": None,
            "tie_word_embeddings": False, "transformers_version": "4.42.0.dev0", "use_cache": True},
        "bos": ["<s>"], "eos": ["</s>"], "unk": ["<unk>"],
        "generation": {"_from_model_config": True, "transformers_version": "4.42.0.dev0"},
        "tokenizer_config": {"add_bos_token": True, "add_eos_token": False, "chat_template": MISTRAL_CHAT,
                             "clean_up_tokenization_spaces": False, "legacy": False,
                             "model_max_length": 1000000000000000019884624838656, "pad_token": None,
                             "sp_model_kwargs": {}, "spaces_between_special_tokens": False,
                             "tokenizer_class": "LlamaTokenizer", "use_default_system_prompt": False},
    },
    # Qwen/Qwen2.5-0.5B. Published: hidden_size 896, num_attention_heads 14, num_key_value_heads 2,
    # intermediate_size 4864, num_hidden_layers 24, max_window_layers 24 (head_dim 64 kept);
    # vocab_size 151936.
    "qwen2.5": {
        "config": {
            "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "hidden_act": "silu",
            "hidden_size": 448,  # published 896
            "initializer_range": 0.02,
            "intermediate_size": 1216,  # published 4864
            "max_position_embeddings": 32768,
            "max_window_layers": 2,  # published 24
            "model_type": "qwen2",
            "num_attention_heads": 7,  # published 14
            "num_hidden_layers": 2,  # published 24
            "num_key_value_heads": 1,  # published 2
            "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
            "tie_word_embeddings": True, "transformers_version": "4.40.1", "use_cache": True,
            "use_mrope": False, "use_sliding_window": False},
        "bos": ["<|endoftext|>"], "eos": ["<|endoftext|>"], "pad": ["<|endoftext|>"], "bos_token_null": True,
        "generation": {"do_sample": False, "max_new_tokens": 2048, "transformers_version": "4.37.0"},
        "tokenizer_config": {"add_prefix_space": False, "chat_template": QWEN25_CHAT,
                             "clean_up_tokenization_spaces": False, "errors": "replace",
                             "model_max_length": 131072, "split_special_tokens": False,
                             "tokenizer_class": "Qwen2Tokenizer", "unk_token": None},
    },
    # Qwen/Qwen3-0.6B. Published: hidden_size 1024, num_attention_heads 16, num_key_value_heads 8,
    # intermediate_size 3072, num_hidden_layers 28, max_window_layers 28; head_dim 128 kept (twice
    # hidden/heads here, so the explicit head size is what works); vocab_size 151936.
    "qwen3": {
        "config": {
            "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "head_dim": 128, "hidden_act": "silu",
            "hidden_size": 256,  # published 1024
            "initializer_range": 0.02,
            "intermediate_size": 768,  # published 3072
            "max_position_embeddings": 40960,
            "max_window_layers": 2,  # published 28
            "model_type": "qwen3",
            "num_attention_heads": 4,  # published 16
            "num_hidden_layers": 2,  # published 28
            "num_key_value_heads": 2,  # published 8
            "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None,
            "tie_word_embeddings": True, "transformers_version": "4.51.0", "use_cache": True,
            "use_sliding_window": False},
        "bos": ["<|endoftext|>"], "eos": ["<|im_end|>", "<|endoftext|>"], "pad": ["<|endoftext|>"],
        "bos_token_null": True, "gen_eos_list": True,
        "generation": {"do_sample": True, "temperature": 0.6, "top_k": 20, "top_p": 0.95,
                       "transformers_version": "4.51.0"},
        "tokenizer_config": {"add_prefix_space": False, "chat_template": QWEN3_CHAT,
                             "clean_up_tokenization_spaces": False, "errors": "replace",
                             "model_max_length": 131072, "split_special_tokens": False,
                             "tokenizer_class": "Qwen2Tokenizer", "unk_token": None},
    },
    # meta-llama/Llama-3.1-8B (untied Llama 3). Published: hidden_size 4096, num_attention_heads 32,
    # num_key_value_heads 8, intermediate_size 14336, num_hidden_layers 32 (no head_dim key: 128
    # derived, 32 here); rope_scaling as published; vocab_size 128256 (here --vocab, up to 256000).
    "llama3-untied-big-vocab": {
        "config": {
            "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
            "hidden_act": "silu",
            "hidden_size": 64,  # published 4096
            "initializer_range": 0.02,
            "intermediate_size": 128,  # published 14336
            "max_position_embeddings": 131072, "mlp_bias": False, "model_type": "llama",
            "num_attention_heads": 2,  # published 32
            "num_hidden_layers": 2,  # published 32
            "num_key_value_heads": 1,  # published 8
            "pretraining_tp": 1, "rms_norm_eps": 1e-05,
            "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                             "original_max_position_embeddings": 8192, "rope_type": "llama3"},
            "rope_theta": 500000.0, "tie_word_embeddings": False, "transformers_version": "4.43.0.dev0",
            "use_cache": True},
        "bos": ["<|begin_of_text|>"], "eos": ["<|end_of_text|>"],
        "generation": {"do_sample": True, "temperature": 0.6, "top_p": 0.9,
                       "transformers_version": "4.43.0.dev0"},
        "tokenizer_config": {"chat_template": LLAMA3_CHAT, "clean_up_tokenization_spaces": True,
                             "model_input_names": ["input_ids", "attention_mask"], "model_max_length": 131072,
                             "tokenizer_class": "PreTrainedTokenizerFast"},
    },
}

MAX_VOCAB = 256000
ST_DTYPE = {"fp32": "F32", "fp16": "F16", "bf16": "BF16"}
TORCH_DTYPE_NAME = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
ARCHS = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM")


def fail(msg):
    print("[hf_family] " + msg, file=sys.stderr)
    sys.exit(1)


def dump_json(path, obj):
    # transformers writes configs with json.dumps(indent=2, sort_keys=True) and a final newline
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


# ---------------------------------------------------------------------------------------------
# safetensors, from the format description

def tensor_bytes(t, dtype):
    """t float32 -> little-endian bytes of dtype ("F32", "F16", "BF16")."""
    t = t.contiguous()
    if dtype == "F32":
        return t.to(torch.float32).numpy().astype("<f4").tobytes()
    if dtype == "F16":
        return t.to(torch.float16).numpy().astype("<f2").tobytes()
    if dtype == "BF16":  # numpy has no bf16: its bit pattern as int16 (round-to-nearest-even by torch)
        return t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
    raise ValueError(dtype)


def safetensors_write(path, tensors, dtype):
    """tensors {name: float32 tensor}, all written as dtype, in name order."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        b = tensor_bytes(tensors[name], dtype)
        header[name] = {"dtype": dtype, "shape": list(tensors[name].shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def safetensors_read(path):
    """-> {name: float64 tensor}; checks the header and the offsets."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        fail(f"{path}: {len(blob)} bytes, shorter than the header length")
    (n,) = struct.unpack_from("<Q", blob, 0)
    if 8 + n > len(blob):
        fail(f"{path}: header length {n} past the file's {len(blob)} bytes")
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = memoryview(blob)[8 + n:]
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        shape = e["shape"]
        count = math.prod(shape)
        raw = bytearray(data[b:end])
        if e["dtype"] == "F32":
            t, size = torch.frombuffer(raw, dtype=torch.float32) if count else torch.zeros(0), 4
        elif e["dtype"] == "F16":
            t, size = torch.frombuffer(raw, dtype=torch.float16) if count else torch.zeros(0), 2
        elif e["dtype"] == "BF16":
            t, size = torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16) if count else torch.zeros(0), 2
        elif e["dtype"] == "F64":
            t, size = torch.frombuffer(raw, dtype=torch.float64) if count else torch.zeros(0), 8
        else:
            fail(f"{path}: tensor {name} has dtype {e['dtype']}; this reader takes F32, F16, BF16, F64")
        if end - b != count * size or end > len(data):
            fail(f"{path}: tensor {name} spans [{b}, {end}) for shape {shape} of {e['dtype']}")
        out[name] = t.to(torch.float64).reshape(shape)  # a copy: to() converts
    return out


def load_weights(hf_dir):
    single = os.path.join(hf_dir, "model.safetensors")
    index = os.path.join(hf_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        p = {}
        for fname in sorted(set(weight_map.values())):
            part = safetensors_read(os.path.join(hf_dir, fname))
            for name in part:
                if weight_map.get(name) != fname:
                    fail(f"{fname}: tensor {name} is not mapped to this file by the index")
            p.update(part)
        missing = [n for n in weight_map if n not in p]
        if missing:
            fail(f"{index}: {len(missing)} mapped tensors not found, first {missing[0]}")
        return p
    if os.path.exists(single):
        return safetensors_read(single)
    fail(f"{hf_dir}: neither model.safetensors nor model.safetensors.index.json")


# ---------------------------------------------------------------------------------------------
# write

def tokenizer_ids(tok):
    """tokenizer.json -> ({content: id}, {id: content}, largest id, added_tokens list)."""
    vocab = tok.get("model", {}).get("vocab", {})
    by_content = {}
    if isinstance(vocab, dict):  # BPE, WordPiece, WordLevel
        by_content.update(vocab)
    else:  # Unigram: [[piece, score], ...], the id is the index
        by_content.update({piece[0]: i for i, piece in enumerate(vocab)})
    added = tok.get("added_tokens") or []
    for a in added:
        by_content[a["content"]] = a["id"]
    by_id = {i: c for c, i in by_content.items()}
    if not by_id:
        fail("the tokenizer has no model.vocab and no added_tokens")
    return by_content, by_id, max(by_id), added


def pick_token(candidates, by_content, added):
    for c in list(candidates) + ["<|endoftext|>"]:
        if c in by_content:
            return c
    specials = [a for a in added if a.get("special")] or added
    if specials:
        return min(specials, key=lambda a: a["id"])["content"]
    return None


def param_shapes(cfg, V):
    """HF parameter names and (out, in) shapes in module (state_dict) order."""
    C, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    NH, NKV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    HS = cfg.get("head_dim") or C // NH
    I = cfg["intermediate_size"]
    arch = cfg["architectures"][0]
    out = [("model.embed_tokens.weight", (V, C))]
    for i in range(L):
        pre = f"model.layers.{i}."
        for proj, rows in (("q", NH * HS), ("k", NKV * HS), ("v", NKV * HS)):
            out.append((pre + f"self_attn.{proj}_proj.weight", (rows, C)))
            if arch == "Qwen2ForCausalLM":
                out.append((pre + f"self_attn.{proj}_proj.bias", (rows,)))
        out.append((pre + "self_attn.o_proj.weight", (C, NH * HS)))
        if arch == "Qwen3ForCausalLM":
            out += [(pre + "self_attn.q_norm.weight", (HS,)), (pre + "self_attn.k_norm.weight", (HS,))]
        out += [(pre + "mlp.gate_proj.weight", (I, C)), (pre + "mlp.up_proj.weight", (I, C)),
                (pre + "mlp.down_proj.weight", (C, I)),
                (pre + "input_layernorm.weight", (C,)), (pre + "post_attention_layernorm.weight", (C,))]
    out.append(("model.norm.weight", (C,)))
    if not cfg["tie_word_embeddings"]:
        out.append(("lm_head.weight", (V, C)))
    return out


def init_weights(cfg, V, seed):
    torch.manual_seed(seed)
    C = cfg["hidden_size"]
    p = {}
    for name, shape in param_shapes(cfg, V):
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            t = torch.randn(shape) * (2.0 / math.sqrt(C))
        elif name.endswith("_norm.weight") and ("q_norm" in name or "k_norm" in name):
            t = 1.0 + 0.2 * torch.randn(shape)
        elif name.endswith("norm.weight"):
            t = 1.0 + 0.1 * torch.randn(shape)
        elif name.endswith(".bias"):
            t = 0.5 * torch.randn(shape)
        else:  # a projection (out, in)
            t = torch.randn(shape) * (1.5 / math.sqrt(shape[1]))
        p[name] = t
    return p


def shard_assign(names, sizes, n):
    """Shard index per tensor in module order: by the cumulative-bytes midpoint, no shard empty."""
    total, cum, prev, out = sum(sizes), 0, 0, []
    for i, size in enumerate(sizes):
        s = min(n - 1, int((cum + size / 2) * n / total))
        s = max(s, prev, n - (len(names) - i))  # enough tensors left for the shards after this one
        s = min(s, prev + 1 if i else 0)        # no shard skipped
        out.append(s)
        prev, cum = s, cum + size
    return out


# The published size keys (--published): the full model's shape, for memory and speed benchmarks
# (bench/import/run), not for the tests (random weights of that size take seconds to minutes).
PUBLISHED = {
    "qwen2.5": {"hidden_size": 896, "intermediate_size": 4864, "max_window_layers": 24, "num_attention_heads": 14,
                "num_hidden_layers": 24, "num_key_value_heads": 2},
    "qwen3": {"hidden_size": 1024, "intermediate_size": 3072, "max_window_layers": 28, "num_attention_heads": 16,
              "num_hidden_layers": 28, "num_key_value_heads": 8},
    "llama3.2": {"hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32, "num_hidden_layers": 16,
                 "num_key_value_heads": 8, "max_position_embeddings": 131072,
                 "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                  "original_max_position_embeddings": 8192, "rope_type": "llama3"}},
}


def cmd_write(a):
    fam = FAMILIES[a.family]
    if a.published:
        if a.family not in PUBLISHED:
            fail(f"--published: no published sizes for {a.family} (have {', '.join(sorted(PUBLISHED))})")
        fam = dict(fam, config=dict(fam["config"], **PUBLISHED[a.family]))
    if a.layers:
        if a.layers < 1:
            fail(f"--layers {a.layers}: at least 1")
        layers = {"num_hidden_layers": a.layers}
        if "max_window_layers" in fam["config"]:
            layers["max_window_layers"] = a.layers
        fam = dict(fam, config=dict(fam["config"], **layers))
    with open(a.tokenizer, encoding="utf-8") as f:
        tok = json.load(f)
    by_content, by_id, max_id, added = tokenizer_ids(tok)
    need = max_id + 1
    V = a.vocab if a.vocab else (need + 63) // 64 * 64
    if V < need or V > MAX_VOCAB:
        fail(f"--vocab {V}: the tokenizer's ids need at least {need}, and at most {MAX_VOCAB} is allowed")
    if a.shards < 1:
        fail(f"--shards {a.shards}: at least 1")

    tokens = {role: pick_token(fam.get(role, []), by_content, added) for role in ("bos", "eos", "pad", "unk")
              if role in fam}
    if tokens["bos"] is None or tokens["eos"] is None:
        fail(f"{a.tokenizer}: no token to serve as bos/eos (no added_tokens and none of the family's)")
    ids = {role: by_content[t] for role, t in tokens.items() if t is not None}

    cfg = dict(fam["config"])
    cfg.update({"vocab_size": V, "torch_dtype": TORCH_DTYPE_NAME[a.dtype],
                "bos_token_id": ids["bos"], "eos_token_id": ids["eos"]})
    os.makedirs(a.out_dir, exist_ok=True)
    dump_json(os.path.join(a.out_dir, "config.json"), cfg)

    gen = dict(fam["generation"])
    gen["bos_token_id"] = ids["bos"]
    if fam.get("gen_eos_list"):
        gen["eos_token_id"] = list(dict.fromkeys([ids["eos"], ids.get("pad", ids["eos"])]))
        gen["pad_token_id"] = ids.get("pad", ids["eos"])
    else:
        gen["eos_token_id"] = ids["eos"]
    dump_json(os.path.join(a.out_dir, "generation_config.json"), gen)

    shutil.copyfile(a.tokenizer, os.path.join(a.out_dir, "tokenizer.json"))
    tc = dict(fam["tokenizer_config"])
    tc["bos_token"] = None if fam.get("bos_token_null") else tokens["bos"]
    tc["eos_token"] = tokens["eos"]
    if "pad" in tokens:
        tc["pad_token"] = tokens["pad"]
    if "unk" in tokens:
        tc["unk_token"] = tokens["unk"]
    tc["added_tokens_decoder"] = {
        str(t["id"]): {k: t.get(k, d) for k, d in (("content", ""), ("lstrip", False), ("normalized", False),
                                                    ("rstrip", False), ("single_word", False), ("special", True))}
        for t in added}
    dump_json(os.path.join(a.out_dir, "tokenizer_config.json"), tc)

    p = init_weights(cfg, V, a.seed)
    st = ST_DTYPE[a.dtype]
    itemsize = 4 if st == "F32" else 2
    names = list(p)
    sizes = [p[n].numel() * itemsize for n in names]
    if a.shards == 1:
        safetensors_write(os.path.join(a.out_dir, "model.safetensors"), p, st)
        return
    if a.shards > len(names):
        fail(f"--shards {a.shards}: the model has only {len(names)} tensors")
    shard = shard_assign(names, sizes, a.shards)
    files = [f"model-{k + 1:05d}-of-{a.shards:05d}.safetensors" for k in range(a.shards)]
    for k, fname in enumerate(files):
        safetensors_write(os.path.join(a.out_dir, fname), {n: p[n] for n, s in zip(names, shard) if s == k}, st)
    index = {"metadata": {"total_size": sum(sizes)},
             "weight_map": {n: files[s] for n, s in sorted(zip(names, shard))}}
    dump_json(os.path.join(a.out_dir, "model.safetensors.index.json"), index)


# ---------------------------------------------------------------------------------------------
# logprobs: the forward of the Hugging Face modelling code, in float64

def rms_norm(x, w, eps):
    # LlamaRMSNorm / Qwen2RMSNorm / Qwen3RMSNorm: x * rsqrt(mean(x^2) + eps), then times the weight
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def inv_freq(cfg, hs):
    """transformers' ROPE_INIT_FUNCTIONS: default, linear, llama3 (_compute_llama3_parameters)."""
    theta = float(cfg.get("rope_theta", 10000.0))
    inv = 1.0 / theta ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    rs = cfg.get("rope_scaling")
    if not rs:
        return inv
    kind = rs.get("rope_type", rs.get("type"))
    if kind == "default":
        return inv
    if kind == "linear":  # positions / factor
        return inv / float(rs["factor"])
    if kind == "llama3":
        factor, low, high = float(rs["factor"]), float(rs["low_freq_factor"]), float(rs["high_freq_factor"])
        old = float(rs["original_max_position_embeddings"])
        low_wavelen, high_wavelen = old / low, old / high
        wavelen = 2 * math.pi / inv
        inv_l = torch.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return torch.where(medium, smoothed, inv_l)
    fail(f"rope_scaling type {kind!r} is not implemented (default, linear, llama3)")


def check_config(cfg):
    arch = (cfg.get("architectures") or ["?"])[0]
    if arch not in ARCHS:
        fail(f"architecture {arch} is not one of {', '.join(ARCHS)}")
    if cfg.get("hidden_act", "silu") != "silu":
        fail(f"hidden_act {cfg['hidden_act']}: only silu")
    # Only LlamaMLP reads mlp_bias, and only Llama and Qwen3 read attention_bias (then o_proj is
    # biased too); Mistral has no biases and Qwen2 always biases q/k/v, whatever these keys say.
    if arch == "LlamaForCausalLM" and cfg.get("mlp_bias"):
        fail(f"mlp_bias true on {arch} is not implemented")
    if arch in ("LlamaForCausalLM", "Qwen3ForCausalLM") and cfg.get("attention_bias"):
        fail(f"attention_bias true on {arch} (biases q/k/v and o_proj) is not implemented")
    if arch in ("Qwen2ForCausalLM", "Qwen3ForCausalLM") and cfg.get("use_sliding_window"):
        fail(f"use_sliding_window true on {arch} is not implemented")
    return arch


def forward(p, cfg, tokens):
    """tokens (B,T) -> logits (B,T,V) float64."""
    arch = check_config(cfg)
    C, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    NH, NKV = cfg["num_attention_heads"], cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    HS = cfg.get("head_dim") or C // NH
    eps = float(cfg["rms_norm_eps"])
    B, T = tokens.shape
    x = p["model.embed_tokens.weight"][tokens.long()]                  # (B,T,C)
    freqs = torch.arange(T, dtype=torch.float64)[:, None] * inv_freq(cfg, HS)[None]
    emb = torch.cat((freqs, freqs), dim=-1)                           # (T,HS)
    cos, sin = emb.cos(), emb.sin()
    q_idx, k_idx = torch.arange(T)[:, None], torch.arange(T)[None]
    allowed = k_idx <= q_idx
    window = cfg.get("sliding_window") if arch == "MistralForCausalLM" else None
    if window:  # Mistral's sliding window: key k is seen from query q when q - k < window
        allowed = allowed & (q_idx - k_idx < window)
    for i in range(L):
        pre = f"model.layers.{i}."
        h = rms_norm(x, p[pre + "input_layernorm.weight"], eps)

        def proj(name, heads):
            y = h @ p[pre + f"self_attn.{name}_proj.weight"].T
            if arch == "Qwen2ForCausalLM":
                y = y + p[pre + f"self_attn.{name}_proj.bias"]
            return y.view(B, T, heads, HS)

        q, k, v = proj("q", NH), proj("k", NKV), proj("v", NKV)
        if arch == "Qwen3ForCausalLM":  # per-head RMSNorm over HS, before RoPE
            q = rms_norm(q, p[pre + "self_attn.q_norm.weight"], eps)
            k = rms_norm(k, p[pre + "self_attn.k_norm.weight"], eps)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)   # (B,heads,T,HS)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(NH // NKV, dim=1)                          # repeat_kv: head h reads kv h // n_rep
        v = v.repeat_interleave(NH // NKV, dim=1)
        att = (q @ k.transpose(-1, -2)) * HS ** -0.5                       # (B,NH,T,T)
        att = att.masked_fill(~allowed, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, NH * HS)
        x = x + y @ p[pre + "self_attn.o_proj.weight"].T
        h = rms_norm(x, p[pre + "post_attention_layernorm.weight"], eps)
        g = h @ p[pre + "mlp.gate_proj.weight"].T
        u = h @ p[pre + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(g) * u) @ p[pre + "mlp.down_proj.weight"].T
    x = rms_norm(x, p["model.norm.weight"], eps)
    head = p["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else p["lm_head.weight"]
    return x @ head.T


def cmd_logprobs(a):
    with open(os.path.join(a.hf_dir, "config.json")) as f:
        cfg = json.load(f)
    check_config(cfg)
    p = load_weights(a.hf_dir)
    tokens = read_tensors(a.input)["tokens"]
    V = p["model.embed_tokens.weight"].shape[0]
    if tokens.dim() != 2 or tokens.min() < 0 or tokens.max() >= V:
        fail(f"{a.input}: tokens must be (B,T) ids in [0, {V})")
    with torch.no_grad():
        logits = forward(p, cfg, tokens)
        lp = torch.log_softmax(logits, dim=-1)
    write_tensors(a.output, {"logprobs": lp.float(), "logits": logits.float()})


def main():
    torch.set_num_threads(2)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("out_dir")
    w.add_argument("--family", required=True, choices=sorted(FAMILIES))
    w.add_argument("--dtype", required=True, choices=sorted(ST_DTYPE))
    w.add_argument("--shards", type=int, default=1)
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--tokenizer", required=True)
    w.add_argument("--vocab", type=int, default=0)
    w.add_argument("--published", action="store_true", help="the published size keys (benchmarks)")
    w.add_argument("--layers", type=int, default=0, help="num_hidden_layers (memory tests; 0: the family's)")
    lp = sub.add_parser("logprobs")
    lp.add_argument("hf_dir")
    lp.add_argument("input")
    lp.add_argument("output")
    a = ap.parse_args()
    cmd_write(a) if a.cmd == "write" else cmd_logprobs(a)


if __name__ == "__main__":
    main()
