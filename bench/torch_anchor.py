"""bench/torch_anchor.py: PyTorch/transformers on the same model folder as bench_gpu, for the
anchor row of docs/perf.md: prefill tokens/s and B=1 greedy decode tokens/s after a context of
N tokens, eager with a dynamic cache, then (unless --no-compile) a static cache with
torch.compile(mode="reduce-overhead"). Token ids are synthetic, as in bench_gpu.

    python3 bench/torch_anchor.py MODEL_DIR [--ctx 512] [--new 64] [--no-compile]
"""
import argparse
import sys
import time

import torch
from transformers import AutoModelForCausalLM, StaticCache


def sync_time():
    torch.cuda.synchronize()
    return time.perf_counter()


def ids_for(n, vocab, offset=0):
    return torch.tensor([[((i + offset) * 7919 + 13) % vocab for i in range(n)]], device="cuda")


def eager(model, ctx, new, vocab):
    ids = ids_for(ctx, vocab)
    with torch.no_grad():
        model(ids[:, :64])  # warm-up
        t0 = sync_time()
        out = model(ids, use_cache=True)
        t1 = sync_time()
        past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
        times = []
        for _ in range(new):
            t2 = sync_time()
            out = model(tok, past_key_values=past, use_cache=True)
            past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
            times.append(sync_time() - t2)
    times.sort()
    return ctx / (t1 - t0), 1.0 / times[len(times) // 2]


def compiled(model, ctx, new, vocab):
    """static cache, compiled single-token step, greedy loop written out (no generate())"""
    cache = StaticCache(config=model.config, max_batch_size=1, max_cache_len=ctx + new + 8,
                        device="cuda", dtype=torch.bfloat16)
    step = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    ids = ids_for(ctx, vocab)
    with torch.no_grad():
        pos = torch.arange(ctx, device="cuda")
        out = model(ids, past_key_values=cache, cache_position=pos, use_cache=True)
        tok = out.logits[:, -1:].argmax(-1)
        times = []
        for i in range(new + 3):  # the first steps compile and record the graph
            p = torch.tensor([ctx + i], device="cuda")
            t2 = sync_time()
            out = step(tok, past_key_values=cache, cache_position=p, use_cache=True)
            tok = out.logits[:, -1:].argmax(-1).clone()
            if i >= 3:
                times.append(sync_time() - t2)
    times.sort()
    return 1.0 / times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.cuda.get_device_name()}", flush=True)
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16, device_map="cuda")
    model.eval()
    vocab = model.config.vocab_size
    print(f"loaded in {time.perf_counter() - t0:.1f} s", flush=True)
    pf, dec = eager(model, a.ctx, a.new, vocab)
    print(f"transformers eager: prefill {a.ctx} {pf:.0f} tok/s, decode B=1 at context {a.ctx}: "
          f"{dec:.1f} tok/s", flush=True)
    if not a.no_compile:
        try:
            dec = compiled(model, a.ctx, a.new, vocab)
            print(f"transformers static cache + torch.compile: decode B=1 at context {a.ctx}: "
                  f"{dec:.1f} tok/s", flush=True)
        except Exception as e:  # report, keep the eager numbers
            print(f"torch.compile run failed: {type(e).__name__}: {e}", file=sys.stderr)


if __name__ == "__main__":
    main()
