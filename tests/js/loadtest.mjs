// Load test of `dspark serve` through the OpenAI SDK: N concurrent clients, each streaming chat
// completions back to back for a bounded time, while the server's resident memory is sampled.
// Run by bench/loadtest.sh, which starts the server:
//   node tests/js/loadtest.mjs --url URL --pid PID [--clients 64] [--duration 300]
//        [--interval 5] [--json FILE]
// Each client holds a conversation over a shared system prompt: a new question, or (half the
// time, up to three turns) a follow-up over its history, so the prefix cache sees shared and
// growing prefixes. Sampling and budgets vary; one request in 20 is abandoned after its first
// chunk (a client that goes away). An error is any failed request, or a stream that ends
// without a finish_reason. Memory: VmRSS of --pid every --interval seconds; the warm-up is the
// first fifth of the run (at most 60 s). Exits 1 on errors, or when RSS grew by more than 10%
// (plus 16 MiB) from the end of the warm-up to the end of the run.
import OpenAI from 'openai';
import fs from 'node:fs';
import { arg } from './bench_util.mjs';

const url = arg('url', process.env.DSPARK_URL);
const pid = arg('pid', null);
const clients = Number(arg('clients', 64));
const duration = Number(arg('duration', 300));
const interval = Number(arg('interval', 5));
const jsonOut = arg('json', null);
const warmup = Math.min(60, duration / 5);

const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
const model = (await client.models.list()).data[0].id;

const system = {
  role: 'system',
  content: 'You are a careful Python assistant. Answer with short, correct code and a one-line ' +
    'explanation. Prefer the standard library, name things clearly and handle empty inputs.',
};
const questions = [
  'Write a function that reverses a string.', 'Write a function that checks for a palindrome.',
  'Write a function that merges two sorted lists.', 'Write a binary search.',
  'Write a function that counts words in a text.', 'Write a function that flattens a nested list.',
  'Write a function that returns the n-th Fibonacci number.', 'Write a quicksort.',
  'Write a function that parses a CSV line.', 'Write a class for a stack.',
  'Write a function that removes duplicates from a list, keeping the order.',
  'Write a function that computes a factorial iteratively.', 'Write a function that checks for a prime.',
  'Write a function that transposes a matrix.', 'Write a function that finds the longest word.',
  'Write a function that converts Celsius to Fahrenheit.',
];
const followUps = ['Now add type hints.', 'Make it handle None.', 'Add a docstring and a test.',
  'Make it faster.', 'Explain the complexity.'];

function rssKiB() {
  try {
    const m = fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+) kB/m);
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

const t0 = performance.now();
const elapsed = () => (performance.now() - t0) / 1000;
const stats = { ok: 0, abandoned: 0, errors: 0, tokens: 0, ttft: [], latency: [], messages: [] };
const rss = [];
if (pid) rss.push({ t: 0, kib: rssKiB() });
const sampler = setInterval(() => pid && rss.push({ t: elapsed(), kib: rssKiB() }), interval * 1000);

