"""PyTorch reference of the block drafters that dspark runs beside a Qwen3 target (DSpark and
DFlash), of the target itself with hidden-state taps, and of the greedy speculative loop.

Conventions (docs/models.md, "Block drafters"):
* tap i = the residual stream leaving target layer i (before the final norm); the fused input of
  a position is the taps concatenated in target_layer_ids order;
* context row = hidden_norm(fc(fused)), one per committed position, shared by all drafter layers;
* drafter layer: queries from the block only; keys/values = [k_proj/v_proj(context rows) ;
  k_proj/v_proj(input_layernorm(block))], k_norm on every key, RoPE at absolute positions (context
  row j at j, block slot i at P+i), V not roped; at inference no mask (the block sees every
  context row and every block slot); in training a block sees context rows before its anchor;
* DSpark: block [anchor, mask x (B-1)]; slot i predicts position P+i+1; logits of slot i =
  lm_head(h_i) + W2.W1[prev_i], prev = [anchor, d_0, d_1, ...] (drafted left to right);
  confidence c_i = sigmoid(w.[h_i ; W1[prev_i]] + b);
* DFlash: block [anchor, mask x (B-1)]; slot i >= 1 predicts its own position P+i; slot 0 unused.
Block embeddings and the output head are the target's unless the drafter checkpoint has its own.

Runs on the CPU with torch >= 1.13; scaled_dot_product_attention is used only where asked for and
present.
"""
import json
import math
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------------------------------------
# safetensors files (little-endian; enough of the format for these checkpoints)

_NP = {"F32": np.float32, "F16": np.float16, "BF16": np.int16, "I64": np.int64, "I32": np.int32,
       "U8": np.uint8, "I16": np.int16}


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        arr = np.frombuffer(data[b:e], dtype=_NP[info["dtype"]]).copy().reshape(info["shape"])
        t = torch.from_numpy(arr)
        if info["dtype"] == "BF16":
            t = t.view(torch.bfloat16)
        out[name] = t
    return out


