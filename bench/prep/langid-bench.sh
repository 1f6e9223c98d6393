#!/usr/bin/env bash
# Language-ID benchmark: renders translated manual pages (scripts/multilingual-text), splits them into
# train and test pages, trains a fastText model on the train pages with fastText's own tool (the
# "user brings a model" case), then runs langid_bench on the test pages for CLD2 and that model.
# Not a test; the numbers go to bench/RESULTS.md by hand.
#
# Usage: bench/prep/langid-bench.sh [PAGES_PER_LANG=30] [WORK=${TMPDIR:-/tmp}/smelt-langid-bench]
# Split: a page is a test page when the cksum of its name without the locale prefix is 0 mod 3, so
# the same page in zh_CN and zh_TW (or pt and pt_BR) never lands on both sides.
# Env: BUILD (default build) holds langid_bench.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
pages=${1:-30}
work=${2:-${TMPDIR:-/tmp}/smelt-langid-bench}
bench=${BUILD:-$root/build}/langid_bench
[ -x "$bench" ] || { echo "langid-bench: $bench not built (cmake --build build --target langid_bench)" >&2; exit 1; }
command -v fasttext >/dev/null || { echo "langid-bench: fastText's tool missing (apt-get install fasttext)" >&2; exit 1; }

rm -rf "$work" && mkdir -p "$work/test"
"$root/scripts/multilingual-text" "$work/all" "$pages" >"$work/render.log"
: >"$work/train.txt"
for d in "$work"/all/*/; do
  iso=$(basename "$d")
  mkdir -p "$work/test/$iso"
  for f in "$d"*.txt; do
    name=$(basename "$f"); page=${name#*-}
    if [ $(( $(printf '%s' "$page" | cksum | cut -d' ' -f1) % 3 )) -eq 0 ]; then
      cp "$f" "$work/test/$iso/"
    else  # one training example per line of at least 20 bytes
      awk -v l="$iso" 'length($0) >= 20 { print "__label__" l " " $0 }' "$f" >>"$work/train.txt"
    fi
  done
done
echo "train: $(wc -l <"$work/train.txt") lines; test: $(find "$work/test" -name '*.txt' | wc -l) pages"
fasttext supervised -input "$work/train.txt" -output "$work/lid" -dim 16 -epoch 25 -lr 0.5 -minn 2 -maxn 4 \
  -bucket 200000 -thread 1 -seed 1 >"$work/train.log" 2>&1
lscpu | grep 'Model name' | sed 's/  */ /g'
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$bench" "$work/test" "$work/lid.bin"
