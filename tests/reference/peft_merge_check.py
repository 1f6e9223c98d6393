#!/usr/bin/python3
# Independent check of a merged LoRA export: reads the base model's model.safetensors, a PEFT
# adapter folder (adapter_config.json + adapter_model.safetensors) and the merged model's
# model.safetensors with the spec-written reader (safetensors_read.py), merges in float64 as PEFT's
# merge_and_unload defines it (W + lora_alpha / r * B @ A for each target module), and prints JSON:
# {"targets": n merged, "others": n copied, "worst_rel": max over targets of max|merged - ref| /
# max|ref|, "others_identical": bool, "names_match": bool, "adapter_norm": sum |B A|}.
# Usage: peft_merge_check.py BASE.safetensors ADAPTER_DIR MERGED.safetensors
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_read  # noqa: E402


def main(base_path, adapter_dir, merged_path):
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        cfg = json.load(f)
    assert cfg["peft_type"] == "LORA" and not cfg.get("use_rslora") and not cfg.get("use_dora")
    scale = cfg["lora_alpha"] / cfg["r"]
    _, base = safetensors_read.read(base_path)
    _, ad = safetensors_read.read(os.path.join(adapter_dir, "adapter_model.safetensors"))
    _, merged = safetensors_read.read(merged_path)
    prefix = "base_model.model."
    deltas = {}
    for name, (_, a) in ad.items():
        if not name.endswith(".lora_A.weight"):
            continue
        module = name[len(prefix):-len(".lora_A.weight")]
        b = ad[name.replace(".lora_A.", ".lora_B.")][1]
        assert module.split(".")[-1] in cfg["target_modules"], module
        deltas[module + ".weight"] = scale * (b.astype(np.float64) @ a.astype(np.float64))
    worst, others_identical, norm = 0.0, True, 0.0
    for name, (_, w) in base.items():
        m = merged[name][1]
        if name in deltas:
            ref = w.astype(np.float64) + deltas[name]
            worst = max(worst, float(np.abs(m.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30)))
            norm += float(np.abs(deltas[name]).sum())
        else:
            others_identical &= bool(np.array_equal(m, w))
    json.dump({"targets": len(deltas), "others": len(base) - len(deltas), "worst_rel": worst,
               "others_identical": others_identical, "names_match": sorted(base) == sorted(merged),
               "adapter_norm": norm}, sys.stdout)


if __name__ == "__main__":
    main(*sys.argv[1:4])