async function one(id, n) {
  let history = [system];
  let rng = id * 7919 + 1;
  const rand = (k) => ((rng = (Math.imul(rng, 1664525) + 1013904223) >>> 0), (rng >>> 8) % k);
  while (elapsed() < duration) {
    if (history.length === 1 || history.length >= 7 || rand(2) === 0)
      history = [system, { role: 'user', content: questions[rand(questions.length)] }];
    else history.push({ role: 'user', content: followUps[rand(followUps.length)] });
    const abandon = rand(20) === 0;
    const req = {
      model, messages: history, max_tokens: 16 + rand(49), stream: true,
      stream_options: { include_usage: true },
      temperature: rand(2) ? 0 : 0.8, seed: rand(1000),
    };
    const ac = new AbortController();
    const start = performance.now();
    let first = null, text = '', finish = null, usage = null;
    try {
      const st = await client.chat.completions.create(req, { signal: ac.signal });
      for await (const ch of st) {
        if (ch.usage) usage = ch.usage;
        for (const c of ch.choices) {
          if (c.delta?.content) {
            if (first === null) first = performance.now() - start;
            text += c.delta.content;
          }
          if (c.finish_reason) finish = c.finish_reason;
        }
        if (abandon && first !== null) {
          ac.abort();
          break;
        }
      }
      if (abandon && first !== null) {
        stats.abandoned++;
        history = [system];
        continue;
      }
      if (!finish) throw new Error('the stream ended without a finish_reason');
      stats.ok++;
      stats.tokens += usage ? usage.completion_tokens : 0;
      if (first !== null) stats.ttft.push(first);
      stats.latency.push(performance.now() - start);
      history.push({ role: 'assistant', content: text });
    } catch (e) {
      if (abandon && ac.signal.aborted) {
        stats.abandoned++;
      } else {
        stats.errors++;
        if (stats.messages.length < 10) stats.messages.push(`client ${id} request ${n}: ${e.message || e}`);
      }
      history = [system];
    }
    n++;
  }
}

await Promise.all(Array.from({ length: clients }, (_, i) => one(i, 0)));
clearInterval(sampler);
if (pid) rss.push({ t: elapsed(), kib: rssKiB() });

const pct = (a, p) => (a.length ? [...a].sort((x, y) => x - y)[Math.floor((a.length - 1) * p)] : null);
const afterWarm = rss.filter((s) => s.t >= warmup && s.kib);
const warmKiB = afterWarm.length ? afterWarm[0].kib : null;
const endKiB = afterWarm.length ? afterWarm[afterWarm.length - 1].kib : null;
const maxKiB = afterWarm.length ? Math.max(...afterWarm.map((s) => s.kib)) : null;
const secs = elapsed();
const out = {
  clients, duration_s: secs, requests_ok: stats.ok, requests_abandoned: stats.abandoned,
  errors: stats.errors, error_messages: stats.messages,
  requests_per_s: stats.ok / secs, tokens_per_s: stats.tokens / secs,
  ttft_ms: { p50: pct(stats.ttft, 0.5), p90: pct(stats.ttft, 0.9), p99: pct(stats.ttft, 0.99) },
  latency_ms: { p50: pct(stats.latency, 0.5), p99: pct(stats.latency, 0.99) },
  rss_mib: { warmup_s: warmup, after_warmup: warmKiB / 1024, end: endKiB / 1024, max: maxKiB / 1024 },
  rss_samples: rss,
};
const mib = (k) => (k / 1024).toFixed(1);
console.log(`${clients} clients, ${secs.toFixed(0)} s: ${stats.ok} requests (${out.requests_per_s.toFixed(2)}/s, ` +
  `${out.tokens_per_s.toFixed(0)} tokens/s), ${stats.abandoned} abandoned on purpose, ${stats.errors} errors`);
console.log(`time to first token p50 ${out.ttft_ms.p50?.toFixed(0)} ms, p90 ${out.ttft_ms.p90?.toFixed(0)} ms, ` +
  `p99 ${out.ttft_ms.p99?.toFixed(0)} ms; request p50 ${out.latency_ms.p50?.toFixed(0)} ms`);
for (const m of stats.messages) console.log(`  ${m}`);
let fail = stats.errors > 0 || stats.ok === 0;
if (pid && warmKiB) {
  const grew = endKiB > warmKiB * 1.1 + 16 * 1024;
  console.log(`server RSS: ${mib(warmKiB)} MiB after ${warmup.toFixed(0)} s of warm-up, ${mib(endKiB)} MiB at ` +
    `the end, ${mib(maxKiB)} MiB at most${grew ? ' (grew)' : ''}`);
  fail ||= grew;
}
if (jsonOut) fs.writeFileSync(jsonOut, JSON.stringify(out, null, 2) + '\n');
process.exit(fail ? 1 : 0);
