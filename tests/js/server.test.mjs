// Black-box tests of `dspark serve` through the official openai SDK. The server runs on
// models/pycoder; tests/cli/server.sh starts it and passes its URL in DSPARK_URL (and a
// second, key-protected server in DSPARK_URL_KEY).
import OpenAI from 'openai';

const base = process.env.DSPARK_URL;
const keyed = process.env.DSPARK_URL_KEY;
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 });
let failed = 0;

async function test(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}
function assert(cond, msg) {
  if (!cond) throw new Error(msg || 'assertion failed');
}
const user = (content) => [{ role: 'user', content }];
const greedy = { model: 'pycoder', temperature: 0, max_tokens: 48 };

async function metric(name) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const m = text.match(new RegExp(`^${name} (\\S+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}

await test('chat, not streamed', async () => {
  const r = await client.chat.completions.create({ ...greedy, messages: user('Write a function that adds two numbers.') });
  assert(r.object === 'chat.completion' && r.choices.length === 1);
  const c = r.choices[0];
  assert(c.message.role === 'assistant' && typeof c.message.content === 'string' && c.message.content.length > 0);
  assert(['stop', 'length'].includes(c.finish_reason));
  assert(r.usage.prompt_tokens > 0 && r.usage.completion_tokens > 0);
  assert(r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens);
  assert(r.x_dspark && r.x_dspark.mode && r.x_dspark.target_forwards > 0, 'x_dspark block');
});

await test('chat streamed equals not streamed', async () => {
  const messages = user('Write a Python function that reverses a list.');
  const whole = await client.chat.completions.create({ ...greedy, messages });
  const stream = await client.chat.completions.create({ ...greedy, messages, stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, role = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      if (ch.delta.role) role = ch.delta.role;
      if (ch.delta.content) text += ch.delta.content;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert(role === 'assistant', 'first delta carries the role');
  assert(text === whole.choices[0].message.content, `stream text differs:\n${text}\n---\n${whole.choices[0].message.content}`);
  assert(finish === whole.choices[0].finish_reason);
  assert(usage && usage.completion_tokens === whole.usage.completion_tokens, 'usage chunk');
});

await test('completions, streamed and not', async () => {
  const prompt = 'def fibonacci(n):\n';
  const r = await client.completions.create({ ...greedy, prompt });
  assert(r.object === 'text_completion' && r.choices[0].text.length > 0);
  const s = await client.completions.create({ ...greedy, prompt, stream: true });
  let text = '';
  for await (const chunk of s) text += chunk.choices[0]?.text ?? '';
  assert(text === r.choices[0].text, 'streamed completion differs');
});

await test('logprobs', async () => {
  const r = await client.chat.completions.create({ ...greedy, max_tokens: 12, messages: user('Say hello.'), logprobs: true, top_logprobs: 3 });
  const lp = r.choices[0].logprobs.content;
  assert(lp.length === r.usage.completion_tokens, 'one entry per token');
  for (const e of lp) {
    assert(e.logprob <= 0 && e.top_logprobs.length === 3);
    assert(e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob);
    assert(Math.abs(e.logprob - e.top_logprobs[0].logprob) < 1e-5, 'greedy picks the top token');
  }
  const c = await client.completions.create({ ...greedy, max_tokens: 8, prompt: 'import numpy as np\n', logprobs: 2 });
  assert(c.choices[0].logprobs.tokens.length === c.usage.completion_tokens);
  assert(c.choices[0].logprobs.token_logprobs.every((x) => x <= 0));
});

await test('stop strings', async () => {
  const prompt = 'def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n';
  const free = await client.completions.create({ ...greedy, prompt, max_tokens: 40 });
  const text = free.choices[0].text;
  const stop = text.slice(6, 9);
  assert(stop.length === 3, 'need some text');
  const r = await client.completions.create({ ...greedy, prompt, max_tokens: 40, stop: [stop, 'zzzz'] });
  assert(r.choices[0].finish_reason === 'stop');
  assert(r.choices[0].text === text.slice(0, text.indexOf(stop)), 'text ends right before the stop string');
});

await test('seed reproducibility and n > 1', async () => {
  const req = { model: 'pycoder', temperature: 1.0, max_tokens: 24, messages: user('Write a sorting function.'), seed: 1234 };
  const a = await client.chat.completions.create(req);
  const b = await client.chat.completions.create(req);
  assert(a.choices[0].message.content === b.choices[0].message.content, 'same seed, same text');
  const n = await client.chat.completions.create({ ...req, n: 3 });
  assert(n.choices.length === 3 && n.choices.map((c) => c.index).join() === '0,1,2');
  assert(n.choices[0].message.content === a.choices[0].message.content, 'choice 0 uses the seed');
  assert(new Set(n.choices.map((c) => c.message.content)).size > 1, 'other choices differ');
});

await test('tools: definitions, tool calls and results in the history', async () => {
  const tools = [{ type: 'function', function: { name: 'get_time', description: 'Current time in a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
  const first = await client.chat.completions.create({ ...greedy, tools, messages: user('What time is it in Paris?') });
  assert(['stop', 'length', 'tool_calls'].includes(first.choices[0].finish_reason));
  const messages = [
    ...user('What time is it in Paris?'),
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_time', arguments: '{"city":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '14:05' },
  ];
  const second = await client.chat.completions.create({ ...greedy, tools, messages });
  assert(second.choices[0].message.role === 'assistant');
  const streamed = await client.chat.completions.create({ ...greedy, tools, messages, stream: true });
  let text = '';
  for await (const chunk of streamed) text += chunk.choices[0]?.delta?.content ?? '';
  assert(text === (second.choices[0].message.content ?? ''), 'tool-aware stream equals the whole answer');
});

await test('errors are OpenAI-shaped', async () => {
  const bad = await fetch(`${base}/v1/chat/completions`, { method: 'POST', body: '{"messages": [' });
  assert(bad.status === 400);
  const body = await bad.json();
  assert(body.error && body.error.type === 'invalid_request_error' && body.error.message);
  for (const [req, status] of [
    [{ model: 'pycoder', messages: 'hi' }, 400],
    [{ model: 'pycoder', messages: user('x'), temperature: 'hot' }, 400],
    [{ model: 'pycoder', messages: user('x'), n: 2, stream: true }, 400],
    [{ model: 'pycoder', messages: user('x'), no_such_field: 1 }, 400],
    [{ model: 'no-such-model', messages: user('x') }, 404],
  ]) {
    const r = await fetch(`${base}/v1/chat/completions`, { method: 'POST', body: JSON.stringify(req) });
    assert(r.status === status, `${JSON.stringify(req)} gave ${r.status}`);
  }
  const inv = await fetch(`${base}/v1/completions`, { method: 'POST', body: Buffer.from([0x7b, 0x22, 0xff, 0x22, 0x3a, 0x31, 0x7d]) });
  assert(inv.status === 400, 'invalid UTF-8');
  const big = await fetch(`${base}/v1/completions`, { method: 'POST', body: JSON.stringify({ prompt: 'a'.repeat(9 << 20) }) });
  assert(big.status === 413, `oversized body gave ${big.status}`);
  const long = await fetch(`${base}/v1/completions`, { method: 'POST', body: JSON.stringify({ prompt: 'word '.repeat(5000) }) });
  assert(long.status === 400 && (await long.json()).error.message.includes('context'), 'prompt longer than the context');
  try {
    await client.chat.completions.create({ model: 'pycoder', messages: 'nope' });
    assert(false, 'the SDK should throw');
  } catch (e) {
    assert(e instanceof OpenAI.BadRequestError, `got ${e}`);
  }
});

await test('API key', async () => {
  const noKey = new OpenAI({ baseURL: `${keyed}/v1`, apiKey: 'wrong', maxRetries: 0 });
  try {
    await noKey.chat.completions.create({ ...greedy, messages: user('hi') });
    assert(false, 'should be refused');
  } catch (e) {
    assert(e instanceof OpenAI.AuthenticationError, `got ${e}`);
  }
  const withKey = new OpenAI({ baseURL: `${keyed}/v1`, apiKey: 'sekret', maxRetries: 0 });
  const r = await withKey.chat.completions.create({ ...greedy, max_tokens: 4, messages: user('hi') });
  assert(r.choices.length === 1);
  assert((await fetch(`${keyed}/health`)).status === 200, '/health needs no key');
  const models = await withKey.models.list();
  assert(models.data[0].id === 'pycoder');
});

await test('disconnect mid-stream, then a normal request', async () => {
  const before = await metric('dspark_completion_tokens_total');
  const ac = new AbortController();
  const stream = await client.completions.create(
    { model: 'pycoder', prompt: 'import os\nimport sys\n', max_tokens: 4000, temperature: 1.0, seed: 3, stream: true },
    { signal: ac.signal });
  let chunks = 0;
  try {
    for await (const chunk of stream) {
      if (++chunks === 3) ac.abort();
    }
  } catch (e) { /* aborted */ }
  // the engine must stop that generation and serve the next request
  const r = await client.chat.completions.create({ ...greedy, max_tokens: 8, messages: user('hi') });
  assert(r.choices.length === 1);
  for (let i = 0; i < 50 && (await metric('dspark_requests_running')) !== 0; i++) await new Promise((ok) => setTimeout(ok, 100));
  const spent = (await metric('dspark_completion_tokens_total')) - before;
  assert(spent < 2000, `the aborted generation went on: ${spent} tokens`);
});

// 16 requests with mixed temperatures, penalties, top_p, logprobs and seeds, at once against
// one at a time: the same text and logprobs, on the server at url
async function concurrentEqualsAlone(url) {
  const c = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
  const reqs = [];
  for (let i = 0; i < 16; i++) {
    const r = { model: 'pycoder', max_tokens: 16 + (i % 5) * 6, seed: 40 + i, messages: user(`Write function number ${i} that ${['sorts', 'parses', 'adds', 'reads'][i % 4]} things.`) };
    if (i % 2) r.temperature = 0.8; else r.temperature = 0;
    if (i % 3 === 1) r.presence_penalty = 0.7;
    if (i % 4 === 2) { r.logprobs = true; r.top_logprobs = 2; }
    if (i % 5 === 3) r.top_p = 0.9;
    reqs.push(r);
  }
  const alone = [];
  for (const r of reqs) alone.push(await c.chat.completions.create(r));
  const together = await Promise.all(reqs.map((r) => c.chat.completions.create(r)));
  for (let i = 0; i < 16; i++) {
    assert(together[i].choices[0].message.content === alone[i].choices[0].message.content, `request ${i} differs under concurrency`);
    if (reqs[i].logprobs) assert(JSON.stringify(together[i].choices[0].logprobs) === JSON.stringify(alone[i].choices[0].logprobs), `logprobs ${i}`);
  }
  return together[0].x_dspark.mode;
}

await test('16 concurrent requests give what each gives alone', async () => {
  await concurrentEqualsAlone(base);
});

// DSPARK_URL_MODES: more servers, each in another speculative mode (draft, dspark, dflash) or
// with --max-draft auto or --load-aware
for (const [i, url] of (process.env.DSPARK_URL_MODES || '').split(',').filter(Boolean).entries()) {
  const mode = (await (await fetch(`${url}/health`)).json()).mode || url;
  await test(`16 concurrent requests give what each gives alone (server ${i + 2}, ${mode} mode)`, async () => {
    await concurrentEqualsAlone(url);
  });
}

// DSPARK_URL_POOL: a server with a K/V pool (--kv-pool-mb) too small for two requests at once
if (process.env.DSPARK_URL_POOL) {
  const url = process.env.DSPARK_URL_POOL;
  await test('requests beyond the K/V pool wait their turn and answer the same', async () => {
    await concurrentEqualsAlone(url);
    const value = async (name) => {
      const text = await (await fetch(`${url}/metrics`)).text();
      return Number((text.match(new RegExp(`^${name} (\\S+)$`, 'm')) || [])[1]);
    };
    assert((await value('dspark_kv_pool_waits_total')) > 0, 'no request waited for the pool');
    // the engine retires the last job right after answering it
    let held = await value('dspark_kv_pool_bytes');
    for (let i = 0; i < 100 && held !== 0; i++) {
      await new Promise((ok) => setTimeout(ok, 20));
      held = await value('dspark_kv_pool_bytes');
    }
    assert(held === 0, `the pool still holds ${held} bytes of K/V after the requests`);
  });
}

// DSPARK_URL_POOL_SHARED: a baseline server whose K/V pool (6 MiB, about 1,020 positions of
// models/pycoder) holds neither of two cold 1,250-token prompts beside each other, but four
// requests over one cached 1,250-token prefix: they hold the prefix's pages, not copies of them
if (process.env.DSPARK_URL_POOL_SHARED) {
  const url = process.env.DSPARK_URL_POOL_SHARED;
  await test('requests over a cached prefix count only their own K/V against the pool', async () => {
    const c = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const plain = new OpenAI({ baseURL: `${keyed}/v1`, apiKey: 'sekret', maxRetries: 0 });
    const waits = async () => {
      const text = await (await fetch(`${url}/metrics`)).text();
      return Number((text.match(/^dspark_kv_pool_waits_total (\S+)$/m) || [])[1]);
    };
    const body = (tag) => Array.from({ length: 64 }, (_, i) =>
      `def ${tag}_${i}(x):\n    return x * ${i} + ${i % 7}\n`).join('\n');
    const req = { model: 'pycoder', temperature: 0, max_tokens: 8 };
    const warm = await c.completions.create({ ...req, prompt: body('shared') });
    assert(warm.usage.prompt_tokens > 1100, `prefix of ${warm.usage.prompt_tokens} tokens`);
    // two cold prompts of that size: the second waits for the first
    let w0 = await waits();
    // (open code, so that each generates its 8 tokens: a request that ends in one step never waits)
    await Promise.all(['cold_a', 'cold_b'].map((t) => c.completions.create({ ...req, prompt: `${body(t)}\ndef g(` })));
    assert((await waits()) > w0, 'two cold 1,250-token prompts ran beside each other in a 6 MiB pool');
    // four over the cached prefix: none waits, each reuses it and answers as without a cache
    w0 = await waits();
    const prompts = [0, 1, 2, 3].map((i) => `${body('shared')}\n# case ${i}\ndef case_${i}(`);
    const rs = await Promise.all(prompts.map((prompt) => c.completions.create({ ...req, prompt })));
    assert((await waits()) === w0, 'requests over a shared prefix waited for the pool');
    for (const [i, r] of rs.entries()) {
      const cached = r.usage.prompt_tokens_details.cached_tokens;
      assert(cached > 1100, `request ${i} reused ${cached} tokens`);
      const alone = await plain.completions.create({ ...req, prompt: prompts[i] });
      assert(r.choices[0].text === alone.choices[0].text, `request ${i} differs from an uncached run`);
    }
  });
}

