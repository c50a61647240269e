#!/usr/bin/env python3
"""bench/concurrency.py: tests/js/concurrency.mjs for machines without Node.js (the GPU
machine): aggregate throughput of a running `dspark serve` at several concurrency levels over
the OpenAI chat API, standard library only.

    python3 bench/concurrency.py --url URL [--levels 1,4,16,64] [--requests 64]
                                 [--max-tokens 64] [--json FILE]

The same fixed set of greedy chat requests (distinct questions over a shared system prompt)
runs at each level: N clients take the next request as soon as their previous one finishes.
Level 1 is the serialised run. Prints completion tokens / wall seconds per level and checks
that every level returned the same text for every request; exits 1 on errors or mismatches.
"""
import argparse
import json
import sys
import threading
import time
import urllib.request

TOPICS = ['reverses a string', 'checks for a palindrome', 'merges two sorted lists',
          'does a binary search', 'counts words in a text', 'flattens a nested list',
          'returns the n-th Fibonacci number', 'sorts with quicksort', 'parses a CSV line',
          'implements a stack', 'removes duplicates keeping the order', 'computes a factorial',
          'checks for a prime', 'transposes a matrix', 'finds the longest word',
          'converts Celsius to Fahrenheit']
SYSTEM = 'You are a careful Python assistant. Answer with short, correct code.'


def post(url, body):
    req = urllib.request.Request(url + '/v1/chat/completions', data=json.dumps(body).encode(),
                                 headers={'Content-Type': 'application/json'})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def run_level(url, requests, n):
    texts, tokens, errors = [None] * len(requests), [0], [0]
    nxt, lock = [0], threading.Lock()

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(requests):
                return
            try:
                r = post(url, requests[i])
                texts[i] = r['choices'][0]['message']['content']
                with lock:
                    tokens[0] += r['usage']['completion_tokens']
            except Exception as e:  # noqa: BLE001 (reported and counted)
                with lock:
                    errors[0] += 1
                print(f'request {i}: {e}', file=sys.stderr)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    s = time.perf_counter() - t0
    return {'clients': n, 'seconds': s, 'tokens': tokens[0], 'tok_s': tokens[0] / s,
            'errors': errors[0], 'texts': texts}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--url', required=True)
    ap.add_argument('--levels', default='1,4,16,64')
    ap.add_argument('--requests', type=int, default=64)
    ap.add_argument('--max-tokens', type=int, default=64)
    ap.add_argument('--json')
    a = ap.parse_args()
    with urllib.request.urlopen(a.url + '/v1/models', timeout=60) as r:
        model = json.load(r)['data'][0]['id']
    requests = [{'model': model, 'temperature': 0, 'max_tokens': a.max_tokens,
                 'messages': [{'role': 'system', 'content': SYSTEM},
                              {'role': 'user', 'content': f'Task {i + 1}: write a function that '
                               f'{TOPICS[i % len(TOPICS)]}' +
                               (f', named f{i}.' if i >= len(TOPICS) else '.')}]}
                for i in range(a.requests)]
    run_level(a.url, requests, min(4, a.requests))  # warm-up: the prefix cache holds the system prompt
    results = [run_level(a.url, requests, int(n)) for n in a.levels.split(',')]
    ref, mismatches = results[0], 0
    print(f"clients  seconds  tokens  tok/s   vs serialised  same text as level {ref['clients']}")
    for r in results:
        same = sum(t == u for t, u in zip(r['texts'], ref['texts']))
        mismatches += a.requests - same
        print(f"{r['clients']:7d}  {r['seconds']:7.2f}  {r['tokens']:6d}  {r['tok_s']:6.0f}"
              f"  {r['tok_s'] / ref['tok_s']:12.2f}x  {same}/{a.requests}")
    errors = sum(r['errors'] for r in results)
    if a.json:
        with open(a.json, 'w') as f:
            json.dump({'model': model, 'requests': a.requests, 'max_tokens': a.max_tokens,
                       'levels': [{k: v for k, v in r.items() if k != 'texts'} for r in results],
                       'mismatches': mismatches, 'errors': errors}, f, indent=1)
    if errors or mismatches:
        print(f'FAIL {errors} errors, {mismatches} outputs differ from the serialised run')
        sys.exit(1)


if __name__ == '__main__':
    main()
