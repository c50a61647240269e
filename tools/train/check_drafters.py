"""Checks tools/train/drafters.py against the reference data of the original DSpark and DFlash
implementations (the golden folder: target/, dspark/, dflash/ and *_golden.json/.safetensors).

    python3 tools/train/check_drafters.py ../shared/golden [--device cuda]

Compares, in float32: the target's per-layer residual outputs, final norm and logits and its
64-token greedy continuation (KV-cached decoding); for each drafter the fused taps, context
rows, per-layer block states, block hidden, logits (DSpark: base, Markov bias, corrected,
confidence) and verify logits of round 0, the logits of rounds 1 and 2, the context rows of the
whole trace, and the full greedy speculative traces (drafts, accepted counts, committed tokens,
new ids; DSpark also with confidence threshold 0.5). It also checks the batched block path used
in training (masked, many anchors) and the batched acceptance simulation against the same data.
Relative error = max|mine - ref| / max|ref|. Exit status 1 when a check fails."""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from drafters import (Drafter, Qwen3Target, fuse_taps, generate, load_config,  # noqa: E402
                      load_safetensors, simulate_rounds, spec_trace)

TOL = 1e-4


class Report:
    def __init__(self):
        self.rows = []
        self.ok = True

    def arr(self, name, mine, ref):
        mine = mine.detach().double().cpu().reshape(ref.shape)
        ref = ref.double()
        err = float((mine - ref).abs().max() / ref.abs().max().clamp(min=1e-30))
        good = err <= TOL and bool(torch.isfinite(mine).all())
        self.ok &= good
        self.rows.append({"check": name, "rel_err": err, "ok": good})

    def eq(self, name, mine, ref):
        good = mine == ref
        self.ok &= good
        r = {"check": name, "equal": good, "ok": good}
        if not good:
            r["mine"], r["ref"] = str(mine)[:300], str(ref)[:300]
        self.rows.append(r)

    def text(self):
        out = []
        for r in self.rows:
            v = ("%.2e" % r["rel_err"]) if "rel_err" in r else ("equal" if r["equal"] else "DIFFERENT")
            out.append("%-48s %-10s %s" % (r["check"], v, "ok" if r["ok"] else "FAIL"))
        return "\n".join(out)


