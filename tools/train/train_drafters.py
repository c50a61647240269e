"""Trains the DSpark and DFlash drafters of models/pycoder (frozen target, loss on the target's own
predictions) and writes, in one run on the GPU machine:

  models/pycoder-dspark/, models/pycoder-dflash/   config.json + model.safetensors (BF16, no
                                                   embedding or head: the target's are used)
  tests/data/drafters/{dspark,dflash}_pycoder.json/.safetensors   greedy speculative traces
  stats/   golden check, training log, acceptance, timings

Steps: (1) check tools/train/drafters.py against the golden data of the original implementations
(a failure is reported loudly; training goes on); (2) token data: a seeded subset of the training
corpus of tools/train/build_corpus.py (run beside this script with the same seed) plus sequences
the target continues itself (half greedy, half sampled); (3) train both drafters on the same
batches, one frozen target pass per step giving the taps and the labels; (4) BF16 checkpoints,
greedy acceptance on held-out prompts, golden traces for the C tests (float32 on the CPU).

Losses. DSpark: 0.1 CE(target argmax) + 0.9 L1(p_drafter - p_target) + 1.0 BCE(confidence,
sum min(p_d, p_t)), slot weights exp(-k/4); Markov prev = the tokens of the sequence. DFlash:
CE(target argmax) + KL(p_target || p_drafter) on slots 1..15, slot weights exp(-(k-1)/7).

    python3 tools/train/train_drafters.py --data DIR --out OUT [--golden DIR] [--smoke]
"""
import argparse
import copy
import json
import math
import os
import pickle
import random
import shutil
import sys
import tarfile
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from common import EOT_ID, MASK_ID  # noqa: E402
from drafters import (Drafter, Qwen3Target, chain_rounds, fuse_taps, generate, load_config,  # noqa: E402
                      load_safetensors, plain_greedy, save_safetensors, simulate_rounds, spec_trace)

DSPARK_TAPS = [1, 2, 4]
DFLASH_TAPS = [1, 3]
T0 = time.time()


def log(*a):
    print("[%6.1fs]" % (time.time() - T0), *a, flush=True)


# ---------------------------------------------------------------------------------------------
# Configs

def drafter_configs(tcfg, dspark_anchors):
    L = tcfg["num_hidden_layers"]
    ds = copy.deepcopy(tcfg)
    ds.update(architectures=["Qwen3DSparkModel"], num_hidden_layers=1, num_target_layers=L, block_size=7,
              target_layer_ids=DSPARK_TAPS, mask_token_id=MASK_ID, num_anchors=dspark_anchors,
              layer_types=["full_attention"], tie_word_embeddings=False, enable_confidence_head=True,
              confidence_head_with_markov=True, markov_rank=32, markov_head_type="vanilla")
    fl = copy.deepcopy(tcfg)
    fl.update(architectures=["DFlashDraftModel"], num_hidden_layers=1, num_target_layers=L, block_size=16,
              dflash_config={"mask_token_id": MASK_ID, "target_layer_ids": DFLASH_TAPS},
              layer_types=["full_attention"], tie_word_embeddings=False, max_window_layers=1)
    for c in (ds, fl):
        assert max(c.get("target_layer_ids") or c["dflash_config"]["target_layer_ids"]) < L - 1
    return ds, fl


def init_drafter(dr, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in dr.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.fill_(1.0)
            elif name == "markov_head.markov_w1.weight":
                p.normal_(0.0, 1.0, generator=g)
            elif name == "markov_head.markov_w2.weight" or name.startswith("confidence_head."):
                p.zero_()
            else:
                p.normal_(0.0, 0.02, generator=g)


def bf16_state(dr):
    return {k: v.detach().to(torch.bfloat16).cpu() for k, v in dr.state_dict().items()}


def write_drafter(folder, cfg, state):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    save_safetensors(os.path.join(folder, "model.safetensors"), state)


# ---------------------------------------------------------------------------------------------
# Data

def wait_for_corpus(data, pid, limit):
    path = os.path.join(data, "corpus_stats.json")
    while time.time() < limit:
        if os.path.exists(path):
            time.sleep(0.5)
            return True
        if pid:
            try:
                os.kill(pid, 0)
            except OSError:
                return os.path.exists(path)
        time.sleep(0.5)
    return False


def encode(tok, texts, chunk=4096):
    out = []
    enc = getattr(tok, "encode_batch_fast", tok.encode_batch)
    for i in range(0, len(texts), chunk):
        for e in enc(texts[i:i + chunk], add_special_tokens=False):
            out.append(np.asarray(e.ids, dtype=np.int32))
    return out


def stream(pieces):
    parts = []
    for p in pieces:
        parts.append(p)
        parts.append(np.array([EOT_ID], dtype=np.int32))
    return np.concatenate(parts) if parts else np.zeros(0, np.int32)


def load_corpus(args, tokenizer_path):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer_path)
    ld = lambda n: pickle.load(open(os.path.join(args.data, n + ".pkl"), "rb"))  # noqa: E731
    pieces = ld("docs_train") + ld("chat_train")
    rng = random.Random(args.seed)
    order = list(range(len(pieces)))
    rng.shuffle(order)
    chosen, n = [], 0
    for i in order:
        chosen.append(pieces[i])
        n += len(pieces[i])
        if n >= args.train_chars:
            break
    del pieces
    train = stream(encode(tok, chosen))
    held_docs = ld("docs_heldout")
    random.Random(args.seed + 1).shuffle(held_docs)
    held_docs = stream(encode(tok, held_docs))
    chats = ld("chat_heldout")
    random.Random(args.seed + 2).shuffle(chats)
    heads = []
    for c in chats:
        j = c.rfind("<|im_start|>assistant\n")
        if j > 0:
            heads.append(c[:j + len("<|im_start|>assistant\n")])
    held_chat = encode(tok, heads)
    return train, held_docs, held_chat, tok


