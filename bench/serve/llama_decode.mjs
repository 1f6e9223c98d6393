// llama.cpp's batch-1 decode speed on a GGUF file, through npm node-llama-cpp (its prebuilt CPU
// binary; nothing is compiled or downloaded): the prompt is evaluated, then N tokens are decoded
// greedily one at a time (end of generation ignored); prints one JSON line with the decode
// tokens/s (from the first generated token to the last, as smelt generate --json times it).
// Usage: node llama_decode.mjs MODEL.gguf THREADS N PROMPT  (node-llama-cpp from tests/reference;
// PROMPT "@FILE" reads the prompt from FILE)
import {createRequire} from "node:module";
import {pathToFileURL} from "node:url";

const ref = createRequire(new URL("../../tests/reference/package.json", import.meta.url));
const {getLlama, LlamaLogLevel} = await import(pathToFileURL(ref.resolve("node-llama-cpp")).href);

const [model_path, threads, n, prompt_arg] = process.argv.slice(2);
const prompt = prompt_arg.startsWith("@") ? (await import("node:fs")).readFileSync(prompt_arg.slice(1), "utf8")
                                         : prompt_arg;
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: model_path, gpuLayers: 0});
const ids = Array.from(model.tokenize(prompt, false));
const want = Number(n);
// room for the prompt and the new tokens (a long-context run), at least 2048, at most the model's
const contextSize = Math.min(model.trainContextSize, Math.max(2048, ids.length + want + 8));
const context = await model.createContext({contextSize, sequences: 1, threads: Number(threads), batchSize: 512});
const sequence = context.getSequence();
let count = 0, t_first = 0;
const t0 = performance.now();
for await (const t of sequence.evaluate(ids, {temperature: 0, yieldEogToken: true})) {
  if (count === 0) t_first = performance.now();
  if (++count >= want) break;
}
const t1 = performance.now();
process.stdout.write(JSON.stringify({peer: "llama.cpp", release: llama.llamaCppRelease.release, threads: Number(threads),
                                     prompt_tokens: ids.length, new_tokens: count,
                                     prefill_seconds: (t_first - t0) / 1000,
                                     tokens_per_second: (count - 1) / ((t1 - t_first) / 1000)}) + "\n");
await context.dispose();
await model.dispose();
await llama.dispose();
