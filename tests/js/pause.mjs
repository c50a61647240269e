// How long a running stream pauses while a long prompt is prefilled next to it (chunked
// prefill), through the OpenAI API. Run by bench/pause.sh, which starts the server:
//   node tests/js/pause.mjs --url URL [--functions 62] [--trials 5]
// A greedy stream runs; after its 20th event a prompt of --functions Python functions (62:
// about 1,970 tokens on models/pycoder) arrives. Reported per trial: the stream's longest
// pause while that prompt was answered, that prompt's time to first token and prefill time,
// and the stream's median gap between events otherwise. Medians over the trials after the
// first (a warm-up).
import OpenAI from 'openai';
import { arg, source } from './bench_util.mjs';

const url = arg('url', process.env.DSPARK_URL);
const functions = Number(arg('functions', 62));
const trials = Number(arg('trials', 5));
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
const model = (await client.models.list()).data[0].id;

const rows = [];
for (let t = 0; t <= trials; t++) {
  const times = [];
  let go;
  const started = new Promise((r) => (go = r));
  const stream = (async () => {
    const st = await client.completions.create({
      model, prompt: 'class Matrix:\n', max_tokens: 1500, stream: true, temperature: 0,
    });
    for await (const ch of st) {
      times.push(performance.now());
      if (times.length === 20) go();
    }
  })();
  await started;
  const t0 = performance.now();
  const r = await client.completions.create({ model, prompt: source(300 + t, functions), max_tokens: 1, temperature: 0 });
  const t1 = performance.now();
  await stream;
  let pause = 0;
  const gaps = [];
  for (let i = 1; i < times.length; i++) {
    const g = times[i] - times[i - 1];
    if (times[i] > t0 && times[i - 1] < t1) pause = Math.max(pause, g);
    else gaps.push(g);
  }
  gaps.sort((a, b) => a - b);
  if (t > 0)
    rows.push({ tokens: r.usage.prompt_tokens, pause, ttft: t1 - t0, prefill: r.x_dspark.prefill_s * 1000,
      gap: gaps[gaps.length >> 1] });
}
const med = (k) => rows.map((x) => x[k]).sort((a, b) => a - b)[rows.length >> 1];
console.log(`${rows[0].tokens}-token prompt: stream pause ${med('pause').toFixed(1)} ms, its TTFT ` +
  `${med('ttft').toFixed(0)} ms (prefill ${med('prefill').toFixed(0)} ms), stream gap otherwise ` +
  `${med('gap').toFixed(2)} ms`);