def check(golden, device="cpu", sdpa_device=None):
    rep = Report()
    g = lambda p: os.path.join(golden, p)  # noqa: E731
    tcfg = load_config(g("target/config.json"))
    target = Qwen3Target(tcfg, load_safetensors(g("target/model.safetensors")), device)
    tj = json.load(open(g("target_golden.json")))
    ts = load_safetensors(g("target_golden.safetensors"))
    prompt = tj["prompt_ids"]
    L = len(prompt)
    ids = torch.tensor([prompt], device=device)
    lg, got, xn = target.forward(ids, taps=range(target.L))
    rep.arr("target.layer_out", torch.stack([got[i][0] for i in range(target.L)]), ts["layer_out"])
    rep.arr("target.final_norm_out", xn[0], ts["final_norm_out"])
    rep.arr("target.prompt_logits", lg[0], ts["prompt_logits"])
    gen = generate(target, ids, len(tj["greedy_ids"]))[0].tolist()
    rep.eq("target.greedy_ids (kv-cached)", gen, tj["greedy_ids"])
    full = torch.tensor([prompt + tj["greedy_ids"]], device=device)

    for kind in ("dspark", "dflash"):
        dcfg = load_config(g(kind + "/config.json"))
        dr = Drafter(dcfg).to(device)
        dr.load_checkpoint({k: v.to(device) for k, v in load_safetensors(g(kind + "/model.safetensors")).items()},
                           target)
        dr.eval()
        gj = json.load(open(g(kind + "_golden.json")))
        gs = load_safetensors(g(kind + "_golden.safetensors"))
        tr = spec_trace(target, dr, prompt, gj["trace"]["max_new_tokens"], detail_rounds=3)
        rep.arr(kind + ".fused_input", tr["prompt_fused"], gs["fused_input"])
        d0 = tr["details"][0]
        pr = d0["pr"]
        rep.arr(kind + ".round0.ctx_rows", d0["ctx_rows"], gs["round0.ctx_rows"])
        rep.arr(kind + ".round0.layer_out", pr["layer_out"], gs["round0.layer_out"])
        rep.arr(kind + ".round0.block_hidden", pr["block_hidden"], gs["round0.block_hidden"])
        r0 = gj["round0"]
        if kind == "dspark":
            rep.arr(kind + ".round0.base_logits", pr["base_logits"], gs["round0.base_logits"])
            rep.arr(kind + ".round0.markov_bias", pr["markov_bias"], gs["round0.markov_bias"])
            rep.arr(kind + ".round0.corrected_logits", pr["draft_logits"], gs["round0.corrected_logits"])
            rep.arr(kind + ".round0.confidence_logits", torch.tensor(pr["confidence_logits"]),
                    torch.tensor(r0["confidence_logits"]))
            rep.eq(kind + ".round0.prev_ids", pr["prev_ids"], r0["prev_ids"])
            rep.eq(kind + ".round0.base_argmax", pr["base_logits"].argmax(-1).tolist(), r0["base_argmax"])
            logit_key = "base_logits"
        else:
            rep.arr(kind + ".round0.block_logits", pr["base_logits"], gs["round0.block_logits"])
            rep.eq(kind + ".round0.block_argmax_all_slots", pr["base_logits"].argmax(-1).tolist(),
                   r0["block_argmax_all_slots"])
            logit_key = "block_logits"
        rep.eq(kind + ".round0.draft_ids", pr["drafts"], r0["draft_ids"])
        rep.arr(kind + ".round0.verify_logits", d0["verify_logits"], gs["round0.verify_logits"])
        for r in (1, 2):
            d = tr["details"][r]
            rep.arr("%s.trace.r%d.%s" % (kind, r, logit_key), d["pr"]["base_logits"],
                    gs["trace.r%d.%s" % (r, logit_key)])
            rep.arr("%s.trace.r%d.verify_logits" % (kind, r), d["verify_logits"], gs["trace.r%d.verify_logits" % r])
        n_ctx = gs["trace.ctx_rows"].shape[0]
        rep.arr(kind + ".trace.ctx_rows", dr.fuse(tr["final_fused"][:n_ctx]), gs["trace.ctx_rows"])
        ref_rounds = gj["trace"]["rounds"]
        rep.eq(kind + ".trace.n_rounds", len(tr["rounds"]), len(ref_rounds))
        for key in ("start", "anchor", "draft_ids", "accepted", "committed", "verify_argmax"):
            rep.eq(kind + ".trace." + key, [r[key] for r in tr["rounds"]], [r[key] for r in ref_rounds])
        rep.eq(kind + ".trace.new_ids", tr["new_ids"], gj["trace"]["new_ids"])
        if kind == "dspark":
            rep.eq(kind + ".trace.prev_ids", [r["prev_ids"] for r in tr["rounds"]], [r["prev_ids"] for r in ref_rounds])
            t5 = gj["trace_threshold_0.5"]
            tr5 = spec_trace(target, dr, prompt, t5["max_new_tokens"], conf_threshold=0.5)
            rep.eq(kind + ".trace_threshold_0.5.proposal_lengths",
                   [r["n_verified_drafts"] for r in tr5["rounds"]], t5["proposal_lengths"])
            rep.eq(kind + ".trace_threshold_0.5.accepted", [r["accepted"] for r in tr5["rounds"]],
                   [r["accepted"] for r in t5["rounds"]])
            rep.eq(kind + ".trace_threshold_0.5.new_ids", tr5["new_ids"], t5["new_ids"])

        # Batched masked path (training): anchors at the first three round starts, all at once.
        with torch.no_grad():
            _, fgot, _ = target.forward(full, taps=dr.target_layer_ids)
            ctx = dr.fuse(fuse_taps(fgot, dr.target_layer_ids))
            starts = [r["start"] for r in tr["rounds"][:3]]
            h, _ = dr.block_forward(ctx, full, torch.tensor(starts, device=device))
            rep.arr(kind + ".batched.round0.block_hidden", h[0, 0], gs["round0.block_hidden"])
            for r in (1, 2):
                rep.arr("%s.batched.r%d.%s" % (kind, r, logit_key), dr.logits(h[0, r]),
                        gs["trace.r%d.%s" % (r, logit_key)])
            if sdpa_device is not None:
                dr_s = Drafter(dcfg).to(sdpa_device)
                dr_s.load_state_dict(dr.state_dict())
                dr_s.attach(dr.embed_w.to(sdpa_device), dr.head_w.to(sdpa_device))
                hs, _ = dr_s.block_forward(ctx.to(sdpa_device), full.to(sdpa_device),
                                           torch.tensor(starts, device=sdpa_device), sdpa=True)
                rep.arr(kind + ".batched_sdpa.round0.block_hidden", hs[0, 0], gs["round0.block_hidden"])
            # Batched acceptance simulation along the known greedy sequence.
            acc = simulate_rounds(dr, ctx, full, L, L + len(tj["greedy_ids"]) - dr.block_size - 1)
            ref_acc = [r["accepted"] for r in ref_rounds][:len(acc[0])]
            rep.eq(kind + ".simulate_rounds.accepted", acc[0], ref_acc)
    return rep


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("golden")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rep = check(args.golden, args.device)
    print(rep.text())
    print("GOLDEN CHECK:", "PASS" if rep.ok else "FAIL")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"ok": rep.ok, "tolerance": TOL, "rows": rep.rows}, f, indent=1)
    sys.exit(0 if rep.ok else 1)


if __name__ == "__main__":
    main()
