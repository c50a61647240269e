// Time to first token of a follow-up turn over a long shared prefix, against a cold prompt of
// the same length, through the OpenAI API (streamed /v1/completions, so the prompt's tokens are
// exactly the text sent). Run by bench/ttft.sh, which starts the server:
//   node tests/js/ttft.mjs --url URL [--prefix 2000] [--trials 7] [--from-disk] [--json FILE]
// Each trial uses prompts never sent before: a cold prompt of about --prefix tokens (its
// answer's first token is the cold time), then that prompt + its answer + a new question (the
// follow-up's first token). Medians over the trials; the first trial is a warm-up and dropped.
// --from-disk (for a server with --prefix-cache-entries 1 --prefix-cache-dir DIR): an
// unrelated request between the turns moves the first turn to the spill folder, and the
// follow-up reads it from there.
import OpenAI from 'openai';
import fs from 'node:fs';
import { arg, source, metric } from './bench_util.mjs';

const url = arg('url', process.env.DSPARK_URL);
const target = Number(arg('prefix', 2000));
const trials = Number(arg('trials', 7));
const jsonOut = arg('json', null);
const fromDisk = process.argv.includes('--from-disk');
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
const model = (await client.models.list()).data[0].id;

async function tokens(text) {
  const r = await client.completions.create({ model, prompt: text, max_tokens: 1, temperature: 0 });
  return r.usage.prompt_tokens;
}

// Streams prompt; returns ms to the first token's text, the text and the usage.
async function timed(prompt, maxTokens) {
  const t0 = performance.now();
  const st = await client.completions.create({
    model, prompt, max_tokens: maxTokens, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let first = null, text = '', usage = null;
  for await (const ch of st) {
    if (ch.usage) usage = ch.usage;
    const t = ch.choices[0]?.text;
    if (t && first === null) first = performance.now() - t0;
    text += t || '';
  }
  return { ms: first, text, usage };
}

// Evicts the last entry with an unrelated request, then waits until its file is written.
async function evict(i) {
  await tokens(`print(${i})\n`.repeat(8));
  for (let k = 0; k < 500 && (await metric(url, 'dspark_prefix_cache_spill_pending_bytes')) > 0; k++)
    await new Promise((r) => setTimeout(r, 10));
}

const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];

// functions per prompt for about `target` tokens (the follow-up adds about 35), by secant
// steps over calibration prompts (seeds of the same width as the trials', never reused)
let n0 = 10, t0 = await tokens(source(190, n0)), n = 40;
for (let k = 1; k <= 3; k++) {
  const t = await tokens(source(190 + k, n));
  const next = Math.round(n + (target - 35 - t) / ((t - t0) / (n - n0)));
  [n0, t0] = [n, t];
  if (next === n) break;
  n = Math.max(1, next);
}

const cold = [], follow = [], rows = [];
for (let i = 0; i <= trials; i++) {
  const p = source(100 + i, n);
  const c = await timed(p, 16);
  if (fromDisk) await evict(i);
  const f = await timed(p + c.text + '\n\ndef main():\n    print(f_1_2(3, 4))\n', 4);
  const row = {
    cold_ms: c.ms, cold_prompt_tokens: c.usage.prompt_tokens,
    followup_ms: f.ms, followup_prompt_tokens: f.usage.prompt_tokens,
    followup_cached_tokens: f.usage.prompt_tokens_details.cached_tokens,
  };
  if (i === 0) continue; // warm-up
  rows.push(row);
  cold.push(c.ms);
  follow.push(f.ms);
  console.log(`trial ${i}: cold ${c.ms.toFixed(1)} ms (${row.cold_prompt_tokens} tokens), follow-up ` +
    `${f.ms.toFixed(1)} ms (${row.followup_prompt_tokens} tokens, ${row.followup_cached_tokens} cached)`);
}
const out = {
  from_disk: fromDisk,
  prefix_tokens: rows[0].followup_cached_tokens,
  cold_ms: median(cold),
  followup_ms: median(follow),
  speedup: median(cold) / median(follow),
  trials: rows,
};
console.log(`median: cold ${out.cold_ms.toFixed(1)} ms, follow-up over ${out.prefix_tokens} cached ` +
  `${fromDisk ? 'on disk ' : ''}` +
  `tokens ${out.followup_ms.toFixed(1)} ms: ${out.speedup.toFixed(1)}x`);
if (jsonOut) fs.writeFileSync(jsonOut, JSON.stringify(out, null, 2) + '\n');
const bad = rows.filter((r) => r.followup_cached_tokens < r.cold_prompt_tokens);
if (bad.length) {
  console.log(`FAIL ${bad.length} follow-ups did not reuse the whole first turn`);
  process.exit(1);
}