def eval_prompts(held_docs, held_chat, n, L, seed):
    rng = np.random.default_rng(seed)
    offs = rng.integers(0, len(held_docs) - L - 1, size=n)
    docs = np.stack([held_docs[o:o + L] for o in offs])
    chat = [c[-L:] for c in held_chat if len(c) >= L][:n]
    return docs, (np.stack(chat) if chat else docs[:0])


def golden_prompts(held_docs, held_chat, seed):
    rng = np.random.default_rng(seed + 7)
    out = []
    for L in (40, 64):
        o = int(rng.integers(0, len(held_docs) - L - 1))
        out.append(("heldout code/docs window", held_docs[o:o + L].tolist()))
    chat = [c for c in held_chat if len(c) >= 56]
    if chat:
        out.append(("heldout conversation, last 56 tokens up to the assistant header", chat[0][-56:].tolist()))
    else:
        o = int(rng.integers(0, len(held_docs) - 57))
        out.append(("heldout code/docs window", held_docs[o:o + 56].tolist()))
    return out


# ---------------------------------------------------------------------------------------------
# Losses

def dspark_loss(dr, E, fused, xn, x, anchors, sdpa):
    ctx = dr.fuse(fused)
    h, pos = dr.block_forward(ctx, x, anchors, sdpa=sdpa)  # [b, A, B, H], [A, B]
    b, A, B, _ = h.shape
    with torch.no_grad():
        tl = F.linear(xn[:, pos], E).float()  # target row p+i predicts p+i+1
        lpt = torch.log_softmax(tl, -1)
        pt = lpt.exp()
        y = tl.argmax(-1)
    prev = x[:, pos]  # [anchor, x_{p+1}, ...]
    dl = dr.logits(h).float() + dr.markov_bias(prev).float()
    logp = torch.log_softmax(dl, -1)
    pd = logp.exp()
    ce = -logp.gather(-1, y[..., None])[..., 0]
    l1 = (pd - pt).abs().sum(-1)
    cstar = (1.0 - 0.5 * l1).detach().clamp(0.0, 1.0)
    cl = dr.confidence_logit(h, prev).float()
    bce = F.binary_cross_entropy_with_logits(cl, cstar, reduction="none")
    w = torch.exp(-torch.arange(B, device=h.device).float() / 4.0)
    den = w.sum() * b * A
    wm = lambda t: (t * w).sum() / den  # noqa: E731
    loss = 0.1 * wm(ce) + 0.9 * wm(l1) + 1.0 * wm(bce)
    with torch.no_grad():
        hit = (dl.argmax(-1) == y).float()
        st = {"ce": wm(ce), "l1": wm(l1), "bce": wm(bce), "acc0": hit[..., 0].mean(), "acc": hit.mean(),
              "tau_greedy": hit.cumprod(-1).sum(-1).mean(), "tau_prob": cstar.cumprod(-1).sum(-1).mean(),
              "conf_mae": (torch.sigmoid(cl) - cstar).abs().mean()}
    return loss, st


def dflash_loss(dr, E, fused, xn, x, anchors, sdpa):
    ctx = dr.fuse(fused)
    h, pos = dr.block_forward(ctx, x, anchors, sdpa=sdpa)  # [b, A, 16, H]
    b, A, B, _ = h.shape
    with torch.no_grad():
        tl = F.linear(xn[:, pos[:, :-1]], E).float()  # slot i (1..B-1) at p+i: target row p+i-1
        lpt = torch.log_softmax(tl, -1)
        pt = lpt.exp()
        y = tl.argmax(-1)
    dl = dr.logits(h[:, :, 1:]).float()
    logp = torch.log_softmax(dl, -1)
    ce = -logp.gather(-1, y[..., None])[..., 0]
    kl = (pt * (lpt - logp)).sum(-1)
    w = torch.exp(-torch.arange(B - 1, device=h.device).float() / 7.0)
    den = w.sum() * b * A
    wm = lambda t: (t * w).sum() / den  # noqa: E731
    loss = wm(ce) + wm(kl)
    with torch.no_grad():
        hit = (dl.argmax(-1) == y).float()
        st = {"ce": wm(ce), "kl": wm(kl), "acc1": hit[..., 0].mean(), "acc": hit.mean(),
              "tau_greedy": hit.cumprod(-1).sum(-1).mean()}
    return loss, st


