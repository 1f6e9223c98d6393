// The bytes of weights a batch-1 decode step reads from a GGUF file, by llama.cpp's own GGUF reader
// (npm node-llama-cpp's readGgufFileInfo): every tensor but the token embedding, which a step reads
// one row of, unless the file has no output.weight (a tied head reads the whole embedding).
// Prints one JSON line: {"bytes_per_token": N, "tensors": K}.
// Usage: node weight_bytes.mjs MODEL.gguf  (node-llama-cpp from tests/reference)
import {createRequire} from "node:module";
import {pathToFileURL} from "node:url";

const ref = createRequire(new URL("../../tests/reference/package.json", import.meta.url));
const {readGgufFileInfo, GgmlType} = await import(pathToFileURL(ref.resolve("node-llama-cpp")).href);

// bytes per block and elements per block of the types Smelt writes
const kTypes = {[GgmlType.F32]: [4, 1], [GgmlType.F16]: [2, 1], [GgmlType.BF16]: [2, 1], [GgmlType.Q8_0]: [34, 32]};
const info = await readGgufFileInfo(process.argv[2], {readTensorInfo: true});
const tensors = info.fullTensorInfo ?? info.tensorInfo;
const tied = !tensors.some((t) => t.name === "output.weight");
let bytes = 0;
for (const t of tensors) {
  if (t.name === "token_embd.weight" && !tied) continue;
  const ty = kTypes[t.ggmlType];
  if (!ty) throw new Error(`${t.name}: ggml type ${t.ggmlType} not counted here`);
  const n = t.dimensions.reduce((a, d) => a * Number(d), 1);
  bytes += (n / ty[1]) * ty[0];
}
process.stdout.write(JSON.stringify({bytes_per_token: bytes, tensors: tensors.length, tied}) + "\n");
