// Aggregate throughput of `dspark serve` at several concurrency levels, through the OpenAI SDK.
// Run by bench/concurrency.sh, which starts the server:
//   node tests/js/concurrency.mjs --url URL [--levels 1,4,16,64] [--requests 64]
//        [--max-tokens 64] [--json FILE]
// The same fixed set of greedy chat requests (distinct questions over a shared system prompt)
// runs at each level: N clients take the next request as soon as their previous one finishes.
// Level 1 is the serialised run. Reports completion tokens / wall seconds per level and checks
// that every level returned the same text for every request (greedy output must not depend on
// what else is in the batch).
import OpenAI from 'openai';
import fs from 'node:fs';
import { arg } from './bench_util.mjs';

const url = arg('url', process.env.DSPARK_URL);
const levels = arg('levels', '1,4,16,64').split(',').map(Number);
const nreq = Number(arg('requests', 64));
const maxTokens = Number(arg('max-tokens', 64));
const jsonOut = arg('json', null);

const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 600000 });
const model = (await client.models.list()).data[0].id;
const system = { role: 'system', content: 'You are a careful Python assistant. Answer with short, correct code.' };
const topics = ['reverses a string', 'checks for a palindrome', 'merges two sorted lists',
  'does a binary search', 'counts words in a text', 'flattens a nested list',
  'returns the n-th Fibonacci number', 'sorts with quicksort', 'parses a CSV line',
  'implements a stack', 'removes duplicates keeping the order', 'computes a factorial',
  'checks for a prime', 'transposes a matrix', 'finds the longest word', 'converts Celsius to Fahrenheit'];
const requests = Array.from({ length: nreq }, (_, i) => ({
  model, temperature: 0, max_tokens: maxTokens,
  messages: [system, { role: 'user', content: `Task ${i + 1}: write a function that ${topics[i % topics.length]}` +
    (i >= topics.length ? `, named f${i}.` : '.') }],
}));

async function runLevel(n) {
  const texts = new Array(nreq);
  let next = 0, tokens = 0, errors = 0;
  const t0 = performance.now();
  async function worker() {
    while (next < nreq) {
      const i = next++;
      try {
        const r = await client.chat.completions.create(requests[i]);
        texts[i] = r.choices[0].message.content;
        tokens += r.usage.completion_tokens;
      } catch (e) {
        errors++;
        console.error(`request ${i}: ${e.message}`);
      }
    }
  }
  await Promise.all(Array.from({ length: n }, worker));
  const s = (performance.now() - t0) / 1000;
  return { clients: n, seconds: s, tokens, tok_s: tokens / s, errors, texts };
}

const results = [];
await runLevel(Math.min(4, nreq)); // warm-up: the prefix cache holds the system prompt
for (const n of levels) results.push(await runLevel(n));
const ref = results[0];
let mismatches = 0;
console.log('clients  seconds  tokens  tok/s   vs serialised  same text as level ' + ref.clients);
for (const r of results) {
  const same = r.texts.filter((t, i) => t === ref.texts[i]).length;
  mismatches += nreq - same;
  console.log(`${String(r.clients).padStart(7)}  ${r.seconds.toFixed(2).padStart(7)}  ${String(r.tokens).padStart(6)}` +
    `  ${r.tok_s.toFixed(0).padStart(6)}  ${(r.tok_s / ref.tok_s).toFixed(2).padStart(12)}x  ${same}/${nreq}`);
}
const errors = results.reduce((a, r) => a + r.errors, 0);
if (jsonOut)
  fs.writeFileSync(jsonOut, JSON.stringify({ model, requests: nreq, max_tokens: maxTokens,
    levels: results.map(({ texts, ...r }) => r), mismatches, errors }, null, 1));
if (errors || mismatches) {
  console.log(`FAIL ${errors} errors, ${mismatches} outputs differ from the serialised run`);
  process.exit(1);
}