def save_safetensors(path, tensors, metadata=None):
    """Writes tensors sorted by name, header padded with spaces to 8 bytes."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            raw, dt = t.view(torch.int16).numpy().tobytes(), "BF16"
        elif t.dtype == torch.float32:
            raw, dt = t.numpy().tobytes(), "F32"
        elif t.dtype == torch.int64:
            raw, dt = t.numpy().tobytes(), "I64"
        elif t.dtype == torch.int32:
            raw, dt = t.numpy().tobytes(), "I32"
        else:
            raise ValueError(f"{name}: unsupported dtype {t.dtype}")
        header[name] = {"dtype": dt, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    full = {"__metadata__": metadata or {"format": "pt"}}
    full.update(header)
    h = json.dumps(full, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_config(path):
    with open(path) as f:
        return json.load(f)


def rope_theta(cfg):
    rp = cfg.get("rope_parameters") or {}
    return float(rp.get("rope_theta", cfg.get("rope_theta", 10000.0)))


def head_dim(cfg):
    return int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])


# ---------------------------------------------------------------------------------------------
# Building blocks

def rms_norm(x, w, eps):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * y.to(x.dtype)


def rope_cos_sin(pos, dim, theta):
    """pos: [n] or [b, n] integer positions -> cos, sin of shape [1 or b, 1, n, dim] (float32)."""
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.int64, device=pos.device).float() / dim))
    if pos.dim() == 1:
        pos = pos[None]
    f = pos.float()[..., None] * inv
    emb = torch.cat([f, f], dim=-1)
    return emb.cos()[:, None], emb.sin()[:, None]


def apply_rope(x, cos, sin):
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], dim=-1)
    return x * cos + rot * sin


def attention(q, k, v, mask=None, causal=False, sdpa=False):
    """q [b, h, Q, D]; k, v [b, kvh, K, D]; mask: bool, broadcastable to [b, 1, Q, K], True = seen.
    causal: Q == K, query i sees keys 0..i. Scale 1/sqrt(D)."""
    rep = q.shape[1] // k.shape[1]
    if rep > 1:
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    if sdpa and hasattr(F, "scaled_dot_product_attention"):
        if causal:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    s = torch.matmul(q, k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
    if causal:
        n = q.shape[-2]
        mask = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    p = torch.softmax(s.float(), dim=-1).to(q.dtype)
    return torch.matmul(p, v)


# ---------------------------------------------------------------------------------------------
# Target: Qwen3ForCausalLM over a dict of weights, with taps and an optional static KV cache

class KVCache:
    def __init__(self, target, batch, maxlen, device, dtype):
        shape = (batch, target.kvh, maxlen, target.D)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(target.L)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(target.L)]


class Qwen3Target:
    def __init__(self, cfg, weights, device="cpu", dtype=torch.float32):
        self.cfg = cfg
        self.H = cfg["hidden_size"]
        self.nh = cfg["num_attention_heads"]
        self.kvh = cfg["num_key_value_heads"]
        self.D = head_dim(cfg)
        self.L = cfg["num_hidden_layers"]
        self.V = cfg["vocab_size"]
        self.eps = float(cfg.get("rms_norm_eps", 1e-6))
        self.theta = rope_theta(cfg)
        self.device, self.dtype = torch.device(device), dtype
        W = {}
        for k, v in weights.items():
            W[k[6:] if k.startswith("model.") else k] = v.to(device=device, dtype=dtype)
        self.W = W
        self.embed = W["embed_tokens.weight"]
        tied = cfg.get("tie_word_embeddings", True)
        self.head = W["lm_head.weight"] if ("lm_head.weight" in W and not tied) else self.embed

    @staticmethod
    def from_dir(path, device="cpu", dtype=torch.float32):
        return Qwen3Target(load_config(path + "/config.json"), load_safetensors(path + "/model.safetensors"),
                           device, dtype)

    def forward(self, ids, taps=(), cache=None, start=0, logits="all", sdpa=False):
        """ids [b, n] at positions start..start+n-1. Returns (logits or None, {layer: residual
        output}, final-normed hidden)."""
        W, eps, D, nh, kvh = self.W, self.eps, self.D, self.nh, self.kvh
        b, n = ids.shape
        x = F.embedding(ids, self.embed)
        pos = torch.arange(start, start + n, device=ids.device)
        cos, sin = rope_cos_sin(pos, D, self.theta)
        cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        total = start + n
        causal = n > 1 and start == 0
        mask = None
        if n > 1 and start > 0:
            mask = (torch.arange(total, device=ids.device)[None, :] <= pos[:, None])[None, None]
        got = {}
        for i in range(self.L):
            p = "layers.%d." % i
            h = rms_norm(x, W[p + "input_layernorm.weight"], eps)
            q = F.linear(h, W[p + "self_attn.q_proj.weight"]).view(b, n, nh, D)
            k = F.linear(h, W[p + "self_attn.k_proj.weight"]).view(b, n, kvh, D)
            v = F.linear(h, W[p + "self_attn.v_proj.weight"]).view(b, n, kvh, D).transpose(1, 2)
            q = apply_rope(rms_norm(q, W[p + "self_attn.q_norm.weight"], eps).transpose(1, 2), cos, sin)
            k = apply_rope(rms_norm(k, W[p + "self_attn.k_norm.weight"], eps).transpose(1, 2), cos, sin)
            if cache is not None:
                cache.k[i][:, :, start:total] = k
                cache.v[i][:, :, start:total] = v
                k, v = cache.k[i][:, :, :total], cache.v[i][:, :, :total]
            a = attention(q, k, v, mask=mask, causal=causal, sdpa=sdpa)
            x = x + F.linear(a.transpose(1, 2).reshape(b, n, nh * D), W[p + "self_attn.o_proj.weight"])
            h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
            x = x + F.linear(F.silu(F.linear(h, W[p + "mlp.gate_proj.weight"])) *
                             F.linear(h, W[p + "mlp.up_proj.weight"]), W[p + "mlp.down_proj.weight"])
            if i in taps:
                got[i] = x
        xn = rms_norm(x, W["norm.weight"], eps)
        lg = None
        if logits == "all":
            lg = F.linear(xn, self.head)
        elif logits == "last":
            lg = F.linear(xn[:, -1:], self.head)
        return lg, got, xn


def fuse_taps(got, layer_ids):
    return torch.cat([got[i] for i in layer_ids], dim=-1)


@torch.no_grad()
def generate(target, prompts, n_new, temperature=None, top_k=0, generator=None, sdpa=False):
    """Batched decoding with a KV cache. prompts [b, L] (one length). temperature: None (greedy for
    all rows) or a float tensor [b] (rows with 0 are greedy). Returns [b, n_new]."""
    b, L = prompts.shape
    cache = KVCache(target, b, L + n_new, prompts.device, target.dtype)
    lg, _, _ = target.forward(prompts, cache=cache, start=0, logits="last", sdpa=sdpa)

    def pick(z):
        z = z[:, -1].float()
        g = z.argmax(-1)
        if temperature is None:
            return g
        t = temperature.clamp(min=1e-5)[:, None]
        zs = z / t
        if top_k > 0:
            kth = torch.topk(zs, top_k, dim=-1).values[:, -1:]
            zs = zs.masked_fill(zs < kth, float("-inf"))
        s = torch.multinomial(torch.softmax(zs, -1), 1, generator=generator)[:, 0]
        return torch.where(temperature > 0, s, g)

    out = []
    tok = pick(lg)
    for t in range(n_new):
        out.append(tok)
        if t == n_new - 1:
            break
        lg, _, _ = target.forward(tok[:, None], cache=cache, start=L + t, logits="last", sdpa=sdpa)
        tok = pick(lg)
    return torch.stack(out, dim=1)


# ---------------------------------------------------------------------------------------------
# Drafter modules (parameter names are the checkpoint tensor names)

class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


class DrafterAttention(nn.Module):
    def __init__(self, H, nh, kvh, D, eps):
        super().__init__()
        self.nh, self.kvh, self.D = nh, kvh, D
        self.q_proj = nn.Linear(H, nh * D, bias=False)
        self.k_proj = nn.Linear(H, kvh * D, bias=False)
        self.v_proj = nn.Linear(H, kvh * D, bias=False)
        self.o_proj = nn.Linear(nh * D, H, bias=False)
        self.q_norm = RMSNorm(D, eps)
        self.k_norm = RMSNorm(D, eps)

    def context_kv(self, ctx, cos, sin):
        """Context keys/values of this layer: k_norm + RoPE on keys, plain values."""
        b, C, _ = ctx.shape
        k = self.k_norm(self.k_proj(ctx).view(b, C, self.kvh, self.D)).transpose(1, 2)
        v = self.v_proj(ctx).view(b, C, self.kvh, self.D).transpose(1, 2)
        return apply_rope(k, cos.to(k.dtype), sin.to(k.dtype)), v

    def forward(self, h, ctx_kv, cos, sin, mask, sdpa):
        b, Q, _ = h.shape
        q = self.q_norm(self.q_proj(h).view(b, Q, self.nh, self.D)).transpose(1, 2)
        k = self.k_norm(self.k_proj(h).view(b, Q, self.kvh, self.D)).transpose(1, 2)
        v = self.v_proj(h).view(b, Q, self.kvh, self.D).transpose(1, 2)
        q = apply_rope(q, cos.to(q.dtype), sin.to(q.dtype))
        k = apply_rope(k, cos.to(k.dtype), sin.to(k.dtype))
        kc, vc = ctx_kv
        k = torch.cat([kc.to(k.dtype), k], dim=2)
        v = torch.cat([vc.to(v.dtype), v], dim=2)
        a = attention(q, k, v, mask=mask, sdpa=sdpa)
        return self.o_proj(a.transpose(1, 2).reshape(b, Q, self.nh * self.D))


class DrafterMLP(nn.Module):
    def __init__(self, H, F_):
        super().__init__()
        self.gate_proj = nn.Linear(H, F_, bias=False)
        self.up_proj = nn.Linear(H, F_, bias=False)
        self.down_proj = nn.Linear(F_, H, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DrafterLayer(nn.Module):
    def __init__(self, H, nh, kvh, D, F_, eps):
        super().__init__()
        self.self_attn = DrafterAttention(H, nh, kvh, D, eps)
        self.mlp = DrafterMLP(H, F_)
        self.input_layernorm = RMSNorm(H, eps)
        self.post_attention_layernorm = RMSNorm(H, eps)

    def forward(self, x, ctx, ctx_cs, blk_cs, mask, sdpa):
        kv = self.self_attn.context_kv(ctx, *ctx_cs)
        x = x + self.self_attn(self.input_layernorm(x), kv, *blk_cs, mask, sdpa)
        return x + self.mlp(self.post_attention_layernorm(x))


class MarkovHead(nn.Module):
    def __init__(self, V, r):
        super().__init__()
        self.markov_w1 = nn.Embedding(V, r)
        self.markov_w2 = nn.Linear(r, V, bias=False)


class ConfidenceHead(nn.Module):
    def __init__(self, n_in):
        super().__init__()
        self.proj = nn.Linear(n_in, 1)


class Drafter(nn.Module):
    """DSpark (Qwen3DSparkModel) or DFlash (DFlashDraftModel) drafter."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        arch = (cfg.get("architectures") or [""])[0]
        self.kind = "dflash" if "DFlash" in arch else "dspark"
        dc = cfg.get("dflash_config") or {}
        self.target_layer_ids = [int(i) for i in cfg.get("target_layer_ids", dc.get("target_layer_ids"))]
        self.mask_token_id = int(cfg.get("mask_token_id", dc.get("mask_token_id")))
        self.block_size = int(cfg["block_size"])
        H, nh, kvh, D = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], head_dim(cfg)
        eps = float(cfg.get("rms_norm_eps", 1e-6))
        self.H, self.V, self.D, self.theta = H, cfg["vocab_size"], D, rope_theta(cfg)
        self.fc = nn.Linear(len(self.target_layer_ids) * H, H, bias=False)
        self.hidden_norm = RMSNorm(H, eps)
        self.layers = nn.ModuleList([DrafterLayer(H, nh, kvh, D, cfg["intermediate_size"], eps)
                                     for _ in range(cfg["num_hidden_layers"])])
        self.norm = RMSNorm(H, eps)
        self.markov_rank = int(cfg.get("markov_rank", 0)) if self.kind == "dspark" else 0
        if self.markov_rank > 0:
            assert cfg.get("markov_head_type", "vanilla") == "vanilla", "only the vanilla Markov head"
            self.markov_head = MarkovHead(self.V, self.markov_rank)
        self.with_conf = self.kind == "dspark" and bool(cfg.get("enable_confidence_head", False))
        self.conf_markov = self.with_conf and bool(cfg.get("confidence_head_with_markov", False))
        if self.with_conf:
            self.confidence_head = ConfidenceHead(H + (self.markov_rank if self.conf_markov else 0))
        self.embed_w = None
        self.head_w = None
        # slot i's label position is P + i + offset
        self.offset = 1 if self.kind == "dspark" else 0

    def attach(self, embed, head):
        """The block embedding and output head (the target's, or the checkpoint's own)."""
        self.embed_w, self.head_w = embed, head
        return self

    def load_checkpoint(self, tensors, target):
        own = {k: v for k, v in tensors.items() if k not in ("embed_tokens.weight", "lm_head.weight")}
        self.load_state_dict({k: v.float() for k, v in own.items()}, strict=True)
        dev = next(self.parameters()).device
        emb = tensors.get("embed_tokens.weight")
        head = tensors.get("lm_head.weight")
        emb = target.embed if emb is None else emb.to(dev, torch.float32)
        head = target.head if head is None else head.to(dev, torch.float32)
        return self.attach(emb, head)

    # -- pieces ---------------------------------------------------------------------------------
    def fuse(self, fused):
        return self.hidden_norm(self.fc(fused))

    def backbone(self, block_ids, block_pos, ctx, ctx_pos, mask=None, sdpa=False, layer_outs=None):
        """block_ids [b, Q]; block_pos [Q] or [b, Q]; ctx [b, C, H] context rows; ctx_pos [C] or
        [b, C]; mask None (all visible) or bool [Q, C+Q] / [b, Q, C+Q]. Returns final-normed
        block hidden [b, Q, H]."""
        x = F.embedding(block_ids, self.embed_w)
        blk_cs = rope_cos_sin(block_pos, self.D, self.theta)
        ctx_cs = rope_cos_sin(ctx_pos, self.D, self.theta)
        if mask is not None:
            mask = mask[None, None] if mask.dim() == 2 else mask[:, None]
        for layer in self.layers:
            x = layer(x, ctx, ctx_cs, blk_cs, mask, sdpa)
            if layer_outs is not None:
                layer_outs.append(x)
        return self.norm(x)

    def logits(self, h):
        return F.linear(h, self.head_w)

    def markov_bias(self, prev):
        return self.markov_head.markov_w2(self.markov_head.markov_w1(prev))

    def confidence_logit(self, h, prev):
        feat = h
        if self.conf_markov:
            feat = torch.cat([h, self.markov_head.markov_w1(prev).to(h.dtype)], dim=-1)
        return self.confidence_head.proj(feat).squeeze(-1)

    # -- inference ------------------------------------------------------------------------------
    @torch.no_grad()
    def propose(self, ctx_rows, anchor, P):
        """One greedy drafting pass: ctx_rows [P, H] for positions 0..P-1, anchor at P.
        DSpark: B drafts; DFlash: B-1 drafts (slots 1..B-1)."""
        B = self.block_size
        dev = ctx_rows.device
        ids = torch.full((1, B), self.mask_token_id, dtype=torch.long, device=dev)
        ids[0, 0] = anchor
        pos = torch.arange(P, P + B, device=dev)
        outs = []
        h = self.backbone(ids, pos, ctx_rows[None], torch.arange(P, device=dev), layer_outs=outs)[0]
        base = self.logits(h)
        r = {"block_input_ids": ids[0].tolist(), "block_positions": pos.tolist(), "block_hidden": h,
             "layer_out": torch.stack([o[0] for o in outs]), "base_logits": base}
        if self.kind == "dflash":
            z = base[1:]
            r["drafts"] = z.argmax(-1).tolist()
            r["draft_logits"] = z
            return r
        prev, drafts, prevs, bias, corr, conf = int(anchor), [], [], [], [], []
        for i in range(B):
            pt = torch.tensor([prev], device=dev)
            bi = self.markov_bias(pt)[0] if self.markov_rank else torch.zeros_like(base[i])
            zi = base[i] + bi
            d = int(zi.argmax())
            prevs.append(prev)
            bias.append(bi)
            corr.append(zi)
            if self.with_conf:
                conf.append(float(self.confidence_logit(h[i:i + 1], pt)[0]))
            drafts.append(d)
            prev = d
        r.update(drafts=drafts, prev_ids=prevs, markov_bias=torch.stack(bias), draft_logits=torch.stack(corr),
                 confidence_logits=conf)
        return r

    # -- training / batched evaluation ------------------------------------------------------------
    def block_forward(self, ctx, seq_ids, anchors, sdpa=False):
        """Many blocks at once. ctx [b, T, H] context rows of every position; seq_ids [b, T];
        anchors [A] (shared by the batch) or [b, A] anchor positions. A block sees the context
        rows before its anchor and its own slots. Returns block hidden [b, A, B, H] and the
        block positions [A, B] or [b, A, B]."""
        b, T, _ = ctx.shape
        B = self.block_size
        dev = ctx.device
        ar = torch.arange(B, device=dev)
        shared = anchors.dim() == 1
        an = anchors[None].expand(b, -1) if shared else anchors
        A = an.shape[1]
        ids = torch.full((b, A, B), self.mask_token_id, dtype=torch.long, device=dev)
        ids[:, :, 0] = torch.gather(seq_ids, 1, an)
        pos = anchors[..., None] + ar  # [A, B] or [b, A, B]
        qa = anchors.repeat_interleave(B, dim=-1)  # anchor of each query
        ctx_vis = torch.arange(T, device=dev) < qa[..., None]  # [(b,) A*B, T]
        blk = torch.arange(A, device=dev).repeat_interleave(B)
        blk_vis = blk[:, None] == blk[None, :]  # [A*B, A*B]
        if not shared:
            blk_vis = blk_vis[None].expand(b, -1, -1)
        mask = torch.cat([ctx_vis, blk_vis], dim=-1)
        h = self.backbone(ids.view(b, A * B), pos.reshape(*pos.shape[:-2], A * B), ctx,
                          torch.arange(T, device=dev), mask=mask, sdpa=sdpa)
        return h.view(b, A, B, -1), pos


