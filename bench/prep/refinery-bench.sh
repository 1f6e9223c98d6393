#!/usr/bin/env bash
# The whole prep rate with each refinery stage on and off (issue 32): `smelt prep --threads 1` over
# the demo corpus plus rendered multilingual manual pages, once per stage switched on alone over a
# baseline, once with everything on; input MB/s per worker, docs/s and stats.json's worker seconds
# by stage in one table, then decontaminate_bench and ref_scorer_bench for the stand-alone rates.
# Not a test: it asserts nothing, and the numbers go to bench/RESULTS.md by hand.
#
# Usage: bench/prep/refinery-bench.sh [OUTDIR=${TMPDIR:-/tmp}/smelt-refinery-bench]
# Env: BUILD (default build) holds smelt, smelt-full and the benches; REPS (3) runs per full-input
# row, the fastest kept; ML_PAGES (30) pages per language from scripts/multilingual-text.
#
# Rows (a "stage on" row is the baseline plus that stage alone, so its ratio is that stage's cost):
#   baseline  extraction, language ID (CLD2), quality signals, sampling, dedup; personal data off
#   +pii, +url_filter, +decontaminate, +classifier   each alone on top of the baseline
#   all-but-ppl  every stage but perplexity
# Perplexity (a decoder forward per token) is too slow for the whole corpus on a shared core, so it
# runs on the multilingual pages alone, with a baseline and an "everything on" row over those pages.
# Fixtures, built in OUTDIR: a UT1-style blocklist of 1M synthetic domains (plus URL entries that
# match demo pages), an evaluation set of every 30+-word paragraph of Debian's license, copyright
# and changelog files (plus a few paragraphs of the input, so some documents hit), a fastText
# quality classifier (`smelt quality train`, DCLM's settings: English pages against the same
# pages' words shuffled) and a tiny reference decoder (d_model 64, 2 layers, vocab 4096, 40 steps
# on the baseline's output) - the cost per document matters here, not the models' quality.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-${TMPDIR:-/tmp}/smelt-refinery-bench}
build=${BUILD:-$root/build}
reps=${REPS:-3}
ml_pages=${ML_PAGES:-30}
smelt=$build/smelt
py=/usr/bin/python3  # Debian's python: the fixtures need nothing beyond the standard library
[ -x "$py" ] || py=python3

for b in smelt smelt-full; do
  [ -x "$build/$b" ] || { echo "refinery-bench: $build/$b is missing; build first (cmake --build build --target smelt smelt-full)" >&2; exit 1; }
done
if [ ! -d "$root/data/demo/crawl" ] || [ ! -d "$root/data/demo/text" ]; then
  echo "refinery-bench: the demo corpus (data/demo/crawl, data/demo/text) is missing; run DEMO_CORPUS_ONLY=1 scripts/demo first" >&2
  exit 1
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
fx=$out/fixtures
mkdir -p "$fx" "$out/cfg" "$out/runs"
load_start=$(cat /proc/loadavg)
t_start=$(date +%s)
log() { echo "[refinery-bench $(date +%H:%M:%S)] $*" >&2; }

# --- input: the demo corpus plus the multilingual pages as JSONL (one page a document, a URL each)
log "rendering ${ml_pages} manual pages per language"
rm -rf "$out/ml"
"$root/scripts/multilingual-text" "$out/ml" "$ml_pages" >"$out/ml-render.log"
"$py" - "$out/ml" "$fx/ml.jsonl" <<'EOF'
import json, os, sys
root, dst = sys.argv[1], sys.argv[2]
with open(dst, "w", encoding="utf-8") as out:
    for iso in sorted(os.listdir(root)):
        d = os.path.join(root, iso)
        if not os.path.isdir(d):
            continue
        for i, f in enumerate(sorted(os.listdir(d))):
            text = open(os.path.join(d, f), encoding="utf-8", errors="replace").read()
            out.write(json.dumps({"id": f"ml-{iso}-{i}", "url": f"https://{iso}.example.org/{i}", "text": text},
                                 ensure_ascii=False) + "\n")
