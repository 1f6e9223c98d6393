// Asks a running `smelt serve` the questions of a chat JSONL file through the official OpenAI client
// (npm `openai`): each record's messages up to its last assistant reply, greedy. Prints one JSON
// array of {question, reference, answer, finish_reason, prompt_tokens, completion_tokens}
// (bench/sft/run, tests/train/trainer_chat_test.cpp).
// Usage: node chat_ask.mjs BASE_URL MODEL FILE.jsonl MAX_TOKENS
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';

const [base, model, file, maxTokens] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 120_000 });
const out = [];
for (const line of readFileSync(file, 'utf8').split('\n')) {
  if (!line.trim()) continue;
  const messages = JSON.parse(line).messages;
  const last = messages.map((m) => m.role).lastIndexOf('assistant');
  const r = await client.chat.completions.create({
    model, messages: messages.slice(0, last), max_tokens: Number(maxTokens), temperature: 0,
  });
  out.push({
    question: messages[last - 1].content,
    reference: messages[last].content,
    answer: r.choices[0].message.content,
    finish_reason: r.choices[0].finish_reason,
    prompt_tokens: r.usage.prompt_tokens,
    completion_tokens: r.usage.completion_tokens,
  });
}
console.log(JSON.stringify(out, null, 1));
