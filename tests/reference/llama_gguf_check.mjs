// llama.cpp (through npm node-llama-cpp, its prebuilt CPU binary) as the independent consumer of
// a GGUF file Smelt exported (tests/cli/gguf_llama_test.cpp): loads the file, tokenizes texts,
// greedy-decodes prompts, and reports the next-token distribution after each prompt and every
// warning llama.cpp logged while loading (a missing pre-tokenizer says "GENERATION QUALITY WILL
// BE DEGRADED").
//
//   node llama_gguf_check.mjs SPEC.json  ->  one JSON object on stdout
//   SPEC: {"model": PATH, "texts": [..], "prompts": [..], "n_predict": N, "top": K, "threads": T,
//          "kv_type": "F32" (default, as Smelt's cache) | "F16" (llama.cpp's default),
//          "never": [ids greedy decoding must not pick]}
//   out:  {"llama_cpp": release, "eos", "bos", "texts": [[ids]..],
//          "prompts": [{"ids": [prompt ids], "continuation": [ids], "top": [[id, logprob]..],
//                     "n_probabilities": size of the distribution}..],
//          "warnings": [log lines at warn or error], "degraded": bool,
//          "buffers": [the model buffers' names, as llama.cpp logs them]}
// Tokenization is without special-token parsing and without a BOS (smelt generate adds none);
// the continuation stops after n_predict tokens or at an end-of-generation token (included), as
// smelt generate --json does at its end-of-document token. The distribution is llama.cpp's
// softmax at temperature 1 over the whole vocabulary (top-k, top-p and min-p off), as log
// probabilities, the top K.
import fs from "node:fs";
import {getLlama, LlamaLogLevel, TokenBias} from "node-llama-cpp";

const spec = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const lines = [];
const llama = await getLlama({
  gpu: false,
  build: "never",  // the prebuilt binary from npm, or fail: nothing is downloaded or compiled
  logLevel: LlamaLogLevel.debug,
  logger: (level, message) => lines.push({level, message: String(message).trimEnd()}),
});
const model = await llama.loadModel({modelPath: spec.model, gpuLayers: 0});
const context = await model.createContext({
  contextSize: Math.min(model.trainContextSize, spec.context_size ?? model.trainContextSize),
  sequences: 1,
  threads: spec.threads ?? 1,
  // Smelt's KV cache is fp32; llama.cpp's default F16 cache alone moves log probabilities by ~1e-2.
  experimentalKvCacheKeyType: spec.kv_type ?? "F32",
  experimentalKvCacheValueType: spec.kv_type ?? "F32",
  flashAttention: false,
});
const sequence = context.getSequence();
// Ids never to generate (smelt generate never samples ids its tokenizer cannot decode: the padded
// end of a model vocabulary, UNUSED in the file).
const tokenBias = (spec.never ?? []).length ? TokenBias.for(model).set(spec.never, "never") : undefined;

const texts = (spec.texts ?? []).map((t) => Array.from(model.tokenize(t, false)));
const prompts = [];
for (const p of spec.prompts ?? []) {
  const ids = Array.from(model.tokenize(p, false));
  await sequence.clearHistory();
  const items = ids.map((t, i) => i + 1 < ids.length ? t
      : [t, {generateNext: {probabilities: true, options: {temperature: 1, topK: 0, topP: 1, minP: 0}}}]);
  const res = await sequence.controlledEvaluate(items);
  const probs = res[ids.length - 1]?.next?.probabilities ?? new Map();
  const top = Array.from(probs.entries()).slice(0, spec.top ?? 10).map(([t, pr]) => [t, Math.log(pr)]);
  await sequence.clearHistory();
  const continuation = [];
  if ((spec.n_predict ?? 0) > 0) {
    for await (const t of sequence.evaluate(ids, {temperature: 0, yieldEogToken: true, tokenBias})) {
      continuation.push(t);
      if (continuation.length >= spec.n_predict || model.isEogToken(t)) break;
    }
  }
  prompts.push({ids, continuation, top, n_probabilities: probs.size});
}

const warnings = lines.filter((l) => l.level === "warn" || l.level === "error" || l.level === "fatal")
    .map((l) => l.message);
const all = lines.map((l) => l.message).join("\n");
process.stdout.write(JSON.stringify({
  llama_cpp: `${llama.llamaCppRelease.repo} ${llama.llamaCppRelease.release}`,
  eos: model.tokens.eos,
  bos: model.tokens.bos,
  texts,
  prompts,
  warnings,
  degraded: /missing pre-tokenizer|GENERATION QUALITY WILL BE DEGRADED/.test(all),
  // Where llama.cpp put the weights ("CPU", "AMX", "CPU_REPACK"): its CPU path's arithmetic for
  // F16 tensors depends on it.
  buffers: [...all.matchAll(/(\S+) model buffer size/g)].map((m) => m[1]),
}) + "\n");
await context.dispose();
await model.dispose();
await llama.dispose();
