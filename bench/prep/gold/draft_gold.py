#!/usr/bin/env python3
# Drafts a hand-checked gold main text: renders the container(s) a person chose for each page (XPath,
# read off the page's HTML), minus the parts a person marked as boilerplate. Not an extractor: every
# choice below was made by reading the page; the drafts were then read and corrected by hand.
#
# usage: draft_gold.py [--apply] PAGE.html ...   drafts to /tmp/gold-draft/<stem>.txt; with --apply,
#        also applies the hand edits of hand_edits.json and writes gold/<stem>.txt
import json
import os
import re
import sys

import lxml.html

# file stem -> (container XPaths in reading order, XPaths removed inside them)
RECIPES = {}
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "recipes.py"), encoding="utf-8").read())

BLOCK = {"p", "div", "li", "ul", "ol", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "table", "pre", "blockquote",
         "section", "article", "header", "footer", "dd", "dt", "dl", "figure", "figcaption", "main", "td", "th",
         "center", "address", "hr", "form", "tbody", "thead", "caption", "aside", "nav"}
SKIP = {"script", "style", "noscript", "template", "svg", "button", "select", "textarea", "iframe", "object"}


def load(path):
    raw = open(path, "rb").read()
    m = re.search(rb'charset=["\']?([A-Za-z0-9_-]+)', raw[:4096])
    enc = m.group(1).decode().lower() if m else "utf-8"
    enc = {"gbk": "gb18030", "gb2312": "gb18030", "big5": "big5hkscs", "iso-8859-1": "cp1252"}.get(enc, enc)
    try:
        text = raw.decode(enc)
    except (UnicodeDecodeError, LookupError):
        text = raw.decode("utf-8", "replace")
    parser = lxml.html.HTMLParser(encoding="utf-8", remove_comments=True)
    return lxml.html.document_fromstring(text.encode("utf-8"), parser=parser)


def render(el, out, pre=False):
    tag = el.tag if isinstance(el.tag, str) else ""
    if tag in SKIP:
        if el.tail:
            out.append(("t", el.tail))
        return
    block = tag in BLOCK
    if block:
        out.append(("b", None))
    if tag == "br":
        out.append(("n", None))
    if el.text and tag:
        out.append(("p" if (pre or tag == "pre") else "t", el.text))
    for c in el:
        render(c, out, pre or tag == "pre")
    if block:
        out.append(("b", None))
    if el.tail:
        out.append(("p" if pre else "t", el.tail))


def to_text(parts):
    paras, cur = [], ""
    for kind, s in parts:
        if kind == "b":
            if cur.strip():
                paras.append(cur.strip())
            cur = ""
        elif kind == "n":
            cur += "\n"
        elif kind == "p":
            cur += s
        else:
            cur += re.sub(r"\s+", " ", s.replace("\xa0", " "))
    if cur.strip():
        paras.append(cur.strip())
    text = "\n\n".join(re.sub(r"[ \t]*\n[ \t]*", "\n", p) for p in paras) + "\n"
    # &#150; and friends: lxml keeps C1 controls, browsers read them as windows-1252
    return re.sub("[\x80-\x9f]", lambda m: bytes([ord(m.group(0))]).decode("cp1252", "replace"), text)


def apply_edits(stem, text, edits):
    """Paragraph-level hand edits: drop paragraphs, cut a tail, keep from a point, replace text."""
    paras = text.strip().split("\n\n")
    out = []
    for p in paras:
        if edits.get("cut_from") and p.startswith(edits["cut_from"]):
            break
        out.append(p)
    if edits.get("cut_before"):
        idx = next(i for i, p in enumerate(out) if p.startswith(edits["cut_before"]))
        out = (out[:1] if edits.get("keep_first") else []) + out[idx:]
    if edits.get("dedupe_first") and len(out) > 1 and out[0] == out[1]:
        del out[1]  # the headline printed twice
    drop = edits.get("drop", [])
    for d in drop:
        if d not in out:
            print(stem, "hand edit: paragraph not found:", d[:60])
    out = [p for p in out if p not in drop and not any(p.startswith(x) for x in edits.get("drop_prefix", []))]
    for a, b in edits.get("join", []):  # a paragraph split by an inserted caption: glue b onto a
        ia = next(i for i, p in enumerate(out) if p.startswith(a))
        ib = next(i for i, p in enumerate(out) if p.startswith(b))
        out[ia] += out[ib]
        del out[ib]
    for a, b in edits.get("replace", []):
        out = [p.replace(a, b) for p in out]
    for after, text in edits.get("insert_after", []):  # text the containers missed (a standfirst)
        ia = next(i for i, p in enumerate(out) if p.startswith(after))
        out.insert(ia + 1, text)
    out = edits.get("prepend", []) + out + edits.get("append", [])
    return "\n\n".join(out) + "\n"


def main():
    os.makedirs("/tmp/gold-draft", exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    apply = "--apply" in sys.argv
    edits = json.load(open(os.path.join(here, "hand_edits.json"), encoding="utf-8")) if apply else {}
    for path in [a for a in sys.argv[1:] if a != "--apply"]:
        stem = os.path.splitext(os.path.basename(path))[0]
        if stem not in RECIPES:
            print("no recipe:", stem)
            continue
        containers, drops = RECIPES[stem]
        doc = load(path)
        for xp in drops:
            for e in doc.xpath(xp):
                if e.getparent() is not None:
                    e.drop_tree()  # keeps the tail text
        parts = []
        for xp in containers:
            found = doc.xpath(xp)
            if not found:
                print(stem, "container not found:", xp)
            for e in found:
                render(e, parts)
                parts.append(("b", None))
        text = to_text(parts)
        open(f"/tmp/gold-draft/{stem}.txt", "w", encoding="utf-8").write(text)
        if apply:
            text = apply_edits(stem, text, edits.get(stem, {}))
            open(os.path.join(here, stem + ".txt"), "w", encoding="utf-8").write(text)
        print(stem, "ok")


if __name__ == "__main__":
    main()
