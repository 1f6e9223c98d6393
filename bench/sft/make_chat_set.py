#!/usr/bin/python3
"""Builds a small supervised-fine-tuning chat set, offline, from the Debian FAQ that the
debian-faq package ships (DocBook HTML under /usr/share/doc/debian/FAQ). Every FAQ section
whose heading is a question becomes one pair: the heading (numbering stripped) is the user
turn, the section's first paragraph(s) as plain text, capped near 600 characters at a sentence
end, the assistant turn. If the FAQ gives fewer than --min-pairs pairs, sections of the Debian
Reference (debian-reference-en) top it up as "Explain <title>." pairs.
Output is JSON Lines, {"messages": [...]} per line, split by crc32(question) % 10 == 0 into the
held-out file. Standard library only; the same input gives byte-identical output.
   python3 bench/sft/make_chat_set.py --out-train train.jsonl --out-heldout heldout.jsonl \
       [--source DIR] [--reference DIR] [--min-pairs N]
"""
import argparse, glob, gzip, html.parser, json, os, re, sys, zlib

kDefaultSources = ["/usr/share/doc/debian/FAQ", "/usr/share/doc/debian-faq"]
kDefaultReference = "/usr/share/debian-reference"
kSystemPrompt = "You are a helpful assistant who answers questions about Debian."
kAnswerCap = 600        # characters; the answer is cut at the last sentence end before this
kAnswerMin = 250        # keep appending paragraphs while the answer is shorter than this
kHeldOutModulo = 10     # crc32(question) % 10 == 0 -> held out
kSystemModulo = 5       # crc32("system\0" + question) % 5 == 0 -> record gets a system turn

# Elements whose text never belongs to an answer: navigation, tables of contents, footnotes
# and their markers, admonitions (note/tip/warning), tables, scripts.
kSkipClasses = {"navheader", "navfooter", "toc", "footnotes", "footnote", "note", "tip",
                "warning", "caution", "important", "indexterm", "list-of-tables",
                "list-of-figures", "authorgroup", "legalnotice", "revhistory"}
kSkipTags = {"script", "style", "table", "sup", "head", "title"}
kVoidTags = {"br", "hr", "img", "meta", "link", "input", "col", "area", "base", "wbr"}
kBlockTags = {"p", "pre", "li", "dd", "dt", "div", "blockquote", "ul", "ol", "dl", "tr",
              "td", "th", "table", "br", "hr", "body"}
kHeadingTags = {"h1", "h2", "h3", "h4", "h5", "h6"}
kAbbreviations = {"e.g.", "i.e.", "etc.", "vs.", "cf.", "Mr.", "Dr.", "No.", "approx.",
                  "al.", "ca.", "Inc.", "Ltd."}
kNeverFinal = {"e.g.", "i.e.", "vs.", "cf.", "Mr.", "Dr.", "No."}  # cannot end a sentence