// DSPARK_URL_TRIM: a baseline server with --kv-cache-mb 10; two 1,250-token prompts (each
// about 7.5 MiB of K/V) do not fit, so the older gives up its last pages and keeps its prefix
if (process.env.DSPARK_URL_TRIM) {
  const url = process.env.DSPARK_URL_TRIM;
  await test('over --kv-cache-mb the oldest entry keeps its prefix, which a follow-up reuses', async () => {
    const c = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const plain = new OpenAI({ baseURL: `${keyed}/v1`, apiKey: 'sekret', maxRetries: 0 });
    const scrape = async (name) => {
      const text = await (await fetch(`${url}/metrics`)).text();
      return Number((text.match(new RegExp(`^${name} (\\S+)$`, 'm')) || [])[1]);
    };
    const body = (tag) => Array.from({ length: 64 }, (_, i) =>
      `def ${tag}_${i}(x):\n    return x * ${i} + ${i % 5}\n`).join('\n');
    const req = { model: 'pycoder', temperature: 0, max_tokens: 8 };
    const first = await c.completions.create({ ...req, prompt: body('first') });
    assert(first.usage.prompt_tokens > 1100, `prompt of ${first.usage.prompt_tokens} tokens`);
    assert((await scrape('dspark_prefix_cache_trimmed_tokens_total')) === 0);
    await c.completions.create({ ...req, prompt: body('second') });
    // a finished request is cached, and the metrics say so, before its response goes out
    const trimmed = await scrape('dspark_prefix_cache_trimmed_tokens_total');
    assert(trimmed > 0, `trimmed ${trimmed} tokens`);
    assert((await scrape('dspark_prefix_cache_bytes')) <= 10 * 1048576, 'the cache is over its budget');
    const prompt = `${body('first')}\n# more\ndef more(`;
    const r = await c.completions.create({ ...req, prompt });
    const cached = r.usage.prompt_tokens_details.cached_tokens;
    assert(cached > 0 && cached % 64 === 0 && cached < first.usage.prompt_tokens,
      `the follow-up reused ${cached} of ${first.usage.prompt_tokens} tokens`);
    const alone = await plain.completions.create({ ...req, prompt });
    assert(r.choices[0].text === alone.choices[0].text, 'the follow-up differs from an uncached run');
  });
}

