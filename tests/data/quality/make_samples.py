#!/usr/bin/env python3
"""Cuts the real-text samples of tests/data/quality from Debian documentation packages.

Run on a Debian 12 machine with python3.11-doc, linux-doc-6.1, fortunes-zh, python3-pip and
openjdk-17-jre-headless / libzstd-dev installed. The samples are committed; this script only
says where they came from and what was done to them (hard-wrapped paragraphs re-joined into one
line each, as an HTML extractor would give them; reStructuredText headings and roles dropped).
"""
import gzip
import html.parser
import re
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent
CJK = re.compile(r"[\u3000-\u30ff\u3400-\u9fff\uff00-\uffef]")


def read(path):
    p = Path(path)
    data = gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes()
    return data.decode("utf-8")


def join_lines(lines):
    """Joins hard-wrapped lines: no space between CJK text, one space elsewhere."""
    out = ""
    for l in lines:
        l = l.strip()
        if not out:
            out = l
        elif CJK.match(l[:1]) or CJK.match(out[-1:]):
            out += l
        else:
            out += " " + l
    return out


def paragraphs(text):
    """Blank-line separated blocks, each block joined into one line; rst headings, directives and
    field lists dropped; "* " / "- " bullets stay one line per item."""
    out = []
    for block in re.split(r"\n\s*\n", text):
        lines = [l for l in block.split("\n") if l.strip()]
        if not lines:
            continue
        if any(re.fullmatch(r"\s*[=\-*^~'#]{3,}\s*", l) for l in lines):
            continue  # heading (title + underline)
        if lines[0].lstrip().startswith(("..", ":")):
            continue  # directive, field list
        items, cur = [], []
        for l in lines:
            if re.match(r"\s*[*-] ", l) and cur:
                items.append(cur)
                cur = []
            cur.append(l)
        items.append(cur)
        out.extend(join_lines(it) for it in items)
    return out


def rst_roles(s):
    return re.sub(r":ref:`([^`<]*?)(?:\s*<[^>]*>)?`", r"\1", s).replace("``", "")


def write(name, text):
    (OUT / name).write_text(text, encoding="utf-8")
    print(f"{name}: {len(text.encode())} bytes", file=sys.stderr)


# English prose: the Python tutorial, "Whetting Your Appetite".
t = read("/usr/share/doc/python3.11-doc/html/_sources/tutorial/appetite.rst.txt")
write("en_prose.txt", "\n\n".join(paragraphs(t)) + "\n")

# Chinese prose: the zh_CN translation of the kernel's development-process introduction,
# sections "这个文档是关于什么的" and "致谢".
t = read("/usr/share/doc/linux-doc-6.1/Documentation/translations/zh_CN/process/1.Intro.rst.gz")
a = t.index("这个文档是关于什么的")
b = t.index("代码进入主线的重要性")
write("zh_prose.txt", "\n\n".join(rst_roles(p) for p in paragraphs(t[a:b])) + "\n")

# Chinese prose: the Debian code of conduct in fortunes-zh (the first four fortunes).
t = read("/usr/share/games/fortunes/chinese")
t = re.sub(r"\x1b\[[0-9;]*m", "", t)
entries = [e.strip("\n") for e in t.split("\n%\n")][:4]
write("zh_coc.txt", "\n\n".join("\n\n".join(paragraphs(e)) for e in entries) + "\n")

# Italian prose (Latin script, not English): the it_IT translation of the same introduction.
t = read("/usr/share/doc/linux-doc-6.1/Documentation/translations/it_IT/process/1.Intro.rst.gz")
a = t.index("Il resto di questa sezione")
b = t.index("Di cosa parla questo documento")
write("it_prose.txt", "\n\n".join(rst_roles(p) for p in paragraphs(t[a:b])) + "\n")

# Japanese prose (Han + kana): the ja_JP HOWTO, its first sections.
t = read("/usr/share/doc/linux-doc-6.1/Documentation/translations/ja_JP/howto.rst.gz")
a = t.index("これは上のトピック")
b = t.index("カーネルは GNU C")
write("ja_prose.txt", "\n\n".join(p for p in paragraphs(t[a:b]) if not p.startswith("- ")) + "\n")

# Boilerplate: the Unicode "Terms of Use" web page as quoted in OpenJDK's copyright file.
t = read("/usr/share/doc/openjdk-17-jre-headless/copyright").split("\n")
a = next(i for i, l in enumerate(t) if "Unicode® Copyright and Terms of Use" in l)
lines = [l[2:] if l.startswith("  ") else l for l in t[a:a + 20]]
write("terms_boilerplate.txt", "\n".join("" if l.strip() == "." else l for l in lines) + "\n")


# Link list: the link texts of the Python library reference's table of contents, one per line.
class Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.depth, self.cur, self.links = 0, "", []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.depth += 1

    def handle_endtag(self, tag):
        if tag == "a" and self.depth:
            self.depth -= 1
            if self.cur.strip():
                self.links.append(" ".join(self.cur.split()))
            self.cur = ""

    def handle_data(self, data):
        if self.depth:
            self.cur += data


p = Links()
p.feed(read("/usr/share/doc/python3.11-doc/html/library/index.html"))
write("link_list.txt", "\n".join(p.links[:120]) + "\n")

# Lorem ipsum: pip's documentation conventions, the heading examples.
t = read("/usr/share/doc/python3-pip/html/development/conventions.rst").split("\n")
a = next(i for i, l in enumerate(t) if l.strip() == "Heading 1")
write("lorem_headings.txt", "\n".join(l[3:] for l in t[a - 1:a + 31]) + "\n")

# Repetitive listing: an excerpt of the kernel's MAINTAINERS file.
t = read("/usr/share/doc/linux-doc-6.1/MAINTAINERS.gz").split("\n")
write("maintainers.txt", "\n".join(t[1999:2100]) + "\n")

# Code: zstd's simple_compression.c example.
write("code_listing.c", read("/usr/share/doc/libzstd-dev/examples/simple_compression.c"))
