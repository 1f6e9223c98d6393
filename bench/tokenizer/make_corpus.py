#!/usr/bin/env python3
"""Builds the tokenizer benchmark corpora from Debian documentation on this machine:
en.txt  English prose and code: Python's HTML docs and the kernel docs, tags stripped, one paragraph a line
zh.txt  Chinese: kernel zh_CN docs (.rst.gz), LibreOffice zh-CN help (HTML), fortunes-zh poems
usage: make_corpus.py OUT_DIR [MB_EN] [MB_ZH]"""
import glob, gzip, html, os, re, sys

out = sys.argv[1]
mb_en = float(sys.argv[2]) if len(sys.argv) > 2 else 16
mb_zh = float(sys.argv[3]) if len(sys.argv) > 3 else 8
os.makedirs(out, exist_ok=True)
TAG = re.compile(r'<(script|style)[^>]*>.*?</\1>|<[^>]+>', re.S | re.I)

def html_text(path):
    raw = open(path, 'rb').read()
    if path.endswith('.gz'):
        raw = gzip.decompress(raw)
    t = html.unescape(TAG.sub(' ', raw.decode('utf-8', 'replace')))
    lines = (re.sub(r'[ \t]+', ' ', l).strip() for l in t.split('\n'))
    return '\n'.join(l for l in lines if l)

def fill(name, sources, limit):
    n = 0
    with open(os.path.join(out, name), 'w', encoding='utf-8') as f:
        for path, kind in sources:
            try:
                t = html_text(path) if kind == 'html' else (
                    gzip.open(path).read() if path.endswith('.gz') else open(path, 'rb').read()).decode('utf-8', 'replace')
            except Exception:
                continue
            t = t.rstrip('\n') + '\n'
            f.write(t)
            n += len(t.encode())
            if n >= limit:
                break
    print(f'{name}: {n / 1e6:.1f} MB')

en = [(p, 'html') for p in sorted(glob.glob('/usr/share/doc/python3*/html/**/*.html', recursive=True))]
en += [(p, 'html') for p in sorted(glob.glob('/usr/share/doc/linux-doc-*/html/**/*.html', recursive=True))]
zh = [(p, 'text') for p in sorted(glob.glob('/usr/share/doc/linux-doc-*/Documentation/translations/zh_CN/**/*.rst.gz', recursive=True))]
zh += [(p, 'html') for p in sorted(glob.glob('/usr/share/libreoffice/help/zh-CN/**/*.html', recursive=True))]
zh += [(p, 'text') for p in sorted(glob.glob('/usr/share/games/fortunes/*.u8'))]
fill('en.txt', en, mb_en * 1e6)
fill('zh.txt', zh, mb_zh * 1e6)
