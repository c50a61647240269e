"""Evaluates the saved folders as shipped (BF16 weights loaded with AutoModelForCausalLM and
computed in float32):
  * held-out cross-entropy (nats/token) of target and draft on raw code/docs and on
    conversations, and the draft's greedy next-token agreement with the target;
  * greedy goldens: 5 prompts x 64 new tokens for each model, on the CPU in float32 with eager
    attention, with the top-1 minus top-2 logit margin of every step;
  * text samples for docs/models.md."""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import render_chat  # noqa: E402

PROMPTS = [
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "import os\n\n\ndef list_python_files(root):\n",
    "class Stack:\n    def __init__(self):\n",
    "def read_json(path):\n    with open(path",
    "def is_prime(n: int) -> bool:\n",
]
CHAT = [
    [{"role": "user", "content": "Write a Python function `is_palindrome(s: str) -> bool` that tells "
                                 "whether a string reads the same backwards."}],
    [{"role": "user", "content": "What does this function do?\n\n```python\ndef f(xs):\n    out = []\n"
                                 "    for x in xs:\n        if x not in out:\n            out.append(x)\n"
                                 "    return out\n```"}],
]


def load(path, device, attn):
    m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation=attn)
    return m.to(device).eval()


@torch.no_grad()
def heldout(target, draft, arr, seq, n_max, device):
    n = min(n_max, (len(arr) - 1) // (seq + 1))
    chunks = torch.from_numpy(arr[:n * (seq + 1)].astype(np.int64)).view(n, seq + 1)
    ce_t = ce_d = agree = top_t = top_d = 0.0
    cnt = 0
    for c in chunks.split(8):
        c = c.to(device)
        x, y = c[:, :-1], c[:, 1:]
        lt = target(input_ids=x).logits.float()
        ld = draft(input_ids=x).logits.float()
        ce_t += F.cross_entropy(lt.flatten(0, 1), y.flatten(), reduction="sum").item()
        ce_d += F.cross_entropy(ld.flatten(0, 1), y.flatten(), reduction="sum").item()
        at, ad = lt.argmax(-1), ld.argmax(-1)
        agree += (at == ad).sum().item()
        top_t += (at == y).sum().item()
        top_d += (ad == y).sum().item()
        cnt += y.numel()
    return dict(tokens=cnt, ce_target=ce_t / cnt, ce_draft=ce_d / cnt, agreement=agree / cnt,
                top1_acc_target=top_t / cnt, top1_acc_draft=top_d / cnt)


@torch.no_grad()
def greedy(model, ids, n_new):
    """Plain greedy loop (full recompute each step, no early stop at end-of-sequence ids)."""
    seq = list(ids)
    out, margins = [], []
    for _ in range(n_new):
        logits = model(input_ids=torch.tensor([seq])).logits[0, -1].float()
        top = torch.topk(logits, 2)
        nxt = int(top.indices[0])
        margins.append(round(float(top.values[0] - top.values[1]), 5))
        out.append(nxt)
        seq.append(nxt)
    return out, margins


def golden(model, tok, path, n_new):
    cases = []
    for p in PROMPTS:
        ids = tok(p, add_special_tokens=False)["input_ids"]
        g, m = greedy(model, ids, n_new)
        cases.append({"prompt": p, "prompt_ids": ids, "greedy_ids": g, "margins": m,
                      "text": tok.decode(g)})
    return {"model": path, "compute_dtype": "float32",
            "weights_dtype": "bfloat16",
            "how": "transformers %s AutoModelForCausalLM.from_pretrained(dtype=float32, "
                   "attn_implementation='eager') on the CPU; greedy argmax over full recomputes, "
                   "no stop at end-of-sequence ids; margins = top-1 minus top-2 logit" %
                   transformers.__version__,
            "max_new_tokens": n_new, "cases": cases}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--target-name", default="models/pycoder")
    ap.add_argument("--draft-name", default="models/pycoder-draft")
    ap.add_argument("--out", required=True, help="folder for eval.json and the golden files")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--eval-windows", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=64)
    args = ap.parse_args()
    t0 = time.time()
    os.makedirs(args.out, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    res = {"transformers": transformers.__version__, "torch": torch.__version__,
           "compute": "float32 on %s, weights loaded from the saved BF16 folders" % dev}
    tgt, drf = load(args.target, dev, "sdpa"), load(args.draft, dev, "sdpa")
    for name in ("docs", "chat"):
        arr = np.load(os.path.join(args.data, f"heldout_{name}.npy"))
        res["heldout_" + name] = heldout(tgt, drf, arr, args.seq, args.eval_windows, dev)
        print(name, json.dumps(res["heldout_" + name]), flush=True)
    del tgt, drf
    res["heldout_seconds"] = round(time.time() - t0, 1)

    torch.set_num_threads(min(16, os.cpu_count() or 1))
    tok = AutoTokenizer.from_pretrained(args.target)
    samples = {}
    for path, name, fn in ((args.target, args.target_name, "pycoder_greedy.json"),
                           (args.draft, args.draft_name, "pycoder_draft_greedy.json")):
        m = load(path, "cpu", "eager")
        g = golden(m, tok, name, args.new_tokens)
        # cross-check against generate() up to the first end-of-sequence id
        eos = set(m.generation_config.eos_token_id or [])
        agree = True
        for c in g["cases"]:
            out = m.generate(torch.tensor([c["prompt_ids"]]), do_sample=False, max_new_tokens=args.new_tokens,
                             temperature=None, top_p=None, top_k=None)[0, len(c["prompt_ids"]):].tolist()
            ref = c["greedy_ids"]
            cut = next((i + 1 for i, t in enumerate(ref) if t in eos), len(ref))
            agree &= out[:cut] == ref[:cut]
        g["matches_generate"] = agree
        with open(os.path.join(args.out, fn), "w") as f:
            json.dump(g, f, indent=1, ensure_ascii=False)
        samples[name] = [c["prompt"] + c["text"] for c in g["cases"]]
        if name == args.target_name:
            chats = []
            for msgs in CHAT:
                text = render_chat(msgs, add_generation_prompt=True, enable_thinking=False)
                ids = tok(text, add_special_tokens=False)["input_ids"]
                out = m.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=160,
                                 temperature=None, top_p=None, top_k=None)[0, len(ids):]
                chats.append({"prompt": text, "reply": tok.decode(out)})
            samples["chat"] = chats
        print(f"{name}: generate agrees: {agree}", flush=True)
        del m
    res["samples"] = samples
    res["seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(args.out, "eval.json"), "w") as f:
        json.dump(res, f, indent=1, ensure_ascii=False)
    for s in samples[args.target_name]:
        print("-----\n" + s, flush=True)
    for c in samples["chat"]:
        print("-----\n" + c["prompt"] + c["reply"], flush=True)
    print(json.dumps({k: v for k, v in res.items() if k != "samples"}, indent=1), flush=True)


if __name__ == "__main__":
    main()