EOF
full_inputs=("$root/data/demo/crawl" "$root/data/demo/text" "$fx/ml.jsonl")
ml_inputs=("$fx/ml.jsonl")

# --- one prep run: config fragments -> OUTDIR/cfg/NAME.toml; prints "wall_seconds"
frag_pii_off=$'[prep.pii]\nenabled = false\n'
frag_pii_on=$'[prep.pii]\nenabled = true\n'
prep_run() {  # NAME REP CONFIG_FRAGMENT INPUT...
  local name=$1 rep=$2 frag=$3; shift 3
  local cfg=$out/cfg/$name.toml dst=$out/runs/$name.$rep
  printf '%s' "$frag" >"$cfg"
  rm -rf "$dst"
  local t0 t1
  t0=$(date +%s.%N)
  if ! "$smelt" prep --config "$cfg" --input "$@" --output "$dst" --threads 1 --log-level warn \
      >"$dst.log" 2>&1; then
    echo "refinery-bench: smelt prep failed for row $name (config $cfg); its output:" >&2
    cat "$dst.log" >&2
    exit 1
  fi
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }'
}

# --- fixtures
log "fixture run (baseline config; also warms the page cache)"
prep_run fixture 0 "$frag_pii_off" "${full_inputs[@]}" >/dev/null
fixture_out=$out/runs/fixture.0

log "blocklist: 1M synthetic domains in UT1 layout"
"$py" - "$fx/ut1" <<'EOF'
import os, random, sys
root = sys.argv[1]
rng = random.Random(32)
syll = ["ba", "ko", "ri", "tan", "mel", "zu", "pex", "lo", "vin", "sha", "dor", "qua", "ne", "fi", "gral",
        "sto", "cam", "xel", "jo", "wy", "pra", "mun", "te", "hol"]
tlds = ["com", "net", "org", "info", "ru", "de", "xyz", "top", "biz", "co.uk", "com.br", "pl", "fr", "cn"]
cats = [("adult", 600000), ("gambling", 150000), ("malware", 120000), ("phishing", 80000), ("warez", 50000)]
i = 0
for cat, n in cats:
    os.makedirs(os.path.join(root, cat), exist_ok=True)
    with open(os.path.join(root, cat, "domains"), "w") as f:
        for _ in range(n):
            name = "".join(rng.choice(syll) for _ in range(rng.randint(2, 4)))
            sub = rng.choice(["", "", "", "www.", "m.", "cdn."])
            f.write(f"{sub}{name}{i:x}.{rng.choice(tlds)}\n")
            i += 1
# entries that match real input pages: two demo path prefixes (URL entries) and one language's pages
os.makedirs(os.path.join(root, "bench_input"), exist_ok=True)
with open(os.path.join(root, "bench_input", "urls"), "w") as f:
    f.write("127.0.0.1/doc/python3.11/html\n127.0.0.1/debian-reference\n")
with open(os.path.join(root, "bench_input", "domains"), "w") as f:
    f.write("sr.example.org\n")
EOF
printf -v frag_url '[prep.url_filter]\nblocklists = ["%s"]\nbanned_words = ["porn", "xxx", "casino", "warez", "viagra"]\n' "$fx/ut1"

log "evaluation set for decontamination"
"$py" - "$fx/eval.jsonl" "$fixture_out" "$fx/ml.jsonl" <<'EOF'
import glob, gzip, json, os, re, subprocess, sys
dst, fixture_out, ml = sys.argv[1:4]
paras, seen = [], set()
def add(p):
    p = " ".join(p.split())
    if len(p.split()) >= 30 and p not in seen:
        seen.add(p)
        paras.append(p)
files = sorted(glob.glob("/usr/share/common-licenses/*")) + sorted(glob.glob("/usr/share/doc/*/copyright")) + \
    sorted(glob.glob("/usr/share/doc/*/changelog.Debian.gz"))
for f in files:
    try:
        b = gzip.open(f).read() if f.endswith(".gz") else open(f, "rb").read()
    except OSError:
        continue
    for p in re.split(r"\n\s*\n", b.decode("utf-8", "replace")):
        add(p)