class BlockParser(html.parser.HTMLParser):
    """Turns a DocBook HTML page into a flat list of events, ("heading", text), ("block", text)
    for prose, ("item", text) for list items ("- " before an item's first block) and
    ("pre", text) for code, in document order, skipped elements left out."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.events = []
        self.stack_ = []        # (tag, skip) for every open non-void element
        self.skip_depth_ = 0
        self.pre_depth_ = 0
        self.li_depth_ = 0
        self.new_item_ = False  # the next block starts a list item
        self.heading_ = None    # text parts while inside h1..h6
        self.parts_ = []        # text parts of the current block

    def flush_block_(self):
        text = "".join(self.parts_)
        self.parts_ = []
        if self.pre_depth_:
            lines = [re.sub(r"[ \t]+", " ", ln).strip() for ln in text.split("\n")]
            text = "\n".join(ln for ln in lines if ln)
        else:
            text = normalise_space(text)
        if not re.search(r"\w", text):
            return  # stray punctuation left between a code block and the prose around it
        if self.pre_depth_:
            self.events.append(("pre", text))
        elif self.li_depth_:
            self.events.append(("item", "- " + text if self.new_item_ else text))
            self.new_item_ = False
        else:
            self.events.append(("block", text))

    def handle_starttag(self, tag, attrs):
        classes = set((dict(attrs).get("class") or "").split())
        skip = tag in kSkipTags or bool(classes & kSkipClasses)
        if tag in kVoidTags:
            if tag in kBlockTags and not self.skip_depth_ and self.heading_ is None:
                self.flush_block_()
            return
        if tag in kHeadingTags and not self.skip_depth_ and not skip:
            self.flush_block_()
            self.heading_ = []
        elif tag in kBlockTags and not self.skip_depth_ and self.heading_ is None:
            self.flush_block_()
        self.stack_.append((tag, skip))
        if skip:
            self.skip_depth_ += 1
        if tag == "pre":
            self.pre_depth_ += 1
        if tag == "li":
            self.li_depth_ += 1
            self.new_item_ = True

    def handle_startendtag(self, tag, attrs):
        if tag in kBlockTags and not self.skip_depth_ and self.heading_ is None:
            self.flush_block_()

    def handle_endtag(self, tag):
        if not any(t == tag for t, _ in self.stack_):
            return  # stray end tag
        while self.stack_:
            open_tag, skip = self.stack_.pop()
            if skip:
                self.skip_depth_ -= 1
            if open_tag in kHeadingTags and self.heading_ is not None and not self.skip_depth_:
                text = normalise_space("".join(self.heading_))
                self.heading_ = None
                if text:
                    self.events.append(("heading", text))
            elif open_tag in kBlockTags and not self.skip_depth_ and self.heading_ is None:
                self.flush_block_()
            if open_tag == "pre":
                self.pre_depth_ -= 1
            if open_tag == "li":
                self.li_depth_ -= 1
            if open_tag == tag:
                break

    def handle_data(self, data):
        if self.skip_depth_:
            return
        if self.heading_ is not None:
            self.heading_.append(data)
        else:
            self.parts_.append(data)

    def close(self):
        super().close()
        self.flush_block_()


def normalise_space(text):
    return re.sub(r"\s+", " ", text.replace("\u00a0", " ")).strip()


def strip_numbering(title):
    """'7.12. How do I put a package on hold?' -> 'How do I put a package on hold?'"""
    title = re.sub(r"^(Chapter|Appendix)\s+[0-9A-Z]+\.\s*", "", title)
    return re.sub(r"^([0-9A-Z]+\.)*[0-9]+\.\s+", "", title).strip()


def read_page(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    return raw.decode("utf-8", errors="replace").replace("\ufffd", "")


def page_events(path):
    parser = BlockParser()
    parser.feed(read_page(path))
    parser.close()
    return parser.events


def sections(events):
    """Yields (heading, [(kind, text)]) for every heading, blocks up to the next heading."""
    heading, blocks = None, []
    for kind, text in events:
        if kind == "heading":
            if heading is not None:
                yield heading, blocks
            heading, blocks = text, []
        elif heading is not None:
            blocks.append((kind, text))
    if heading is not None:
        yield heading, blocks


def sentence_ends(text):
    """Offsets just past each sentence end ('.', '?' or '!' before whitespace or the end),
    not counting common abbreviations inside the text."""
    ends = []
    for m in re.finditer(r"[.?!][\"')\]\u201d]?(?=\s|$)", text):
        words = text[:m.end()].split()
        word = words[-1].lstrip("([{\"'\u201c`") if words else ""
        if word in kNeverFinal or (m.end() < len(text) and (
                word in kAbbreviations or re.fullmatch(r"[A-Za-z]\.", word))):
            continue
        ends.append(m.end())
    return ends


def cut_at_sentence(text, budget):
    """text cut at its last sentence end within budget characters; "" if there is none."""
    ends = [e for e in sentence_ends(text) if e <= budget]
    return text[:ends[-1]] if ends else ""


def introduces(text):
    """Whether prose announces what comes next ("... run:", "... as follows.")."""
    return re.search(r"(:|\bthe following\.|\bas follows\.)$", text) is not None


def is_finished(kind, text):
    """Whether an answer may end with this block: a list item, or prose ending a sentence."""
    if kind == "item" or text.endswith((":-)", ":)")):
        return True
    ends = sentence_ends(text)
    return kind == "block" and bool(ends) and ends[-1] == len(text)


def make_answer(blocks):
    """First paragraph(s) of a section, about kAnswerCap characters at most, ending at a
    sentence end. blocks are (kind, text), kind "block", "item" or "pre". Goes on past
    kAnswerMin to finish what the last block introduces (a "...:", the text after a code
    block, the rest of a list). "" when the section has no usable answer."""
    if not blocks:
        return ""
    chosen, total = [], 0
    for kind, text in blocks:
        if chosen and total >= kAnswerMin:
            last_kind, last_text = chosen[-1]
            if not (introduces(last_text) or last_kind == "pre"
                    or (last_kind == "item" and kind == "item")):
                break
        budget = kAnswerCap - total - (2 if chosen else 0)
        if len(text) > budget:
            cut = cut_at_sentence(text, budget) if kind != "pre" else ""
            if not chosen and len(cut) < kAnswerCap // 3:
                # A long first paragraph: take its first sentence(s), a little past the cap.
                cut = cut_at_sentence(text, kAnswerCap * 3 // 2) or text
            if cut:
                chosen.append((kind, cut))
            break
        chosen.append((kind, text))
        total += len(text) + (2 if len(chosen) > 1 else 0)
    # Do not end on something that introduces what follows ("... run:"), on a list label
    # without punctuation, or on a code block nothing introduces.
    while len(chosen) > 1:
        kind, text = chosen[-1]
        if kind == "pre" and introduces(chosen[-2][1]):
            break
        if is_finished(kind, text) and not introduces(text):
            break
        chosen.pop()
    if len(chosen) == 1 and not (chosen[0][0] == "item" or is_finished(*chosen[0])):
        cut = cut_at_sentence(chosen[0][1], len(chosen[0][1]))
        if len(cut) < 40:
            return ""
        chosen = [(chosen[0][0], cut)]
    return "\n\n".join(text for _, text in chosen).strip()


def list_pages(directory):
    """English HTML pages of a directory, sorted, symlinked duplicates removed."""
    paths = []
    for pattern in ("*.en.html", "*.en.html.gz"):
        paths += glob.glob(os.path.join(directory, pattern))
    if not paths:
        for pattern in ("*.html", "*.html.gz", "*.htm"):
            paths += glob.glob(os.path.join(directory, pattern))
    seen, out = set(), []
    for path in sorted(paths):
        real = os.path.realpath(path)
        if real not in seen and os.path.isfile(real):
            seen.add(real)
            out.append(path)
    return out


def faq_pairs(paths):
    """(question, answer) for every section whose heading is a question."""
    pairs, skipped = [], 0
    for path in paths:
        for heading, blocks in sections(page_events(path)):
            question = strip_numbering(heading)
            if "?" not in question:
                continue
            answer = make_answer(blocks)
            if answer:
                pairs.append((question, answer))
            else:
                skipped += 1  # question heading directly followed by sub-sections
    return pairs, skipped


def reference_pairs(paths):
    """("Explain <title>.", first paragraph(s)) for Debian Reference sections; sections whose
    heading is already a question keep it as is."""
    pairs = []
    for path in paths:
        for heading, blocks in sections(page_events(path)):
            title = strip_numbering(heading)
            if not re.match(r"^[0-9A-Z]+(\.[0-9]+)*\.\s", heading) or len(title) < 4:
                continue  # unnumbered headings: "Table of Contents", notes, the book title
            answer = make_answer(blocks)
            if len(answer) < 40:
                continue
            title = re.sub(r"^(The|A|An) ", lambda m: m.group(1).lower() + " ", title)
            question = title if "?" in title else "Explain %s." % title.rstrip(".")
            pairs.append((question, answer))
    return pairs


def record(question, answer):
    messages = []
    if zlib.crc32(("system\0" + question).encode("utf-8")) % kSystemModulo == 0:
        messages.append({"role": "system", "content": kSystemPrompt})
    messages.append({"role": "user", "content": question})
    messages.append({"role": "assistant", "content": answer})
    return json.dumps({"messages": messages}, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out-train", required=True)
    ap.add_argument("--out-heldout", required=True)
    ap.add_argument("--source", help="directory of Debian FAQ HTML pages (default: %s)"
                    % " or ".join(kDefaultSources))
    ap.add_argument("--reference", default=kDefaultReference,
                    help="Debian Reference HTML directory, used only below --min-pairs")
    ap.add_argument("--min-pairs", type=int, default=100,
                    help="top up from --reference when the FAQ gives fewer pairs (0: never)")
    args = ap.parse_args()

    candidates = [args.source] if args.source else kDefaultSources
    source, paths = None, []
    for directory in candidates:
        paths = list_pages(directory) if os.path.isdir(directory) else []
        if paths:
            source = directory
            break
    if not paths:
        sys.exit("make_chat_set: no Debian FAQ HTML found in %s (install debian-faq, "
                 "or pass --source DIR)" % ", ".join(candidates))

    pairs, skipped = faq_pairs(paths)
    n_faq, n_ref, ref_paths = len(pairs), 0, []
    if len(pairs) < args.min_pairs and os.path.isdir(args.reference):
        ref_paths = list_pages(args.reference)
        extra = reference_pairs(ref_paths)
        n_ref = len(extra)
        pairs += extra
    if not pairs:
        sys.exit("make_chat_set: found %d pages in %s but no question/answer pairs in them"
                 % (len(paths), source))

    seen, train, heldout = set(), [], []
    for question, answer in pairs:
        key = question.casefold()
        if key in seen:
            continue
        seen.add(key)
        line = record(question, answer)
        if zlib.crc32(question.encode("utf-8")) % kHeldOutModulo == 0:
            heldout.append(line)
        else:
            train.append(line)
    for path, lines in ((args.out_train, train), (args.out_heldout, heldout)):
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        with open(path, "wb") as f:
            f.write("".join(line + "\n" for line in lines).encode("utf-8"))
    print("make_chat_set: %d pairs (%d FAQ, %d reference), train %d, held out %d, "
          "%d source files (%s%s), %d question headings without an answer skipped"
          % (len(train) + len(heldout), n_faq, n_ref, len(train), len(heldout),
             len(paths) + len(ref_paths), source,
             ", " + args.reference if ref_paths else "", skipped), file=sys.stderr)


if __name__ == "__main__":
    main()
