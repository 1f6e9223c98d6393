#!/usr/bin/python3
"""Independent log-likelihoods of `smelt eval --tasks` requests, for tests/cli/eval_tasks_cmd_test.cpp.
Reads the model that `smelt export --format hf` wrote (model.safetensors parsed from the spec by
hf_export_check.read_safetensors, config.json) and runs the float64 forward of llama_ref.py (written
from the Hugging Face Llama description) over each request's tokens: context + continuation without
its last token, one sequence at a time, then sums log_softmax(logits)[continuation token] over the
continuation's positions (a context too long for the model cut from the left as docs/eval.md
says), the softmax taken over the tokenizer's ids (VOCAB; ids beyond it are
padding the tokenizer never produces, left out as the server does).

Usage: /usr/bin/python3 eval_check.py EXPORT_DIR SAMPLES.jsonl VOCAB OUT.json
SAMPLES: `smelt eval --samples` records of multiple_choice / loglikelihood tasks (context_ids and
requests[].continuation_ids). OUT: [[sum per request] per record], in the file's order.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_export_check  # noqa: E402
import llama_ref  # noqa: E402


def main():
    d, samples, vocab, out_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    cfg = json.load(open(os.path.join(d, "config.json")))
    tensors, _ = hf_export_check.read_safetensors(os.path.join(d, "model.safetensors"))
    p = {k: v.to(torch.float64) for k, v in tensors.items()}
    V, C, L = cfg["vocab_size"], cfg["hidden_size"], cfg["num_hidden_layers"]
    NH, NKV, H = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["intermediate_size"]
    tied = 1 if cfg["tie_word_embeddings"] else 0
    torch.set_num_threads(1)
    out = []
    with open(samples) as f:
        for line in f:
            rec = json.loads(line)
            ctx = rec["context_ids"]
            # The documented cut of a long context: keep its last tokens so that context +
            # the longest continuation without its last token fit max_position_embeddings.
            longest = max(len(r["continuation_ids"]) for r in rec["requests"])
            keep = min(len(ctx), cfg["max_position_embeddings"] - (longest - 1))
            ctx = ctx[len(ctx) - keep:]
            sums = []
            for req in rec["requests"]:
                cont = req["continuation_ids"]
                seq = ctx + cont[:-1]
                T = len(seq)
                rcfg = {"int": [V, C, L, NH, NKV, H, tied, 1, T],
                        "float": [float(cfg["rope_theta"]), float(cfg["rms_norm_eps"])]}
                batch = {"inputs": torch.tensor([seq], dtype=torch.int32),
                         "targets": torch.zeros(1, T, dtype=torch.int32)}
                with torch.no_grad():
                    logits, _ = llama_ref.forward(p, rcfg, batch)
                lp = torch.log_softmax(logits[0, :, :vocab], dim=-1)
                first = len(ctx) - 1
                sums.append(sum(float(lp[first + i, t]) for i, t in enumerate(cont)))
            out.append(sums)
    with open(out_path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
