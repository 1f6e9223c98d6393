// The official OpenAI client (npm `openai`, pinned in package.json) against a running `smelt serve`:
// completions and chat, streaming and not, usage, the model list, a list of prompts scored with
// echo, logprobs and max_tokens 0, and errors as the client sees them. Prints one JSON object of what it observed; tests/serve/serve_test.cpp judges it (against
// /tokenize, `smelt tokenizer encode` and the non-streamed text).
// Usage: node openai_check.mjs BASE_URL API_KEY MODEL PROMPT
import OpenAI from 'openai';

const [base, apiKey, model, prompt] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0, timeout: 60_000 });
const out = {};

// Streams a request; counts tokens by their logprobs entries (one per generated token).
async function drain(stream, chat) {
  const r = { text: '', tokens: 0, finish: null, usage: null, chunks: 0, roles: [], ids: new Set(), objects: new Set() };
  for await (const c of stream) {
    r.chunks++;
    r.ids.add(c.id);
    r.objects.add(c.object);
    if (c.usage) r.usage = c.usage;
    for (const ch of c.choices) {
      if (chat) {
        if (ch.delta.role) r.roles.push(ch.delta.role);
        r.text += ch.delta.content ?? '';
        r.tokens += ch.logprobs?.content?.length ?? 0;
      } else {
        r.text += ch.text;
        r.tokens += ch.logprobs?.tokens?.length ?? 0;
      }
      if (ch.finish_reason) r.finish = ch.finish_reason;
    }
  }
  r.ids = r.ids.size;
  r.objects = [...r.objects];
  return r;
}

async function error_of(fn) {
  try {
    await fn();
    return null;
  } catch (e) {
    return { status: e.status ?? null, kind: e.constructor.name, param: e.param ?? null, code: e.code ?? null,
             type: e.type ?? null, message: e.message };
  }
}

const c = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0 });
out.completion = { object: c.object, model: c.model, text: c.choices[0].text, finish: c.choices[0].finish_reason,
                   usage: c.usage, id: c.id };
out.completion_stream = await drain(await client.completions.create({
  model, prompt, max_tokens: 12, temperature: 0, stream: true, logprobs: 0, stream_options: { include_usage: true } }), false);

const messages = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Name a colour.' }];
const h = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0 });
out.chat = { object: h.object, role: h.choices[0].message.role, text: h.choices[0].message.content,
             finish: h.choices[0].finish_reason, usage: h.usage };
out.chat_stream = await drain(await client.chat.completions.create({
  model, messages, max_completion_tokens: 10, temperature: 0, stream: true, logprobs: true,
  stream_options: { include_usage: true } }), true);

// the same seed twice: the same sampled text
const sampled = async () => (await client.completions.create({ model, prompt, max_tokens: 16, temperature: 1,
                                                                seed: 42 })).choices[0].text;
out.seeded = [await sampled(), await sampled()];
// OpenAI's penalties, greedy: what `smelt generate --frequency-penalty --presence-penalty` gives
out.penalized = (await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0,
                                                   frequency_penalty: 1.5, presence_penalty: 0.5 })).choices[0].text;

// two prompts scored, nothing generated (what lm-evaluation-harness asks, but with max_tokens 0)
const scored = await client.completions.create({ model, prompt: [prompt, `${prompt} too`], echo: true, logprobs: 1,
                                                 max_tokens: 0 });
out.scored = {
  usage: scored.usage,
  choices: [...scored.choices].sort((a, b) => a.index - b.index).map((ch) => ({
    index: ch.index, text: ch.text, finish: ch.finish_reason, tokens: ch.logprobs.tokens.length,
    first: ch.logprobs.token_logprobs[0], rest: ch.logprobs.token_logprobs.slice(1).every((v) => v <= 0),
    tops: ch.logprobs.top_logprobs.slice(1).map((t) => Object.keys(t).length) })),
};

out.models = (await client.models.list()).data.map((m) => m.id);
out.model = (await client.models.retrieve(model)).id;

out.errors = {
  max_tokens: await error_of(() => client.completions.create({ model, prompt, max_tokens: 0 })),
  top_p: await error_of(() => client.chat.completions.create({ model, messages, top_p: 1.5 })),
  frequency_penalty: await error_of(() => client.completions.create({ model, prompt, frequency_penalty: 3 })),
  model: await error_of(() => client.completions.create({ model: 'no-such-model', prompt })),
  key: await error_of(() => new OpenAI({ baseURL: `${base}/v1`, apiKey: 'wrong', maxRetries: 0 }).models.list()),
};
console.log(JSON.stringify(out));