debian = len(paras)
# a few paragraphs that are in the input: every 200th kept demo document's first long paragraph,
# every 20th multilingual page's
def first_long(t):
    for p in re.split(r"\n\s*\n", t):
        if len(p.split()) >= 30:
            return p
parts = sorted(glob.glob(os.path.join(fixture_out, "part-*.jsonl.zst")))
demo = [json.loads(l)["text"] for l in subprocess.run(["zstdcat"] + parts, capture_output=True, check=True).stdout.decode().splitlines()]
ml_docs = [json.loads(l)["text"] for l in open(ml, encoding="utf-8")]
for t in demo[::200] + ml_docs[::20]:
    p = first_long(t)
    if p:
        add(p)
with open(dst, "w", encoding="utf-8") as f:
    for i, p in enumerate(paras):
        f.write(json.dumps({"id": i, "text": p}, ensure_ascii=False) + "\n")
ngrams = sum(max(0, len(p.split()) - 12) for p in paras)
open(dst + ".ngrams", "w").write(f"{ngrams}\n")
print(f"eval set: {ngrams} 13-grams in {len(paras)} paragraphs ({debian} from Debian's license/copyright/changelog files, "
      f"{len(paras) - debian} from the input), {sum(len(p.split()) for p in paras)} words", file=sys.stderr)
EOF
printf -v frag_decon '[prep.decontaminate]\nfiles = ["%s"]\n' "$fx/eval.jsonl"

log "quality classifier (smelt quality train, DCLM's settings)"
"$py" - "$fixture_out" "$fx" <<'EOF'
import glob, json, os, random, subprocess, sys
fixture_out, fx = sys.argv[1:3]
parts = sorted(glob.glob(os.path.join(fixture_out, "part-*.jsonl.zst")))
en = []
for l in subprocess.run(["zstdcat"] + parts, capture_output=True, check=True).stdout.decode().splitlines():
    r = json.loads(l)
    if r.get("quality", {}).get("lang") == "en":
        en.append(r["text"])
rng = random.Random(1)
with open(os.path.join(fx, "hq.jsonl"), "w") as pos, open(os.path.join(fx, "cc.jsonl"), "w") as neg:
    for i, t in enumerate(en[:3000]):
        if i % 2 == 0:
            pos.write(json.dumps({"text": t}) + "\n")
        else:  # the other half with its words shuffled: the "bad text" class
            w = t.split()
            rng.shuffle(w)
            neg.write(json.dumps({"text": " ".join(w)}) + "\n")
EOF
"$smelt" quality train --positive "$fx/hq.jsonl" --negative "$fx/cc.jsonl" --output "$fx/hq.bin" \
  --threads 1 --log-level warn >"$fx/quality-train.log" 2>&1 || { cat "$fx/quality-train.log" >&2; exit 1; }
grep -E 'ROC AUC|trained on' "$fx/quality-train.log" >&2 || true
echo "classifier model: $(du -h "$fx/hq.bin" | cut -f1)" >&2
printf -v frag_cls '[[prep.classifiers]]\nname = "hq"\nmodel = "%s"\nlabel = "hq"\nfactor = true\n' "$fx/hq.bin"

log "reference model for perplexity (tokenizer, tokens, 40 training steps)"
ref=$fx/ref
rm -rf "$ref" && mkdir -p "$ref"
"$smelt" tokenizer train -i "$fixture_out"/part-*.jsonl.zst -o "$ref/tokenizer.json" --vocab-size 4096 \
  --special-tokens '<|endoftext|>' --pretokenizer llama3 -t 2 --log-level warn >"$ref/log" 2>&1
"$smelt" tokenize --tokenizer "$ref/tokenizer.json" -i "$fixture_out"/part-*.jsonl.zst -o "$ref/tokens" --append-eod -t 2 \
  --log-level warn >>"$ref/log" 2>&1
