#!/usr/bin/env python3
# Side-by-side HTML extraction benchmark: Smelt's html_extract (and its "all visible text" mode),
# python3-readability, html2text and lynx -dump on the same pages, scored against hand-checked text.
# Not a test: it prints numbers (MB/s on one core, ratio to readability, shingle F1) for RESULTS.md.
#
# F1 as the scrapinghub article-extraction-benchmark computes it: tokens are \w+ runs, lowercased,
# with CJK characters as tokens of their own; shingles are 4 consecutive tokens; per page, tp/fp/fn
# over shingle multisets (normalised so long pages weigh no more); precision and recall are averaged
# over pages and F1 = 2PR/(P+R).
import argparse
import collections
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOKEN_RE = re.compile(r"\w+", re.UNICODE)
CJK_RE = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f]")


def tokenize(text):
    out = []
    for tok in TOKEN_RE.findall(text.lower()):
        if CJK_RE.search(tok):
            run = ""
            for ch in tok:
                if CJK_RE.match(ch):
                    if run:
                        out.append(run)
                        run = ""
                    out.append(ch)
                else:
                    run += ch
            if run:
                out.append(run)
        else:
            out.append(tok)
    return out


def shingles(text, n=4):
    toks = tokenize(text)
    return collections.Counter(tuple(toks[i:i + n]) for i in range(max(1, len(toks) - n + 1)) if toks[i:i + n])


def tp_fp_fn(gold, pred):
    g, p = shingles(gold), shingles(pred)
    tp = fp = fn = 0
    for k in set(g) | set(p):
        tp += min(g[k], p[k])
        fp += max(0, p[k] - g[k])
        fn += max(0, g[k] - p[k])
    s = tp + fp + fn
    return (tp / s, fp / s, fn / s) if s else (0.0, 0.0, 0.0)


def prf(triples):
    def prec(tp, fp, fn):
        return 1.0 if fp == fn == 0 else (0.0 if tp == fp == 0 else tp / (tp + fp))

    def rec(tp, fp, fn):
        return 1.0 if fp == fn == 0 else (0.0 if tp == fn == 0 else tp / (tp + fn))

    ps = [prec(*t) for t in triples if t[0] + t[1] > 0]
    rs = [rec(*t) for t in triples if t[0] + t[2] > 0]
    p = statistics.mean(ps) if ps else 0.0
    r = statistics.mean(rs) if rs else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


def children_cpu():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


# ---- tools ---------------------------------------------------------------------------------------

def run_smelt(driver, files, reps, dump):
    out = tempfile.mkdtemp(prefix="smelt-extract-")
    cmd = [driver, "--reps", str(reps), "--out", out] + (["--dump"] if dump else []) + files
    res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    texts = {}
    for f in files:
        stem = os.path.splitext(os.path.basename(f))[0]
        with open(os.path.join(out, stem + ".txt"), encoding="utf-8", errors="replace") as fh:
            texts[f] = fh.read()
    return texts, res["best_s"]


def run_readability(files, reps):
    import lxml.html
    from readability import Document

    raw = {f: open(f, "rb").read() for f in files}
    texts, best = {}, float("inf")
    for r in range(reps):
        t0 = time.process_time()
        for f in files:
            # a readability user: raw bytes in (readability sniffs the charset), article HTML out,
            # then its text
            summary = Document(raw[f]).summary()
            text = lxml.html.fromstring(summary).text_content()
            if r == 0:
                texts[f] = text
        best = min(best, time.process_time() - t0)
    return texts, best


def run_process(cmd_for, files, reps, fix=None):
    texts, best = {}, float("inf")
    for r in range(reps):
        c0 = children_cpu()
        for f in files:
            out = subprocess.run(cmd_for(f), capture_output=True).stdout.decode("utf-8", "replace")
            if r == 0:
                texts[f] = fix(out) if fix else out
        best = min(best, children_cpu() - c0)
    return texts, best


def html2text_cmd(f):
    return ["html2text", "-nobs", "-width", "1000", f]


def lynx_cmd(f):
    return ["lynx", "-dump", "-nolist", "-display_charset=UTF-8", "-width=1000", f]