def make_opt(dr, lr, wd):
    decay = [p for n, p in dr.named_parameters() if p.dim() >= 2]
    other = [p for n, p in dr.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": wd}, {"params": other, "weight_decay": 0.0}]
    try:
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    except (TypeError, RuntimeError):
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8)


# ---------------------------------------------------------------------------------------------
# Evaluation and goldens

@torch.no_grad()
def acceptance(target, drafters, draft_model, prompts, n_new, sdpa):
    """Greedy acceptance along the target's greedy continuation of each prompt. Returns per
    drafter and cap: rounds, mean accepted drafts per round, mean tokens per round."""
    L = prompts.shape[1]
    extra = 17
    res = {}
    seqs = []
    for i in range(0, prompts.shape[0], 64):
        p = prompts[i:i + 64]
        seqs.append(torch.cat([p, generate(target, p, n_new + extra, sdpa=sdpa)], 1))
    seq = torch.cat(seqs)
    taps = sorted(set(DSPARK_TAPS + DFLASH_TAPS))
    got_all = {i: [] for i in taps}
    for i in range(0, seq.shape[0], 32):
        _, got, _ = target.forward(seq[i:i + 32], taps=taps, logits=None, sdpa=sdpa)
        for k in taps:
            got_all[k].append(got[k])
    got = {k: torch.cat(v) for k, v in got_all.items()}

    def summ(acc):
        flat = [n for row in acc for n in row]
        return {"rounds": len(flat), "mean_accepted": round(float(np.mean(flat)), 4),
                "tokens_per_round": round(float(np.mean(flat)) + 1, 4)}

    for name, (dr, caps) in drafters.items():
        ctx = dr.fuse(fuse_taps(got, dr.target_layer_ids))
        for cap in caps:
            acc = simulate_rounds(dr, ctx, seq, L, L + n_new, cap=cap, sdpa=sdpa)
            res["%s cap=%d" % (name, cap)] = summ(acc)
    if draft_model is not None:
        preds = []
        for i in range(0, seq.shape[0], 32):
            lg, _, _ = draft_model.forward(seq[i:i + 32], sdpa=sdpa)
            preds.append(lg.argmax(-1))
        pred = torch.cat(preds)
        match = torch.zeros_like(seq, dtype=torch.bool)
        match[:, 1:] = pred[:, :-1] == seq[:, 1:]
        m = match.cpu().numpy()
        for cap in (2, 4, 7):
            acc = [chain_rounds(m[b], L, L + n_new, cap) for b in range(seq.shape[0])]
            res["pycoder-draft k=%d" % cap] = summ(acc)
    return res


def trace_json(tr, kind, prompt, source, plain, plain_margins):
    rounds = []
    for r in tr["rounds"]:
        d = {k: r[k] for k in ("start", "anchor", "draft_ids", "accepted", "committed", "verify_argmax",
                               "draft_margins", "verify_margins")}
        if kind == "dspark":
            d["prev_ids"] = r["prev_ids"]
            d["confidence_logits"] = r["confidence_logits"]
            d["confidences"] = [1.0 / (1.0 + math.exp(-c)) for c in r["confidence_logits"]]
        rounds.append(d)
    d0 = tr["details"][0]["pr"]
    r0 = {"start": tr["rounds"][0]["start"], "anchor": tr["rounds"][0]["anchor"],
          "block_input_ids": d0["block_input_ids"], "block_positions": d0["block_positions"],
          "ctx_positions": [0, len(prompt)], "draft_ids": d0["drafts"],
          "base_argmax": d0["base_logits"].argmax(-1).tolist()}
    if kind == "dspark":
        r0["prev_ids"] = d0["prev_ids"]
        r0["confidence_logits"] = d0["confidence_logits"]
        r0["confidences"] = [1.0 / (1.0 + math.exp(-c)) for c in d0["confidence_logits"]]
    acc = [r["accepted"] for r in tr["rounds"]]
    return {"source": source, "prompt_ids": list(prompt), "prompt_len": len(prompt), "new_ids": tr["new_ids"],
            "plain_greedy_ids": plain, "plain_greedy_margins": plain_margins,
            "matches_plain_greedy": tr["new_ids"] == plain,
            "accepted_per_round": acc, "n_rounds": len(acc), "round0": r0, "rounds": rounds}


