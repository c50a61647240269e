"""Trains the pycoder target (Qwen3ForCausalLM) and its draft model together.

Each step draws one batch of random windows from the token stream. The target learns by
cross-entropy; the draft by (1 - a) * cross-entropy + a * KL(target || draft), where the
target's current predictions are the teacher and a ramps from 0 to --distill over the first
quarter of training (online distillation). Mixed precision (bf16 autocast, fp32 master
weights), fused AdamW, cosine schedule with linear warmup, optional torch.compile.

Both models are saved as BF16 Hugging Face folders (save_pretrained) with generation_config.json
and the tokenizer files copied in."""
import argparse
import json
import math
import os
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import EOT_ID, IM_END_ID  # noqa: E402

TARGET = dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=6, num_attention_heads=6,
              num_key_value_heads=2, head_dim=64)
DRAFT = dict(hidden_size=192, intermediate_size=512, num_hidden_layers=2, num_attention_heads=3,
             num_key_value_heads=1, head_dim=64)


def make_config(shape, vocab, max_pos, rope_theta):
    return Qwen3Config(vocab_size=vocab, max_position_embeddings=max_pos, rope_theta=rope_theta,
                       rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_act="silu",
                       attention_bias=False, attention_dropout=0.0, use_sliding_window=False,
                       initializer_range=0.02, bos_token_id=EOT_ID, eos_token_id=IM_END_ID,
                       pad_token_id=EOT_ID, use_cache=True, attn_implementation="sdpa", **shape)


def n_params(model):
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def optimizer(model, lr, wd):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                              {"params": other, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True)


def logits_of(model, x):
    h = model.model(input_ids=x, use_cache=False).last_hidden_state
    return F.linear(h, model.lm_head.weight)


def losses(target, draft, x, y, a):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        lt = logits_of(target, x)
        ld = logits_of(draft, x)
    lt = lt.float().flatten(0, 1)
    ld = ld.float().flatten(0, 1)
    y = y.flatten()
    ce_t = F.cross_entropy(lt, y)
    ce_d = F.cross_entropy(ld, y)
    teacher = F.log_softmax(lt.detach(), -1)
    kl = (teacher.exp() * (teacher - F.log_softmax(ld, -1))).sum(-1).mean()
    loss = ce_t + (1 - a) * ce_d + a * kl
    return loss, ce_t.detach(), ce_d.detach(), kl.detach()


@torch.no_grad()
def quick_eval(target, draft, chunks):
    tot_t = tot_d = agree = n = 0.0
    for c in chunks.split(8):
        x, y = c[:, :-1], c[:, 1:]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            lt = logits_of(target, x).float()
            ld = logits_of(draft, x).float()
        tot_t += F.cross_entropy(lt.flatten(0, 1), y.flatten(), reduction="sum").item()
        tot_d += F.cross_entropy(ld.flatten(0, 1), y.flatten(), reduction="sum").item()
        agree += (lt.argmax(-1) == ld.argmax(-1)).sum().item()
        n += y.numel()
    return tot_t / n, tot_d / n, agree / n