cat >"$ref/ref.toml" <<EOF
[model]
vocab_size = 4096
d_model = 64
n_layers = 2
n_heads = 4
n_kv_heads = 2
ffn_hidden = 176
max_seq_len = 256
tie_embeddings = true
[data]
append_eod = false
seq_len = 256
batch_size = 8
seed = 42
[train]
tokenizer = "$ref/tokenizer.json"
steps = 40
seed = 42
[optim]
lr = 3e-3
warmup_steps = 5
[ckpt]
save_every = 0
EOF
"$smelt" train --config "$ref/ref.toml" --data "$ref/tokens" --threads 2 --run-dir "$ref/run" \
  --log-level warn >>"$ref/log" 2>&1 || { cat "$ref/log" >&2; exit 1; }
# the multilingual pages' tokens under this tokenizer: tokens/s of the perplexity stage
"$smelt" tokenize --tokenizer "$ref/tokenizer.json" -i "$fx/ml.jsonl" -o "$ref/ml-tokens" -t 2 \
  --log-level warn >>"$ref/log" 2>&1
printf -v frag_ppl '[prep.perplexity]\ncheckpoint = "%s"\n' "$ref/run"

# --- the rows
rows=$out/rows.tsv
: >"$rows"
row() {  # NAME INPUT_LABEL REPS FRAGMENT INPUT...
  local name=$1 label=$2 n=$3 frag=$4; shift 4
  local r wall
  for ((r = 1; r <= n; r++)); do
    log "row $name, run $r of $n"
    wall=$(prep_run "$name-$label" "$r" "$frag" "$@")
    printf '%s\t%s\t%s\t%s\n' "$name" "$label" "$wall" "$out/runs/$name-$label.$r" >>"$rows"
  done
}
base=$frag_pii_off
row baseline corpus+ml "$reps" "$base" "${full_inputs[@]}"
row +pii corpus+ml "$reps" "$frag_pii_on" "${full_inputs[@]}"
row +url_filter corpus+ml "$reps" "$base$frag_url" "${full_inputs[@]}"
row +decontaminate corpus+ml "$reps" "$base$frag_decon" "${full_inputs[@]}"
row +classifier corpus+ml "$reps" "$base$frag_cls" "${full_inputs[@]}"
row all-but-ppl corpus+ml "$reps" "$frag_pii_on$frag_url$frag_decon$frag_cls" "${full_inputs[@]}"
row baseline ml "$reps" "$base" "${ml_inputs[@]}"
row +perplexity ml 1 "$base$frag_ppl" "${ml_inputs[@]}"
row all ml 1 "$frag_pii_on$frag_url$frag_decon$frag_cls$frag_ppl" "${ml_inputs[@]}"

# --- the table
echo
echo "== prep: the refinery's stages on and off, smelt prep --threads 1 (one worker), best of $reps runs per corpus+ml row"
lscpu | grep -E 'Model name|Flags' | sed 's/  */ /g'
echo "cores: $(nproc); load average at start: $load_start"
"$py" - "$rows" "$ref/ml-tokens.stats.json" <<'EOF'
import json, sys
rows, tok_stats = sys.argv[1:3]
best = {}  # (name, input) -> (prep seconds, wall, stats); the fastest run of a row
order = []
for line in open(rows):
    name, label, wall, folder = line.rstrip("\n").split("\t")
    s = json.load(open(folder + "/stats.json"))
    key = (name, label)
    if key not in best:
        order.append(key)
    if key not in best or s["timing"]["seconds"] < best[key][0]:
        best[key] = (s["timing"]["seconds"], float(wall), s)
stages = ["extract", "url_filter", "language", "quality", "decontaminate", "classifiers", "perplexity", "pii",
          "dedup_signature"]
inputs = {}
for (name, label), (sec, wall, s) in best.items():
    inputs[label] = (s["documents"]["read"], s["bytes"]["in"])
for label, (docs, b) in inputs.items():
    print(f"input {label}: {docs} documents, {b / 1e6:.1f} MB")