@torch.no_grad()
def write_goldens(target, drafters, prompts, n_new, out_dir, names):
    os.makedirs(out_dir, exist_ok=True)
    plains = [plain_greedy(target, p, n_new) for _, p in prompts]
    summary = {}
    for kind, (dr, folder) in drafters.items():
        cases, tensors = [], {}
        for c, ((source, p), (plain, pm)) in enumerate(zip(prompts, plains)):
            tr = spec_trace(target, dr, p, n_new, detail_rounds=1)
            cases.append(trace_json(tr, kind, p, source, plain, pm))
            d = tr["details"][0]
            pre = "case%d." % c
            tensors[pre + "round0.ctx_rows"] = d["ctx_rows"].float()
            tensors[pre + "round0.layer_out"] = d["pr"]["layer_out"].float()
            tensors[pre + "round0.block_hidden"] = d["pr"]["block_hidden"].float()
            if c == 0:
                tensors[pre + "fused_input"] = tr["prompt_fused"].float()
                tensors[pre + "round0.base_logits"] = d["pr"]["base_logits"].float()
                tensors[pre + "round0.verify_logits"] = d["verify_logits"].float()
                if kind == "dspark":
                    tensors[pre + "round0.markov_bias"] = d["pr"]["markov_bias"].float()
        doc = {
            "format": "dspark-drafter-golden-1",
            "target": names["target"], "drafter": folder,
            "compute": "float32 on the CPU (torch %s), BF16 weights widened to float32" % torch.__version__,
            "loop": "greedy speculative decoding, no lookup drafts, confidence threshold 0; round at "
                    "start P: drafter context = rows 0..P-1, block [anchor, mask...] at P..P+B-1; verify "
                    "[anchor, drafts] at P..P+k; accept the longest prefix equal to the target's argmax; "
                    "commit it plus argmax(verify row n); loop while P < prompt_len + max_new_tokens; "
                    "new_ids = first committed token after the prompt onward, cut to max_new_tokens",
            "max_new_tokens": n_new, "block_size": dr.block_size, "target_layer_ids": dr.target_layer_ids,
            "mask_token_id": dr.mask_token_id,
            "tensors": {
                "caseN.round0.ctx_rows": "[prompt_len, hidden] hidden_norm(fc(taps)) of the prompt positions",
                "caseN.round0.layer_out": "[layers, block, hidden] block residual after each drafter layer",
                "caseN.round0.block_hidden": "[block, hidden] after the drafter's final norm",
                "case0.fused_input": "[prompt_len, taps*hidden] concatenated taps of the prompt",
                "case0.round0.base_logits": "[block, vocab] head(block_hidden) (DSpark before the Markov bias)",
                "case0.round0.markov_bias": "[block, vocab] DSpark only: W2.W1[prev_i]",
                "case0.round0.verify_logits": "[verified+1, vocab] target logits for [anchor, drafts]",
            },
            "cases": cases,
        }
        stem = os.path.join(out_dir, "%s_pycoder" % kind)
        with open(stem + ".json", "w") as f:
            json.dump(doc, f, indent=1)
        save_safetensors(stem + ".safetensors", tensors)
        summary[kind] = {"accepted_per_round": [c["accepted_per_round"] for c in cases],
                         "matches_plain_greedy": [c["matches_plain_greedy"] for c in cases]}
    return summary


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", default="models/pycoder")
    ap.add_argument("--draft-model", default="models/pycoder-draft")
    ap.add_argument("--data", default="", help="build_corpus.py output folder")
    ap.add_argument("--corpus-pid", type=int, default=0)
    ap.add_argument("--golden", default="")
    ap.add_argument("--out", required=True, help="files that must come back (checkpoints, results)")
    ap.add_argument("--work", default="/tmp/drafter-work")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--t0", type=float, default=0.0, help="start time of the whole run (epoch s)")
    ap.add_argument("--total", type=float, default=400.0, help="seconds for the whole run")
    ap.add_argument("--post-reserve", type=float, default=75.0, help="seconds kept after training")
    ap.add_argument("--train-chars", type=int, default=60_000_000)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch-corpus", type=int, default=32)
    ap.add_argument("--batch-gen", type=int, default=32)
    ap.add_argument("--gen-seqs", type=int, default=8192)
    ap.add_argument("--gen-prompt", type=int, default=128)
    ap.add_argument("--gen-batch", type=int, default=2048)
    ap.add_argument("--gen-seconds", type=float, default=25.0)
    ap.add_argument("--dspark-anchors", type=int, default=64)
    ap.add_argument("--dflash-anchors", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--steps", type=int, default=0, help="fixed step count (0: fit the time budget)")
    ap.add_argument("--eval-prompts", type=int, default=64)
    ap.add_argument("--eval-new", type=int, default=128)
    ap.add_argument("--golden-new", type=int, default=48)
    ap.add_argument("--ckpt-every", type=float, default=60.0)
    ap.add_argument("--smoke", action="store_true", help="CPU pipeline check on token data from tests/data")
    args = ap.parse_args()

    global T0
    if args.t0:
        T0 = args.t0
    deadline = T0 + args.total
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    random.seed(args.seed)
    cuda = torch.cuda.is_available() and not args.smoke
    dev = torch.device("cuda" if cuda else "cpu")
    sdpa = cuda
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    W = args.work
    R = os.path.join(W, "result")
    for d in (args.out, W, R, os.path.join(R, "stats")):
        os.makedirs(d, exist_ok=True)
    stats = {"seed": args.seed, "args": vars(args), "timings": {}}
    tmark = time.time()

    def lap(name):
        nonlocal tmark
        stats["timings"][name] = round(time.time() - tmark, 1)
        tmark = time.time()

    def dump_stats():
        with open(os.path.join(R, "stats", "drafters.json"), "w") as f:
            json.dump(stats, f, indent=1)

    log("torch", torch.__version__, "device", dev, torch.cuda.get_device_name(0) if cuda else "")

    # (1) golden check ------------------------------------------------------------------------
    if args.golden and os.path.isdir(args.golden):
        try:
            import check_drafters
            torch.set_num_threads(8)
            rep = check_drafters.check(args.golden, "cpu", sdpa_device=dev if cuda else None)
            stats["golden_check"] = {"ok": rep.ok, "tolerance": check_drafters.TOL,
                                     "max_rel_err": max(r.get("rel_err", 0.0) for r in rep.rows),
                                     "rows": rep.rows}
            log("golden check:\n" + rep.text())
            if rep.ok:
                log("GOLDEN CHECK: PASS (max rel err %.2e)" % stats["golden_check"]["max_rel_err"])
            else:
                log("!" * 80 + "\nGOLDEN CHECK: FAIL -- the modules differ from the reference; training goes on\n" + "!" * 80)
        except Exception as e:  # noqa: BLE001
            stats["golden_check"] = {"ok": False, "error": repr(e)}
            log("!" * 80 + "\nGOLDEN CHECK: ERROR %r\n" % (e,) + "!" * 80)
    else:
        stats["golden_check"] = {"ok": None, "note": "no golden folder given"}
    lap("golden_check")
    torch.set_num_threads(min(16, os.cpu_count() or 1))

    # target, configs ----------------------------------------------------------------------------
    tcfg = load_config(os.path.join(args.target, "config.json"))
    tw = load_safetensors(os.path.join(args.target, "model.safetensors"))
    train_dtype = torch.bfloat16 if cuda else torch.float32
    tgt = Qwen3Target(tcfg, tw, dev, train_dtype)
    E = tgt.embed.float() if cuda else tgt.embed
    ds_cfg, fl_cfg = drafter_configs(tcfg, args.dspark_anchors)

    if cuda:  # the target reimplementation against transformers on the shipped model
        try:
            from transformers import AutoModelForCausalLM
            hf = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32,
                                                      attn_implementation="eager").to(dev).eval()
            t32 = Qwen3Target(tcfg, tw, dev, torch.float32)
            ids = torch.randint(10, tcfg["vocab_size"], (2, 96), generator=torch.Generator().manual_seed(5)).to(dev)
            with torch.no_grad():
                o = hf(input_ids=ids, output_hidden_states=True)
                lg, got, _ = t32.forward(ids, taps=range(5))
            rel = lambda a, b: float((a - b).abs().max() / b.abs().max())  # noqa: E731
            hc = {"logits": rel(lg, o.logits.float())}
            for i in range(5):
                hc["layer_out_%d" % i] = rel(got[i], o.hidden_states[i + 1].float())
            hc["ok"] = max(hc.values()) <= 1e-4
            stats["hf_check"] = hc
            log("target vs transformers:", json.dumps(hc))
            del hf, t32
        except Exception as e:  # noqa: BLE001
            stats["hf_check"] = {"error": repr(e)}
            log("target vs transformers: not run:", repr(e))
    lap("hf_check")

    # (2) data ------------------------------------------------------------------------------------
    T = args.seq
    if args.smoke:
        ids = []
        for fn in ("pycoder_greedy.json", "pycoder_draft_greedy.json"):
            for c in json.load(open(os.path.join(HERE, "..", "..", "tests", "data", fn)))["cases"]:
                ids.append(np.array(c["prompt_ids"] + c["greedy_ids"] + [EOT_ID], np.int32))
        train = np.concatenate(ids * 4)
        held_docs = np.concatenate(ids[::-1] * 2)
        held_chat = [x for x in ids]
        source = "smoke: tests/data token ids"
    else:
        ok = wait_for_corpus(args.data, args.corpus_pid, T0 + 150)
        log("corpus ready:", ok)
        try:
            assert ok, "corpus not built"
            train, held_docs, held_chat, _ = load_corpus(args, os.path.join(args.target, "tokenizer.json"))
            source = "build_corpus.py (seed %d): %d train chars sampled" % (args.seed, args.train_chars)
        except Exception as e:  # noqa: BLE001
            log("!" * 80 + "\ncorpus unavailable (%r): training on the target's own samples only\n" % (e,) + "!" * 80)
            train = held_docs = None
            held_chat = []
            source = "fallback: target samples from <|endoftext|>"
    lap("data")
    gcpu = torch.Generator().manual_seed(args.seed)
    gdev = torch.Generator(device=dev).manual_seed(args.seed)

    # self-continued sequences: prompts from the corpus, continued by the target (even rows
    # greedy, odd rows sampled at T=0.7, top-k 40)
    gen_len = T - args.gen_prompt
    gen_parts = []
    n_made = 0
    tg = time.time()
    gbatch = min(args.gen_batch, args.gen_seqs)
    while n_made < args.gen_seqs and time.time() - tg < args.gen_seconds:
        b = gbatch
        if train is not None:
            offs = torch.randint(0, len(train) - args.gen_prompt - 1, (b,), generator=gcpu).numpy()
            pr = torch.from_numpy(np.stack([train[o:o + args.gen_prompt] for o in offs]).astype(np.int64)).to(dev)
            temp = torch.tensor([0.0, 0.7], device=dev).repeat(b // 2 + 1)[:b]
            cont = generate(tgt, pr, gen_len, temperature=temp, top_k=40, generator=gdev, sdpa=sdpa)
            gen_parts.append(torch.cat([pr, cont], 1).to(torch.int32))
        else:
            pr = torch.full((b, 1), EOT_ID, dtype=torch.long, device=dev)
            temp = torch.full((b,), 1.0, device=dev)
            cont = generate(tgt, pr, T - 1, temperature=temp, top_k=0, generator=gdev, sdpa=sdpa)
            gen_parts.append(torch.cat([pr, cont], 1).to(torch.int32))
        n_made += b
    gen = torch.cat(gen_parts) if gen_parts else None
    if train is None:  # fallback: the samples are the corpus too
        half = gen.shape[0] // 2
        train = gen[:half].reshape(-1).cpu().numpy()
        held_docs = gen[half:].reshape(-1).cpu().numpy()
        gen = gen[:half]
    log("generated %d sequences of %d tokens in %.1fs" % (0 if gen is None else gen.shape[0], T, time.time() - tg))
    stats["data"] = {"source": source, "train_tokens": int(len(train)),
                     "generated_sequences": 0 if gen is None else int(gen.shape[0]), "seq": T,
                     "generated_prompt": args.gen_prompt}
    train_t = torch.from_numpy(train.astype(np.int64)).to(dev)
    lap("generate")

    # (3) training --------------------------------------------------------------------------------
    ds = Drafter(ds_cfg)
    fl = Drafter(fl_cfg)
    init_drafter(ds, args.seed + 11)
    init_drafter(fl, args.seed + 12)
    with torch.no_grad():  # start the output scale where the target's is
        for dr in (ds, fl):
            dr.norm.weight.copy_(tgt.W["norm.weight"].float().cpu())
    ds.to(dev).attach(E, E)
    fl.to(dev).attach(E, E)
    assert tgt.head.data_ptr() == tgt.embed.data_ptr()
    ds.train()
    fl.train()
    stats["params"] = {"dspark": sum(p.numel() for p in ds.parameters()),
                       "dflash": sum(p.numel() for p in fl.parameters())}
    log("params", stats["params"])
    opt_s, opt_f = make_opt(ds, args.lr, args.wd), make_opt(fl, args.lr, args.wd)
    taps = sorted(set(DSPARK_TAPS + DFLASH_TAPS))
    ar = torch.arange(T, device=dev)
    bc = args.batch_corpus
    bg = args.batch_gen if gen is not None else 0

    def batch():
        ix = torch.randint(0, len(train_t) - T - 1, (bc,), device=dev, generator=gdev)
        x = train_t[ix[:, None] + ar[None, :]]
        if bg:
            j = torch.randint(0, gen.shape[0], (bg,), device=dev, generator=gdev)
            x = torch.cat([x, gen[j].long()], 0)
        return x

    def anchors(n, B):
        return torch.randperm(T - B, device=dev, generator=gdev)[:n].sort().values + 1

    train_end = deadline - args.post_reserve
    total = args.steps or 10 ** 9
    step, hist, t_train = 0, [], time.time()
    t_mark = None
    last_ckpt = time.time()
    logf = open(os.path.join(R, "stats", "train_log.jsonl"), "w")
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else torch.autocast("cpu", enabled=False)

    def save_ckpts(tag):
        t = time.time()
        save_safetensors(os.path.join(args.out, "dspark_ckpt.safetensors"), bf16_state(ds),
                         {"format": "pt", "step": str(step), "tag": tag})
        save_safetensors(os.path.join(args.out, "dflash_ckpt.safetensors"), bf16_state(fl),
                         {"format": "pt", "step": str(step), "tag": tag})
        log("checkpoints written to OUT at step %d (%.1fs)" % (step, time.time() - t))

    while step < total:
        if step < args.warmup:
            mult = (step + 1) / args.warmup
        else:
            p = min(1.0, (step - args.warmup) / max(1, total - args.warmup)) if total < 10 ** 9 else 0.0
            mult = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * p))
        for o in (opt_s, opt_f):
            for grp in o.param_groups:
                grp["lr"] = args.lr * mult
        x = batch()
        with torch.no_grad():
            _, got, xn = tgt.forward(x, taps=taps, logits=None, sdpa=sdpa)
        an_s, an_f = anchors(args.dspark_anchors, 7), anchors(args.dflash_anchors, 16)
        try:
            with autocast:
                ls, sts = dspark_loss(ds, E, fuse_taps(got, DSPARK_TAPS), xn, x, an_s, sdpa)
                lf, stf = dflash_loss(fl, E, fuse_taps(got, DFLASH_TAPS), xn, x, an_f, sdpa)
            (ls + lf).backward()
        except RuntimeError as e:
            if step > 0 or not sdpa:
                raise
            log("!! scaled_dot_product_attention failed in training (%r); manual attention from now on" % (e,))
            sdpa = False
            opt_s.zero_grad(set_to_none=True)
            opt_f.zero_grad(set_to_none=True)
            with autocast:
                ls, sts = dspark_loss(ds, E, fuse_taps(got, DSPARK_TAPS), xn, x, an_s, sdpa)
                lf, stf = dflash_loss(fl, E, fuse_taps(got, DFLASH_TAPS), xn, x, an_f, sdpa)
            (ls + lf).backward()
        gn_s = torch.nn.utils.clip_grad_norm_(ds.parameters(), 1.0)
        gn_f = torch.nn.utils.clip_grad_norm_(fl.parameters(), 1.0)
        opt_s.step()
        opt_f.step()
        opt_s.zero_grad(set_to_none=True)
        opt_f.zero_grad(set_to_none=True)
        step += 1
        if step == 10:
            if cuda:
                torch.cuda.synchronize()
            t_mark = time.time()
            log("first 10 steps: %.1fs" % (t_mark - t_train))
        if step == 40 and not args.steps:
            if cuda:
                torch.cuda.synchronize()
            dt = (time.time() - t_mark) / 30
            total = step + max(1, int((train_end - time.time() - 5) / dt))
            log("step time %.1f ms -> %d steps planned" % (dt * 1000, total))
        if step % 100 == 0 or step == total or step in (1, 10, 40):
            r = {"step": step, "lr": round(args.lr * mult, 6), "sec": round(time.time() - t_train, 1),
                 "loss_dspark": float(ls.detach()), "loss_dflash": float(lf.detach()),
                 "gnorm_dspark": float(gn_s), "gnorm_dflash": float(gn_f)}
            r.update({"dspark_" + k: round(float(v), 4) for k, v in sts.items()})
            r.update({"dflash_" + k: round(float(v), 4) for k, v in stf.items()})
            hist.append(r)
            logf.write(json.dumps(r) + "\n")
            logf.flush()
            print(json.dumps(r), flush=True)
        if time.time() - last_ckpt > args.ckpt_every:
            save_ckpts("periodic")
            last_ckpt = time.time()
        if time.time() > train_end:
            log("time budget reached at step %d of %d" % (step, total))
            break
    if cuda:
        torch.cuda.synchronize()
    train_sec = time.time() - t_train
    last = hist[-5:]
    stats["training"] = {"steps": step, "seconds": round(train_sec, 1), "batch": bc + bg, "seq": T,
                         "dspark_anchors": args.dspark_anchors, "dflash_anchors": args.dflash_anchors,
                         "lr": args.lr, "warmup": args.warmup, "weight_decay": args.wd,
                         "final": {k: float(np.mean([r[k] for r in last])) for k in last[-1]
                                   if k.startswith(("dspark_", "dflash_", "loss_"))} if last else {}}
    log("training done:", json.dumps(stats["training"]))
    lap("train")

    # (4) save, evaluate, goldens -------------------------------------------------------------------
    names = {"target": "models/pycoder", "dspark": "models/pycoder-dspark", "dflash": "models/pycoder-dflash"}
    st_s, st_f = bf16_state(ds), bf16_state(fl)
    write_drafter(os.path.join(R, names["dspark"]), ds_cfg, st_s)
    write_drafter(os.path.join(R, names["dflash"]), fl_cfg, st_f)
    save_ckpts("final")
    for k, st in (("dspark", st_s), ("dflash", st_f)):
        stats.setdefault("sizes", {})[k] = os.path.getsize(os.path.join(R, names[k], "model.safetensors"))
        stats.setdefault("tensors", {})[k] = {n: list(v.shape) for n, v in sorted(st.items())}
    dump_stats()
    del opt_s, opt_f, gen
    if cuda:
        torch.cuda.empty_cache()
    lap("save")

    # shipped weights (BF16 widened to float32) for everything below
    t32 = Qwen3Target(tcfg, tw, dev, torch.float32)
    evals = {}
    for kind, cfg in (("dspark", ds_cfg), ("dflash", fl_cfg)):
        dr = Drafter(cfg).to(dev)
        dr.load_checkpoint({k: v.to(dev) for k, v in
                            load_safetensors(os.path.join(R, names[kind], "model.safetensors")).items()}, t32)
        evals[kind] = dr.eval()
    try:
        dm = Qwen3Target.from_dir(args.draft_model, dev, torch.float32) if os.path.isdir(args.draft_model) else None
        n_ev = 4 if args.smoke else args.eval_prompts
        n_new = 16 if args.smoke else args.eval_new
        docs, chat = eval_prompts(held_docs, held_chat, n_ev, 32 if args.smoke else 128, args.seed + 3)
        acc = {}
        for cat, pr in (("code/docs", docs), ("chat", chat)):
            if len(pr) == 0:
                continue
            pr = torch.from_numpy(pr.astype(np.int64)).to(dev)
            acc[cat] = acceptance(t32, {"dspark": (evals["dspark"], (2, 4, 7)),
                                        "dflash": (evals["dflash"], (4, 8, 15))}, dm, pr, n_new, sdpa)
            acc[cat]["prompts"] = int(pr.shape[0])
            acc[cat]["prompt_len"] = int(pr.shape[1])
            acc[cat]["new_tokens"] = n_new
            log("acceptance", cat, json.dumps(acc[cat]))
        stats["acceptance"] = acc
    except Exception as e:  # noqa: BLE001
        stats["acceptance"] = {"error": repr(e)}
        log("acceptance failed:", repr(e))
    dump_stats()
    lap("acceptance")

    try:
        cpu = torch.device("cpu")
        tc = Qwen3Target(tcfg, tw, cpu, torch.float32)
        gd = {}
        for kind, cfg in (("dspark", ds_cfg), ("dflash", fl_cfg)):
            dr = Drafter(cfg)
            dr.load_checkpoint(load_safetensors(os.path.join(R, names[kind], "model.safetensors")), tc)
            gd[kind] = (dr.eval(), names[kind])
        gp = golden_prompts(held_docs, held_chat, args.seed)
        if args.smoke:
            gp = [(s, p[:12]) for s, p in gp]
        stats["goldens"] = write_goldens(tc, gd, gp, 8 if args.smoke else args.golden_new,
                                         os.path.join(R, "tests", "data", "drafters"), names)
        log("goldens:", json.dumps(stats["goldens"]))
    except Exception as e:  # noqa: BLE001
        stats["goldens"] = {"error": repr(e)}
        log("goldens failed:", repr(e))
    lap("goldens")
    stats["timings"]["total_since_t0"] = round(time.time() - T0, 1)
    dump_stats()

    # pack --------------------------------------------------------------------------------------------
    tgz = os.path.join(W, "results.tar.gz")
    with tarfile.open(tgz, "w:gz") as tf:
        tf.add(R, arcname=".")
    for f in os.listdir(args.out):
        if f.startswith("results.tar.gz"):
            os.remove(os.path.join(args.out, f))
    part, i = 15 * 1024 * 1024, 0
    with open(tgz, "rb") as f:
        while True:
            chunk = f.read(part)
            if not chunk:
                break
            with open(os.path.join(args.out, "results.tar.gz.%02d" % i), "wb") as g:
                g.write(chunk)
            i += 1
    shutil.copy(os.path.join(R, "stats", "drafters.json"), os.path.join(args.out, "summary.json"))
    log("packed %d part(s); total %.1fs" % (i, time.time() - T0))
    print(json.dumps({k: stats.get(k) for k in ("timings", "training", "acceptance", "sizes")}, indent=1))
    ok = stats["golden_check"].get("ok")
    print("GOLDEN CHECK:", {True: "PASS", False: "FAIL", None: "not run"}[ok])


if __name__ == "__main__":
    main()
