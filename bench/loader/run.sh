#!/bin/sh
# Loader benchmark on real tokens (bench/RESULTS.md, "train: loader"): tokenizes the demo corpus with
# GPT-2 and runs loader_bench. Usage: bench/loader/run.sh [BUILD_DIR]   (needs `make demo` data and node
# with tests/reference/node_modules for the GPT-2 tokenizer file)
set -eu
BUILD=${1:-build}
OUT=${TMPDIR:-/tmp}/smelt_loader_bench
mkdir -p "$OUT"
[ -f "$OUT/gpt2.json" ] || (cd tests/reference && node tok_ref.js gpt2-hf "$OUT/gpt2.json" >/dev/null)
[ -f "$OUT/demo.idx" ] || "$BUILD/smelt" tokenize --tokenizer "$OUT/gpt2.json" \
  --input data/demo/refined/part-00000.jsonl.zst --output "$OUT/demo" --overwrite
"$BUILD/loader_bench" --data "$OUT/demo" --eod 50256 --seq 512 --batch 4 --steps 1000 --step-ms 20 \
  --threads 2 --stream-input data/demo/refined/part-00000.jsonl.zst --tokenizer "$OUT/gpt2.json"