# ---------------------------------------------------------------------------------------------
# Greedy speculative loop (one sequence, full target recompute per round)

def _margin(z):
    t = torch.topk(z.float(), 2, dim=-1).values
    return (t[..., 0] - t[..., 1]).tolist()


@torch.no_grad()
def spec_trace(target, drafter, prompt_ids, max_new, conf_threshold=0.0, detail_rounds=0):
    """Runs the greedy speculative loop: prefill; per round a drafting pass at start P (context
    rows 0..P-1, anchor = newest committed token), verify [anchor, drafts] in one target pass,
    accept the longest prefix that matches the target's argmax, commit it plus the target's next
    token; loop while P < prompt_len + max_new. conf_threshold > 0 (DSpark): verify only the drafts
    before the first slot whose own sigmoid(confidence) < threshold.
    Returns a dict with new_ids (max_new), rounds and, for the first detail_rounds rounds, tensors."""
    taps = drafter.target_layer_ids
    dev = target.embed.device
    L = len(prompt_ids)
    seq = list(prompt_ids)
    lg, got, _ = target.forward(torch.tensor([seq], device=dev), taps=taps)
    fused = fuse_taps(got, taps)[0]
    a = int(lg[0, -1].argmax())
    new = [a]
    rounds, details = [], []
    prompt_fused = fused.clone()
    while len(seq) < L + max_new:
        P = len(seq)
        ctx = drafter.fuse(fused[:P])
        pr = drafter.propose(ctx, a, P)
        drafts = pr["drafts"]
        k = len(drafts)
        if conf_threshold > 0 and drafter.with_conf:
            k = next((i for i, c in enumerate(pr["confidence_logits"])
                      if 1.0 / (1.0 + math.exp(-c)) < conf_threshold), len(drafts))
        v_in = seq + [a] + drafts[:k]
        vlg, vgot, _ = target.forward(torch.tensor([v_in], device=dev), taps=taps)
        rows = vlg[0, P:P + k + 1]
        vt = rows.argmax(-1).tolist()
        n = 0
        while n < k and drafts[n] == vt[n]:
            n += 1
        r = vt[n]
        committed = drafts[:n] + [r]
        rd = {"start": P, "anchor": a, "draft_ids": drafts, "n_verified_drafts": k,
              "verify_input_ids": [a] + drafts[:k], "verify_argmax": vt, "accepted": n,
              "next_token": r, "committed": committed, "draft_margins": _margin(pr["draft_logits"]),
              "verify_margins": _margin(rows)}
        if drafter.kind == "dspark":
            rd["prev_ids"] = pr["prev_ids"]
            rd["confidence_logits"] = pr["confidence_logits"]
        rounds.append(rd)
        if len(details) < detail_rounds:
            d = {"ctx_rows": ctx, "pr": pr, "verify_logits": rows}
            details.append(d)
        seq = seq + [a] + drafts[:n]
        fused = fuse_taps(vgot, taps)[0, :len(seq)]
        new += committed
        a = r
    return {"new_ids": new[:max_new], "rounds": rounds, "details": details, "prompt_fused": prompt_fused,
            "final_fused": fused, "n_committed_positions": len(seq)}