def save(model, out_dir, tokenizer_dir, gen):
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    m = model.to(torch.bfloat16)
    m.generation_config = gen
    m.save_pretrained(out_dir)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokenizer_dir, fn), os.path.join(out_dir, fn))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out-target", required=True)
    ap.add_argument("--out-draft", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=0, help="fixed step count (0: fit --time-budget)")
    ap.add_argument("--time-budget", type=float, default=300, help="seconds, compile included")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--draft-lr", type=float, default=4e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=250)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--distill", type=float, default=0.8)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--compile", type=int, default=1)
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=1000)
    ap.add_argument("--log", default="")
    args = ap.parse_args()

    t_start = time.time()
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda")
    tj = json.load(open(os.path.join(args.tokenizer, "tokenizer.json")))
    vocab = len(tj["model"]["vocab"])
    vocab = max(vocab, max(t["id"] for t in tj["added_tokens"]) + 1)
    print(f"vocab {vocab}", flush=True)

    train = torch.from_numpy(np.load(os.path.join(args.data, "train.npy")).astype(np.int32)).to(dev)
    held = torch.from_numpy(np.load(os.path.join(args.data, "heldout_docs.npy")).astype(np.int32)).to(dev)
    T = args.seq
    n_eval = min(32, (len(held) - 1) // (T + 1))
    eval_chunks = held[:n_eval * (T + 1)].view(n_eval, T + 1).long()
    print(f"train tokens {len(train):,}; quick-eval windows {n_eval}", flush=True)

    target = Qwen3ForCausalLM(make_config(TARGET, vocab, 2048, args.rope_theta)).to(dev)
    draft = Qwen3ForCausalLM(make_config(DRAFT, vocab, 2048, args.rope_theta)).to(dev)
    for m in (target, draft):
        assert m.lm_head.weight.data_ptr() == m.model.embed_tokens.weight.data_ptr(), "untied"
        m.train()
    info = {"target_params": n_params(target), "draft_params": n_params(draft)}
    print(info, flush=True)
    print(target.config.to_json_string(), flush=True)
    opt_t = optimizer(target, args.lr, args.wd)
    opt_d = optimizer(draft, args.draft_lr, args.wd)
    step_fn = torch.compile(losses) if args.compile else losses

    g = torch.Generator(device=dev)
    g.manual_seed(args.seed)
    ar = torch.arange(T + 1, device=dev)
    B = args.batch

    def batch():
        ix = torch.randint(0, len(train) - T - 2, (B,), device=dev, generator=g)
        c = train[ix[:, None] + ar[None, :]].long()
        return c[:, :-1], c[:, 1:]

    total = args.steps if args.steps else 10 ** 9
    deadline = t_start + args.time_budget
    a_t = torch.zeros((), device=dev)
    hist = []
    logf = open(args.log, "w") if args.log else None
    t_train = time.time()
    t_mark, step_mark = None, 0
    step = 0
    tokens = 0
    while step < total:
        if step < args.warmup:
            mult = (step + 1) / args.warmup
        else:
            p = min(1.0, (step - args.warmup) / max(1, total - args.warmup))
            mult = args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * p))
        for o, base in ((opt_t, args.lr), (opt_d, args.draft_lr)):
            for grp in o.param_groups:
                grp["lr"] = base * mult
        a = args.distill * min(1.0, step / max(1, 0.25 * (total if args.steps or total < 10 ** 9 else 4000)))
        a_t.fill_(a)
        x, y = batch()
        loss, ce_t, ce_d, kl = step_fn(target, draft, x, y, a_t)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(target.parameters(), 1.0)
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt_t.step()
        opt_d.step()
        opt_t.zero_grad(set_to_none=True)
        opt_d.zero_grad(set_to_none=True)
        step += 1
        tokens += B * T
        if step == 20:
            torch.cuda.synchronize()
            t_mark, step_mark = time.time(), step
            print(f"first 20 steps (compile included): {t_mark - t_train:.1f}s", flush=True)
        if step == 60 and not args.steps:
            torch.cuda.synchronize()
            dt = (time.time() - t_mark) / (step - step_mark)
            left = deadline - time.time() - 15  # keep time for saving
            total = step + max(1, int(left / dt))
            print(f"step time {dt * 1000:.1f} ms -> {total} steps in the budget", flush=True)
        if step % args.log_every == 0 or step == total:
            r = dict(step=step, lr=round(args.lr * mult, 6), a=round(a, 3), ce_target=ce_t.item(),
                     ce_draft=ce_d.item(), kl=kl.item(), tokens=tokens,
                     sec=round(time.time() - t_train, 1))
            if t_mark:
                r["tok_per_s"] = int((step - step_mark) * B * T / (time.time() - t_mark))
            hist.append(r)
            print(json.dumps(r), flush=True)
            if logf:
                logf.write(json.dumps(r) + "\n")
        if args.eval_every and step % args.eval_every == 0 and n_eval:
            target.eval(), draft.eval()
            e = quick_eval(target, draft, eval_chunks)
            target.train(), draft.train()
            r = dict(step=step, heldout_ce_target=round(e[0], 4), heldout_ce_draft=round(e[1], 4),
                     agreement=round(e[2], 4))
            print(json.dumps(r), flush=True)
            if logf:
                logf.write(json.dumps(r) + "\n")
        if time.time() > deadline and not args.steps:
            print(f"time budget reached at step {step} of {total}", flush=True)
            break
    torch.cuda.synchronize()
    train_sec = time.time() - t_train
    target.eval(), draft.eval()
    e = quick_eval(target, draft, eval_chunks) if n_eval else (float("nan"),) * 3
    last = hist[-5:] if hist else []
    info.update(steps=step, tokens=tokens, batch=B, seq=T, train_seconds=round(train_sec, 1),
                tok_per_s=int(tokens / train_sec), lr=args.lr, draft_lr=args.draft_lr,
                distill=args.distill, seed=args.seed, compile=bool(args.compile),
                final_train_ce_target=float(np.mean([r["ce_target"] for r in last])) if last else None,
                final_train_ce_draft=float(np.mean([r["ce_draft"] for r in last])) if last else None,
                quick_heldout_ce_target_fp32master=e[0], quick_heldout_ce_draft_fp32master=e[1],
                quick_agreement_fp32master=e[2])
    print(json.dumps(info), flush=True)
    gen = GenerationConfig(bos_token_id=EOT_ID, eos_token_id=[IM_END_ID, EOT_ID], pad_token_id=EOT_ID,
                           do_sample=True, temperature=0.7, top_p=0.95, top_k=40)
    save(target, args.out_target, args.tokenizer, gen)
    save(draft, args.out_draft, args.tokenizer, gen)
    with open(os.path.join(args.data, "train_info.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(f"saved; total {time.time() - t_start:.1f}s", flush=True)


if __name__ == "__main__":
    main()
