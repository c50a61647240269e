// Memory of concurrent requests over one long cached prefix, through the OpenAI API: a warm-up
// request caches a prompt of about --prefix tokens, then --clients requests that start with it
// (each with its own question) run at once; the server's resident memory is sampled meanwhile.
// Run by bench/shared_prefix.sh, which starts the server and passes its pid:
//   node tests/js/shared_prefix.mjs --url URL --pid PID [--prefix 2000] [--clients 16]
//                                    [--json FILE]
import OpenAI from 'openai';
import fs from 'node:fs';
import { arg, source, metric } from './bench_util.mjs';

const url = arg('url', process.env.DSPARK_URL);
const pid = Number(arg('pid', 0));
const target = Number(arg('prefix', 2000));
const clients = Number(arg('clients', 16));
const jsonOut = arg('json', null);
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
const model = (await client.models.list()).data[0].id;

const rssMiB = () => {
  const m = fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/^VmRSS:\s+(\d+) kB/m);
  return m ? Number(m[1]) / 1024 : NaN;
};
const prefix = source(7, Math.round(target / 31));
const warm = await client.completions.create({ model, prompt: prefix, max_tokens: 1, temperature: 0 });
const before = rssMiB();
let peak = before, done = false;
const sampler = (async () => {
  while (!done) {
    peak = Math.max(peak, rssMiB());
    await new Promise((r) => setTimeout(r, 5));
  }
})();
const t0 = performance.now();
const runs = await Promise.all(
  Array.from({ length: clients }, (_, i) =>
    client.completions.create({
      model, prompt: `${prefix}def question_${i}(n):\n`, max_tokens: 32, temperature: 0,
    })),
);
const seconds = (performance.now() - t0) / 1000;
done = true;
await sampler;
const res = {
  prefix_tokens: warm.usage.prompt_tokens,
  clients,
  rss_before_mib: before,
  rss_peak_mib: peak,
  rss_growth_mib: peak - before,
  seconds,
  reused_tokens: await metric(url, 'dspark_prefix_cache_reused_tokens_total'),
  shared_tokens: await metric(url, 'dspark_prefix_cache_shared_tokens_total'),
  prompt_tokens: runs.reduce((s, r) => s + r.usage.prompt_tokens, 0),
};
console.log(
  `${clients} requests over a ${res.prefix_tokens}-token cached prefix: resident memory ` +
    `${before.toFixed(1)} -> peak ${peak.toFixed(1)} MiB (+${res.rss_growth_mib.toFixed(1)}), ` +
    `${seconds.toFixed(2)} s; prefix tokens reused ${res.reused_tokens}, read without a copy ` +
    `${res.shared_tokens}`,
);
if (jsonOut) fs.writeFileSync(jsonOut, JSON.stringify(res, null, 2));
