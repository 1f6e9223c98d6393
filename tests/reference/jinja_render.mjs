// Reference renderer for Smelt's chat-template interpreter (src/smelt/tokenizer/jinja*.cpp):
// node jinja_render.mjs FILE, FILE holding {"template", "context"} or a list of them; prints a JSON
// list of {"ok": true, "out": "..."} or {"ok": false, "error": "..."} with @huggingface/jinja 0.5.11.
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

const input = JSON.parse(readFileSync(process.argv[2], "utf8"));
const cases = Array.isArray(input) ? input : [input];
const results = cases.map(({ template, context }) => {
  try {
    return { ok: true, out: new Template(template).render(context ?? {}) };
  } catch (e) {
    return { ok: false, error: String(e && e.message ? e.message : e) };
  }
});
process.stdout.write(JSON.stringify(results));
