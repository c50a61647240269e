#!/usr/bin/env python3
"""bench/ttft.py: tests/js/ttft.mjs for machines without Node.js (the GPU machine): time to
first token of a follow-up turn over a long cached prefix against a cold prompt of the same
length, through a running `dspark serve` (streamed /v1/completions, standard library only).

    python3 bench/ttft.py --url URL [--prefix 2000] [--trials 7] [--logprobs] [--json FILE]

Each trial uses prompts never sent before: a cold prompt of about --prefix tokens (its
answer's first token is the cold time), then that prompt + its 16-token answer + a new line
(the follow-up's first token). Medians over the trials; the first trial is a warm-up and
dropped. --logprobs asks for each token's logprob, so that every token is streamed even when
its text is empty (a random-weight model with a borrowed tokenizer). Exits 1 when a follow-up
did not reuse the whole first turn.
"""
import argparse
import json
import sys
import time
import urllib.request


def source(seed, n):
    """the same synthetic module as tests/js/bench_util.mjs"""
    s = f'# module {seed}\n'
    for i in range(n):
        s += (f'def f_{seed}_{i}(x, y):\n    z = x * {(i * 7 + seed) % 97} + y\n'
              f'    return z - {i}\n\n')
    return s


def request(url, body):
    return urllib.request.Request(url + '/v1/completions', data=json.dumps(body).encode(),
                                  headers={'Content-Type': 'application/json'})


def tokens(url, model, text):
    body = {'model': model, 'prompt': text, 'max_tokens': 1, 'temperature': 0}
    with urllib.request.urlopen(request(url, body), timeout=600) as r:
        return json.load(r)['usage']['prompt_tokens']


def timed(url, model, prompt, max_tokens, logprobs):
    """ms to the first token, the text and the usage of a streamed completion"""
    body = {'model': model, 'prompt': prompt, 'max_tokens': max_tokens, 'temperature': 0,
            'stream': True, 'stream_options': {'include_usage': True}}
    if logprobs:
        body['logprobs'] = 1
    t0 = time.perf_counter()
    first, text, usage = None, '', None
    with urllib.request.urlopen(request(url, body), timeout=600) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith('data: ') or line == 'data: [DONE]':
                continue
            ch = json.loads(line[6:])
            if ch.get('usage'):
                usage = ch['usage']
            c = ch['choices'][0] if ch.get('choices') else {}
            t = c.get('text')
            if (t or c.get('logprobs')) and first is None:
                first = (time.perf_counter() - t0) * 1e3
            text += t or ''
    return first, text, usage


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--url', required=True)
    ap.add_argument('--prefix', type=int, default=2000)
    ap.add_argument('--trials', type=int, default=7)
    ap.add_argument('--logprobs', action='store_true')
    ap.add_argument('--json')
    a = ap.parse_args()
    with urllib.request.urlopen(a.url + '/v1/models', timeout=60) as r:
        model = json.load(r)['data'][0]['id']
    # functions per prompt for about --prefix tokens (the follow-up adds about 35), by secant
    # steps over calibration prompts never reused
    n0, t0, n = 10, tokens(a.url, model, source(190, 10)), 40
    for k in range(1, 4):
        t = tokens(a.url, model, source(190 + k, n))
        nxt = round(n + (a.prefix - 35 - t) / ((t - t0) / (n - n0)))
        n0, t0 = n, t
        if nxt == n:
            break
        n = max(1, nxt)
    rows = []
    for i in range(a.trials + 1):
        p = source(100 + i, n)
        c_ms, c_text, c_use = timed(a.url, model, p, 16, a.logprobs)
        f_ms, _, f_use = timed(a.url, model,
                               p + c_text + '\n\ndef main():\n    print(f_1_2(3, 4))\n', 4,
                               a.logprobs)
        row = {'cold_ms': c_ms, 'cold_prompt_tokens': c_use['prompt_tokens'],
               'followup_ms': f_ms, 'followup_prompt_tokens': f_use['prompt_tokens'],
               'followup_cached_tokens': f_use['prompt_tokens_details']['cached_tokens']}
        if i == 0:
            continue  # warm-up
        rows.append(row)
        print(f"trial {i}: cold {c_ms:.1f} ms ({row['cold_prompt_tokens']} tokens), follow-up "
              f"{f_ms:.1f} ms ({row['followup_prompt_tokens']} tokens, "
              f"{row['followup_cached_tokens']} cached)", flush=True)
    med = lambda v: sorted(v)[len(v) // 2]
    cold, follow = med([r['cold_ms'] for r in rows]), med([r['followup_ms'] for r in rows])
    out = {'prefix_tokens': rows[0]['followup_cached_tokens'], 'cold_ms': cold,
           'followup_ms': follow, 'speedup': cold / follow, 'trials': rows}
    print(f"median: cold {cold:.1f} ms, follow-up over {out['prefix_tokens']} cached tokens "
          f"{follow:.1f} ms: {out['speedup']:.1f}x")
    if a.json:
        with open(a.json, 'w') as f:
            json.dump(out, f, indent=2)
    bad = [r for r in rows if r['followup_cached_tokens'] < r['cold_prompt_tokens']]
    if bad:
        print(f'FAIL {len(bad)} follow-ups did not reuse the whole first turn')
        sys.exit(1)


if __name__ == '__main__':
    main()