print("\nwall s: the whole command; prep s: stats.json timing.seconds (MB/s in and docs/s divide by it); load s: the"
      " difference (start, lists and models loaded, exit); the stage columns: timing.worker_seconds_by_stage")
ml_tokens = json.load(open(tok_stats)).get("tokens")
print()
own = {"+pii": ["pii"], "+url_filter": ["url_filter"], "+decontaminate": ["decontaminate"],
       "+classifier": ["classifiers"], "+perplexity": ["perplexity"],
       "all-but-ppl": ["pii", "url_filter", "decontaminate", "classifiers"],
       "all": ["pii", "url_filter", "decontaminate", "classifiers", "perplexity"]}
print("stage share: the row's own stage(s) in worker seconds / the same input's baseline worker seconds (all stages);"
      " steadier than the MB/s ratio on a shared machine")
print()
print("| row | input | wall s | prep s | load s | MB/s in | × baseline | stage share | docs/s | kept | dropped by the stage | "
      + " | ".join(stages) + " |")
print("|---|---|---|---|---|---|---|---|---|---|---|" + "---|" * len(stages))
reason = {"+url_filter": "url_blocked", "+decontaminate": "contaminated", "+classifier": "classifier_hq"}
for name, label in order:
    sec, wall, s = best[(name, label)]
    base = best[("baseline", label)]
    mbs = s["bytes"]["in"] / 1e6 / sec
    ratio = mbs / (base[2]["bytes"]["in"] / 1e6 / base[0])
    ws = s["timing"]["worker_seconds_by_stage"]
    drops = s.get("drops", {})
    why = drops.get(reason.get(name, ""), "")
    if name in ("baseline", "+classifier"):  # the classifier multiplies the score: more sampled out
        why = f"sampled_out {drops.get('sampled_out', 0)}"
    if name == "+pii":
        why = "masked " + ", ".join(f"{k} {v}" for k, v in s.get("pii_masked", {}).items() if v)
    base_ws = sum(base[2]["timing"]["worker_seconds_by_stage"].values())
    x = sum(ws.get(k, 0) for k in own[name]) / base_ws if name in own else None
    share = "" if x is None else f"{x:.1%}" if x < 2 else f"{x:.0f}×"
    print(f"| {name} | {label} | {wall:.2f} | {sec:.2f} | {wall - sec:.2f} | {mbs:.1f} | {ratio:.2f} | {share} | "
          f"{s['documents']['read'] / sec:.0f} | "
          f"{s['documents']['kept']} | {why} | " + " | ".join(f"{ws.get(k, 0):.2f}" for k in stages) + " |")
ppl = best.get(("+perplexity", "ml"))
if ppl and ml_tokens:
    sec = ppl[2]["timing"]["worker_seconds_by_stage"]["perplexity"]
    print(f"\nperplexity stage on the ml pages: {ppl[2]['documents']['read'] / sec:.1f} documents/s, about "
          f"{ml_tokens / sec:.0f} tokens/s (the pages' {ml_tokens} tokens under the reference tokenizer / the stage's "
          f"worker seconds; documents dropped before the stage are not scored)")
EOF
echo "load average at the end of the prep rows: $(cat /proc/loadavg)"

# --- stand-alone rates beside it
if [ -x "$build/decontaminate_bench" ]; then
  echo
  ngrams=$(cat "$fx/eval.jsonl.ngrams")
  echo "== decontaminate_bench: a synthetic index of $ngrams 13-grams (the eval set's count), find() over the multilingual pages"
  find "$out/ml" -name '*.txt' | sort >"$fx/ml-files.txt"
  "$build/decontaminate_bench" --ngrams "$ngrams" --list "$fx/ml-files.txt"
fi
if [ -x "$build/ref_scorer_bench" ]; then
  echo
  echo "== ref_scorer_bench: the reference model's shape ([model] of $ref/ref.toml), byte-level tokens"
  (cd "$root" && "$build/ref_scorer_bench" --config "$ref/ref.toml" --threads 1)
fi
echo
echo "load average at the end: $(cat /proc/loadavg); the whole script: $(( $(date +%s) - t_start )) s"
