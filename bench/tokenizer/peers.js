// Peers for the tokenizer benchmark: npm tiktoken (WASM) and Hugging Face tokenizers (node
// binding), encoding every line of a file as one document. Prints one JSON line with bytes,
// tokens and seconds (load and encode apart). Uses tests/reference/node_modules.
//   node peers.js tiktoken ENCODING FILE     |     node peers.js hf TOKENIZER_JSON FILE
"use strict";
const fs = require("fs");
const path = require("path");
const req = require("module").createRequire(path.join(__dirname, "../../tests/reference/"));
const [kind, spec, file] = process.argv.slice(2);
const t0 = process.hrtime.bigint();
const sec = (a, b) => Number(b - a) / 1e9;
const text = fs.readFileSync(file, "utf8");
const lines = text.split("\n");
if (lines.length && lines[lines.length - 1] === "") lines.pop();
let tokens = 0;
if (kind === "tiktoken") {
  const { Tiktoken } = req("tiktoken/lite");
  const j = req(`tiktoken/encoders/${spec}.json`);
  const enc = new Tiktoken(j.bpe_ranks, j.special_tokens, j.pat_str);
  const t1 = process.hrtime.bigint();
  for (const l of lines) tokens += enc.encode(l, "all").length;
  const t2 = process.hrtime.bigint();
  enc.free();
  console.log(JSON.stringify({ kind, spec, bytes: Buffer.byteLength(text), tokens, load_s: sec(t0, t1), encode_s: sec(t1, t2) }));
} else {
  const { Tokenizer } = req("tokenizers");
  const tok = Tokenizer.fromFile(spec);
  const t1 = process.hrtime.bigint();
  (async () => {
    for (let i = 0; i < lines.length; i += 1000) {
      const encs = await tok.encodeBatch(lines.slice(i, i + 1000));
      for (const e of encs) tokens += e.getIds().length;
    }
    const t2 = process.hrtime.bigint();
    console.log(JSON.stringify({ kind, spec: path.basename(spec), bytes: Buffer.byteLength(text), tokens, load_s: sec(t0, t1), encode_s: sec(t1, t2) }));
  })();
}
