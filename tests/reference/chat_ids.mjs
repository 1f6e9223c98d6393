// Reference for Smelt's chat data (src/smelt/dataset/chat.cpp): a conversation rendered by
// @huggingface/jinja 0.5.11 and tokenized by Hugging Face tokenizers (npm `tokenizers`, added tokens
// recognised, no special tokens added: what transformers' apply_chat_template(tokenize=True) does).
// node chat_ids.mjs FILE, FILE holding {"tokenizer": PATH, "cases": [{"template", "context"}, ...]};
// prints a JSON list of {"text", "ids"} (or {"error"}).
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { Template } from "@huggingface/jinja";

const require = createRequire(import.meta.url);
const { Tokenizer } = require("tokenizers");
const input = JSON.parse(readFileSync(process.argv[2], "utf8"));
const tok = Tokenizer.fromFile(input.tokenizer);
const out = [];
for (const { template, context } of input.cases) {
  try {
    const text = new Template(template).render(context);
    const enc = await tok.encode(text, null, { addSpecialTokens: false });
    out.push({ text, ids: enc.getIds() });
  } catch (e) {
    out.push({ error: String(e && e.message ? e.message : e) });
  }
}
process.stdout.write(JSON.stringify(out));