@torch.no_grad()
def plain_greedy(target, prompt_ids, n_new):
    dev = target.embed.device
    seq = list(prompt_ids)
    out, margins = [], []
    for _ in range(n_new):
        lg, _, _ = target.forward(torch.tensor([seq], device=dev), logits="last")
        z = lg[0, -1]
        t = int(z.argmax())
        margins.append(_margin(z))
        out.append(t)
        seq.append(t)
    return out, margins


# ---------------------------------------------------------------------------------------------
# Batched greedy acceptance on a known greedy continuation

@torch.no_grad()
def simulate_rounds(drafter, ctx, seq, start, stop, cap=None, sdpa=False):
    """Greedy acceptance of a block drafter along the target's own greedy sequences.
    ctx [b, S, H] context rows of seq [b, S] (from one target pass over prompt + greedy
    continuation); the first anchor is at position `start`; rounds run while P < stop
    (stop + cap <= S - 1). Returns the list of accepted counts per row."""
    b, S = seq.shape
    B = drafter.block_size
    cap = cap or (B if drafter.kind == "dspark" else B - 1)
    dev = seq.device
    P = torch.full((b,), start, dtype=torch.long, device=dev)
    acc = [[] for _ in range(b)]
    while True:
        act = (P < stop).nonzero()[:, 0]
        if act.numel() == 0:
            break
        h, _ = drafter.block_forward(ctx[act], seq[act], P[act][:, None], sdpa=sdpa)
        h = h[:, 0]  # [m, B, H]
        if drafter.kind == "dspark":
            base = drafter.logits(h[:, :cap])
            prev = seq[act, P[act]]
            ds = []
            for i in range(cap):
                z = base[:, i]
                if drafter.markov_rank:
                    z = z + drafter.markov_bias(prev)
                prev = z.argmax(-1)
                ds.append(prev)
            drafts = torch.stack(ds, 1)
            truth_pos = P[act][:, None] + 1 + torch.arange(cap, device=dev)
        else:
            drafts = drafter.logits(h[:, 1:cap + 1]).argmax(-1)
            truth_pos = P[act][:, None] + 1 + torch.arange(cap, device=dev)
        truth = torch.gather(seq[act], 1, truth_pos)
        n = (drafts == truth).long().cumprod(1).sum(1)
        for j, row in enumerate(act.tolist()):
            acc[row].append(int(n[j]))
        P[act] += n + 1
    return acc


def chain_rounds(match, start, stop, cap):
    """Greedy acceptance of a chain draft model: match[t] = the draft's argmax after position
    t-1 equals the token at t. Returns accepted counts per round."""
    out, P = [], start
    while P < stop:
        n = 0
        while n < cap and match[P + 1 + n]:
            n += 1
        out.append(n)
        P += n + 1
    return out