await test('a follow-up turn reuses the cached prefix and answers the same', async () => {
  const system = { role: 'system', content: 'You are a careful Python assistant. Answer with short, correct code and a one-line explanation.' };
  const first = [system, ...user('Write a function that returns the square of a number.')];
  const a = await client.chat.completions.create({ ...greedy, messages: first });
  const second = [...first, { role: 'assistant', content: a.choices[0].message.content }, ...user('Now make it work for lists.')];
  const b = await client.chat.completions.create({ ...greedy, messages: second });
  const cached = b.usage.prompt_tokens_details.cached_tokens;
  assert(cached >= 16 && cached === b.x_dspark.cached_tokens, `cached tokens: ${cached}`);
  const fresh = new OpenAI({ baseURL: `${keyed}/v1`, apiKey: 'sekret', maxRetries: 0 });
  const c = await fresh.chat.completions.create({ ...greedy, messages: second });
  assert(c.usage.prompt_tokens_details.cached_tokens === 0);
  assert(b.choices[0].message.content === c.choices[0].message.content, 'cached and fresh answers differ');
  assert((await metric('dspark_prefix_cache_hits_total')) >= 1);
});

await test('health, models, metrics', async () => {
  const h = await (await fetch(`${base}/health`)).json();
  assert(h.status === 'ok' && h.model === 'pycoder');
  const m = await client.models.list();
  assert(m.data.length === 1 && m.data[0].id === 'pycoder');
  const opt = await fetch(`${base}/v1/chat/completions`, { method: 'OPTIONS' });
  assert(opt.status === 204 && opt.headers.get('access-control-allow-origin') === '*', 'CORS preflight');
  assert((await metric('dspark_prompt_tokens_total')) > 0);
});

process.exit(failed ? 1 : 0);