# ---- main ----------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", default=os.path.join(HERE, "..", "..", "build"), help="folder with html_extract_bench")
    ap.add_argument("--pages", default=os.path.join(HERE, "pages"))
    ap.add_argument("--gold", default=os.path.join(HERE, "gold"))
    ap.add_argument("--reps", type=int, default=20, help="repetitions for Smelt (best is reported)")
    ap.add_argument("--peer-reps", type=int, default=3, help="repetitions for the peers")
    ap.add_argument("--tools", default="smelt,smelt-dump,readability,html2text,lynx")
    ap.add_argument("--per-page", action="store_true", help="print F1 per page too")
    ap.add_argument("--json", help="write all numbers here")
    args = ap.parse_args()

    index = []
    with open(os.path.join(args.pages, "INDEX.tsv"), encoding="utf-8") as fh:
        next(fh)
        for line in fh:
            if line.strip():
                name, kind, _origin = line.rstrip("\n").split("\t", 2)
                index.append((os.path.join(args.pages, name), kind))
    files = [f for f, _ in index]
    kinds = {f: k for f, k in index}
    gold = {}
    for f in files:
        stem = os.path.splitext(os.path.basename(f))[0]
        with open(os.path.join(args.gold, stem + ".txt"), encoding="utf-8") as fh:
            gold[f] = fh.read()
    total_bytes = sum(os.path.getsize(f) for f in files)
    driver = os.path.join(args.build, "html_extract_bench")

    runners = {
        "smelt": lambda: run_smelt(driver, files, args.reps, dump=False),
        "smelt-dump": lambda: run_smelt(driver, files, args.reps, dump=True),
        "readability": lambda: run_readability(files, args.peer_reps),
        # html2text underlines links with '_' between words; undo it so words stay words
        "html2text": lambda: run_process(html2text_cmd, files, args.peer_reps, fix=lambda s: s.replace("_", " ")),
        "lynx": lambda: run_process(lynx_cmd, files, args.peer_reps),
    }
    results = {}
    for tool in args.tools.split(","):
        texts, seconds = runners[tool]()
        triples = {f: tp_fp_fn(gold[f], texts.get(f, "")) for f in files}
        by_kind = {}
        for k in sorted(set(kinds.values())):
            by_kind[k] = prf([triples[f] for f in files if kinds[f] == k])
        results[tool] = {
            "seconds": seconds,
            "mb_per_s": total_bytes / 1e6 / seconds if seconds > 0 else float("inf"),
            "overall": prf(list(triples.values())),
            "by_kind": by_kind,
            "per_page": {os.path.basename(f): prf([triples[f]])[2] for f in files},
        }
        print(f"[extract_bench] {tool}: {results[tool]['mb_per_s']:.2f} MB/s, "
              f"F1 {results[tool]['overall'][2]:.3f}", file=sys.stderr)

    kinds_list = sorted(set(kinds.values()))
    base = results.get("readability", {}).get("mb_per_s")
    print(f"pages: {len(files)} ({', '.join(f'{k} {sum(1 for f in files if kinds[f] == k)}' for k in kinds_list)}), "
          f"{total_bytes / 1e6:.2f} MB of HTML; one core; MB/s = HTML bytes / best CPU time of "
          f"{args.reps} (Smelt) or {args.peer_reps} (peers) passes\n")
    head = "| tool | MB/s | × readability | P | R | F1 | " + " | ".join(f"F1 {k}" for k in kinds_list) + " |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for tool, r in results.items():
        ratio = f"{r['mb_per_s'] / base:.1f}" if base else "-"
        p, rc, f1 = r["overall"]
        cells = " | ".join(f"{r['by_kind'][k][2]:.3f}" for k in kinds_list)
        print(f"| {tool} | {r['mb_per_s']:.2f} | {ratio} | {p:.3f} | {rc:.3f} | {f1:.3f} | {cells} |")
    if args.per_page:
        tools = list(results)
        print("\n| page | " + " | ".join(tools) + " |")
        print("|" + "---|" * (len(tools) + 1))
        for f in files:
            b = os.path.basename(f)
            print(f"| {b} | " + " | ".join(f"{results[t]['per_page'][b]:.3f}" for t in tools) + " |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
