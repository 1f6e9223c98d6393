// Load generator for `smelt serve`: C concurrent streaming clients on loopback, each sending
// R completion requests one after the other (same prompt, max_tokens M, greedy, ignore the end of
// document so every request generates M tokens), counting the streamed tokens. Prints one JSON
// line: clients, requests, total generated tokens, wall seconds, tokens/s over all clients, time
// to first token P50/P99 and per-token latency P50/P99 (seconds). Stops by itself.
// Usage: node load.mjs --url http://127.0.0.1:PORT --clients C [--requests R] [--max-tokens M] [--prompt TEXT]
const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
const url = args.url ?? "http://127.0.0.1:8000";
const clients = Number(args.clients ?? 1), requests = Number(args.requests ?? 2), maxTokens = Number(args["max-tokens"] ?? 64);
const prompt = args.prompt ?? "The kernel";

function pct(xs, p) {
  if (!xs.length) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

async function one() {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ prompt, max_tokens: maxTokens, temperature: 0, stream: true, ignore_eos: true,
                           stream_options: { include_usage: true } }),
  });
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "", tokens = 0, first = null, last = null, usage = null;
  const gaps = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let i;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!ev.startsWith("data: ")) continue;
      const data = ev.slice(6);
      if (data === "[DONE]") continue;
      const j = JSON.parse(data);
      if (j.usage) usage = j.usage;
      if (!j.choices || !j.choices.length) continue;
      const now = performance.now();
      if (first === null) first = now;
      else gaps.push((now - last) / 1000);
      last = now;
    }
  }
  tokens = usage ? usage.completion_tokens : 0;
  return { ttft: (first - t0) / 1000, gaps, tokens };
}

// Warm up the HTTP client (Node loads its fetch implementation on first use) and the server.
await (await fetch(`${url}/health`)).text();
const t0 = performance.now();
const results = await Promise.all(Array.from({ length: clients }, async () => {
  const out = [];
  for (let r = 0; r < requests; r++) out.push(await one());
  return out;
}));
const wall = (performance.now() - t0) / 1000;
const flat = results.flat();
const total = flat.reduce((a, r) => a + r.tokens, 0);
const ttft = flat.map((r) => r.ttft), gaps = flat.flatMap((r) => r.gaps);
console.log(JSON.stringify({ clients, requests: flat.length, max_tokens: maxTokens, generated_tokens: total,
                             seconds: wall, tokens_per_s: total / wall, ttft_p50: pct(ttft, 50), ttft_p99: pct(ttft, 99),
                             token_latency_p50: pct(gaps, 50), token_latency_p99: pct(gaps, 99) }));
