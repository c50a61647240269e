#!/usr/bin/env python3
"""Build dspark's golden reference models and outputs.

Usage:  python3 tools/golden/make_golden.py --out DIR

For every entry of MODELS this builds a tiny random-weight causal LM with
transformers, saves it as a complete Hugging Face folder (config.json,
generation_config.json, safetensors weights) and records reference outputs
next to it:

  golden.json         prompt ids, greedy continuation, per-step top-1/top-2
                      margins, dtype, seed and library versions
  golden.safetensors  "prompt_logits" [40, vocab] F32 and
                      "greedy_step_logits" [64, vocab] F32

Weights are drawn from a seeded generator.  For every model the seeds of a
fixed list are tried in order until the greedy continuation is varied and every
greedy step has a clear top-1/top-2 margin (for half-precision models the
margin is taken in the model's own dtype, and float32 math on the same rounded
weights must produce the same continuation).  The search runs in a pool of
single-threaded CPU processes.  The golden outputs are then computed from the
saved folder reloaded with from_pretrained, so they describe exactly the files
on disk.

Needs torch, transformers and safetensors.  Runs on CPU.
"""

import argparse
import concurrent.futures as cf
import json
import math
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

TF_VERSION = transformers.__version__
TF_MAJOR = int(TF_VERSION.split(".")[0])

# ---------------------------------------------------------------------------
# Shapes and constants shared by every model
# ---------------------------------------------------------------------------
VOCAB = 151            # odd on purpose: exercises non-multiple-of-8 tails
HIDDEN = 64
INTERMEDIATE = 80
LAYERS = 3
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 16
MAX_POS = 256
RMS_EPS = 1e-6
BOS_ID = 1
EOS_ID = 2             # never produced by any recorded greedy continuation
N_PROMPT = 40
N_GREEDY = 64
PROMPT_SEED = 20240611

# Weight init (see README): linear N(0, (1.5/sqrt(fan_in))^2), embeddings
# N(0, 0.05^2), biases N(0, 0.1^2), norm gains 1 + 0.1 N(0,1).  The final norm
# gain is multiplied by FINAL_GAIN so the logits have standard deviation of
# about LOGIT_STD whichever matrix serves as the output head.
LINEAR_GAIN = 1.5
EMBED_STD = 0.05
BIAS_STD = 0.1
NORM_JITTER = 0.1
LOGIT_STD = 24.0

# Acceptance criteria for a seed
MARGIN_F32 = 0.05
MARGIN_HALF = 0.25
MIN_DISTINCT = 24
NO_REPEAT_NGRAM = 8     # no n-gram of this length may occur twice
MAX_RUN = 2             # no token repeated more than this many times in a row
MAX_TOKEN_COUNT = 8     # no token more than this many times in the continuation
N_SEEDS = 2000          # seeds tried per model: SEED_BASE[model] + 0..N_SEEDS-1

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}

# name: arch, weight dtype, rope theta, rope scaling, tied head, max shard bytes
MODELS = {
    "qwen3_f32":         dict(arch="qwen3",   dtype="float32",  theta=5000.0,  scaling=None, shard=None),
    "qwen3_bf16":        dict(arch="qwen3",   dtype="bfloat16", theta=5000.0,  scaling=None, shard=None),
    "qwen3_f16":         dict(arch="qwen3",   dtype="float16",  theta=5000.0,  scaling=None, shard=None),
    "qwen3_sharded_f32": dict(arch="qwen3",   dtype="float32",  theta=5000.0,  scaling=None, shard=100_000),
    "qwen2_f32":         dict(arch="qwen2",   dtype="float32",  theta=20000.0, scaling=None, shard=None),
    "qwen2_bf16":        dict(arch="qwen2",   dtype="bfloat16", theta=20000.0, scaling=None, shard=None),
    "llama3_f32":        dict(arch="llama",   dtype="float32",  theta=10000.0, scaling=LLAMA3_ROPE, shard=None),
    "llama3_bf16":       dict(arch="llama",   dtype="bfloat16", theta=10000.0, scaling=LLAMA3_ROPE, shard=None),
    "mistral_f32":       dict(arch="mistral", dtype="float32",  theta=1000.0,  scaling=None, shard=None),
}
MODEL_ORDER = list(MODELS)
SEED_BASE = {name: 10000 * (i + 1) for i, name in enumerate(MODEL_ORDER)}

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def is_tied(spec):
    return spec["arch"] == "qwen3"


def is_half(spec):
    return spec["dtype"] != "float32"


def seed_for(name, idx):
    return SEED_BASE[name] + idx


def fixed_prompt():
    g = torch.Generator().manual_seed(PROMPT_SEED)
    ids = torch.randint(3, VOCAB, (N_PROMPT - 1,), generator=g).tolist()
    prompt = [BOS_ID] + ids
    prompt[26:31] = prompt[8:13]  # a repeated 5-gram
    assert len(prompt) == N_PROMPT and EOS_ID not in prompt
    return prompt


# ---------------------------------------------------------------------------
# Config / model construction
# ---------------------------------------------------------------------------
def rope_kwargs(spec):
    if TF_MAJOR >= 5:
        params = {"rope_type": "default", "rope_theta": float(spec["theta"])}
        if spec["scaling"]:
            params.update(spec["scaling"])
        return {"rope_parameters": params}
    out = {"rope_theta": float(spec["theta"])}
    if spec["scaling"]:
        out["rope_scaling"] = dict(spec["scaling"])
    return out


def make_config(spec):
    common = dict(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=MAX_POS,
        rms_norm_eps=RMS_EPS,
        hidden_act="silu",
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=None,
        use_cache=True,
        tie_word_embeddings=is_tied(spec),
    )
    common.update(rope_kwargs(spec))
    arch = spec["arch"]
    if arch == "qwen3":
        return transformers.Qwen3Config(head_dim=HEAD_DIM, attention_bias=False, **common)
    if arch == "qwen2":
        assert HIDDEN == HEADS * HEAD_DIM
        return transformers.Qwen2Config(**common)
    if arch == "llama":
        return transformers.LlamaConfig(head_dim=HEAD_DIM, attention_bias=False, mlp_bias=False, **common)
    if arch == "mistral":
        return transformers.MistralConfig(head_dim=HEAD_DIM, sliding_window=None, **common)
    raise ValueError(arch)


def build_f32(spec):
    cfg = make_config(spec)
    try:
        model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    except TypeError:
        cfg._attn_implementation = "eager"
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    model = model.float().eval()
    return model


def load_folder(path, dtype):
    kw = {"attn_implementation": "eager"}
    if TF_MAJOR >= 5 or tuple(int(x) for x in TF_VERSION.split(".")[:2]) >= (4, 56):
        kw["dtype"] = dtype
    else:
        kw["torch_dtype"] = dtype
    model = transformers.AutoModelForCausalLM.from_pretrained(path, **kw)
    return model.eval()


def head_std(spec):
    return EMBED_STD if is_tied(spec) else LINEAR_GAIN / math.sqrt(HIDDEN)


def final_gain(spec):
    return LOGIT_STD / (head_std(spec) * math.sqrt(HIDDEN))


@torch.no_grad()
def init_weights(model, spec, seed):
    """Overwrite every parameter from a generator seeded with `seed`."""
    g = torch.Generator().manual_seed(seed)
    params = dict(model.named_parameters())
    fg = final_gain(spec)
    for name in sorted(params):
        p = params[name]
        shape = tuple(p.shape)
        if p.dim() == 1 and "norm" in name:
            w = 1.0 + NORM_JITTER * torch.randn(shape, generator=g)
            if name == "model.norm.weight":
                w = w * fg
        elif name.endswith(".bias"):
            w = BIAS_STD * torch.randn(shape, generator=g)
        elif "embed_tokens" in name:
            w = EMBED_STD * torch.randn(shape, generator=g)
        elif p.dim() == 2:
            w = (LINEAR_GAIN / math.sqrt(shape[1])) * torch.randn(shape, generator=g)
        else:
            raise RuntimeError(f"unexpected parameter {name} {shape}")
        p.copy_(w.to(p.dtype))


# ---------------------------------------------------------------------------
# Greedy decoding with early rejection
# ---------------------------------------------------------------------------
class Checker:
    def __init__(self, margin_min):
        self.margin_min = margin_min
        self.ngrams = set()
        self.fail = None

    def step(self, ids, margin):
        if margin < self.margin_min:
            self.fail = f"margin {margin:.4g} < {self.margin_min} at step {len(ids) - 1}"
        elif ids[-1] == EOS_ID:
            self.fail = f"eos produced at step {len(ids) - 1}"
        elif len(ids) > MAX_RUN and len(set(ids[-(MAX_RUN + 1):])) == 1:
            self.fail = f"run of {MAX_RUN + 1} at step {len(ids) - 1}"
        elif len(ids) >= NO_REPEAT_NGRAM:
            ng = tuple(ids[-NO_REPEAT_NGRAM:])
            if ng in self.ngrams:
                self.fail = f"repeated {NO_REPEAT_NGRAM}-gram at step {len(ids) - 1}"
            self.ngrams.add(ng)
        return self.fail is None

    def final(self, ids):
        if self.fail is None and len(set(ids)) < MIN_DISTINCT:
            self.fail = f"only {len(set(ids))} distinct tokens"
        if self.fail is None and max(ids.count(t) for t in set(ids)) > MAX_TOKEN_COUNT:
            self.fail = f"frequent token: one token appears more than {MAX_TOKEN_COUNT} times"
        return self.fail is None


@torch.inference_mode()
def greedy(model, prompt, n_new, checker=None, keep=False):
    """Prefill `prompt`, then decode n_new tokens greedily with the KV cache.

    Returns dict with ids, margins and (if keep) prompt_logits / step_logits in
    the model's compute dtype.  Stops early when the checker rejects a step.
    """
    out = model(input_ids=torch.tensor([prompt]), use_cache=True)
    past = out.past_key_values
    prompt_logits = out.logits[0]
    row = prompt_logits[-1]
    ids, margins, rows = [], [], []
    for t in range(n_new):
        if keep:
            rows.append(row.clone())
        tok = int(torch.argmax(row))
        top = torch.topk(row, 2).values
        margin = float(top[0]) - float(top[1])
        ids.append(tok)
        margins.append(margin)
        if checker is not None and not checker.step(ids, margin):
            break
        if t + 1 < n_new:
            out = model(input_ids=torch.tensor([[tok]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            row = out.logits[0, -1]
    res = {"ids": ids, "margins": margins}
    if keep:
        res["prompt_logits"] = prompt_logits.clone()
        res["step_logits"] = torch.stack(rows)
    return res


# ---------------------------------------------------------------------------
# Worker side
# ---------------------------------------------------------------------------
_CACHE = {}


def worker_init():
    torch.set_num_threads(1)
    try:
        transformers.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    except Exception:
        pass


def containers(name):
    """Per-process reusable models for the seed search."""
    if name in _CACHE:
        return _CACHE[name]
    spec = MODELS[name]
    m32 = build_f32(spec)
    c = {"m32": m32, "mh": None, "compute": "float32"}
    if is_half(spec):
        tmp = tempfile.mkdtemp(prefix="golden_")
        try:
            init_weights(m32, spec, 0)
            m32.save_pretrained(tmp)
            mh = load_folder(tmp, DTYPES[spec["dtype"]])
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        try:
            with torch.inference_mode():
                y = mh(input_ids=torch.tensor([[BOS_ID, 5, 6, 7]])).logits
            if not torch.isfinite(y.float()).all():
                raise RuntimeError("non-finite")
            c["mh"] = mh
            c["compute"] = spec["dtype"]
        except Exception as e:  # CPU kernels for this dtype missing
            print(f"[{name}] {spec['dtype']} forward failed on CPU ({e}); computing in float32", flush=True)
            c["mh"] = None
            c["compute"] = "float32"
    _CACHE[name] = c
    return c


def eval_seed(name, idx):
    spec = MODELS[name]
    seed = seed_for(name, idx)
    c = containers(name)
    m32 = c["m32"]
    init_weights(m32, spec, seed)
    prompt = fixed_prompt()
    res = {"name": name, "idx": idx, "seed": seed, "ok": False}
    p32 = dict(m32.named_parameters())
    if is_half(spec):
        hdt = DTYPES[spec["dtype"]]
        with torch.no_grad():
            if c["mh"] is not None:
                for n, p in c["mh"].named_parameters():
                    p.copy_(p32[n])
                run_model = c["mh"]
            else:
                for p in p32.values():
                    p.copy_(p.to(hdt).float())
                run_model = m32
        chk = Checker(MARGIN_HALF)
    else:
        run_model = m32
        chk = Checker(MARGIN_F32)
    g = greedy(run_model, prompt, N_GREEDY, checker=chk)
    res["steps"] = len(g["ids"])
    res["min_margin"] = min(g["margins"])
    res["distinct"] = len(set(g["ids"]))
    if chk.fail is None and len(g["ids"]) == N_GREEDY:
        chk.final(g["ids"])
    if chk.fail is not None:
        res["reason"] = chk.fail
        return res
    if is_half(spec) and run_model is not m32:
        with torch.no_grad():
            for n, p in c["mh"].named_parameters():
                p32[n].copy_(p.float())
        g32 = greedy(m32, prompt, N_GREEDY)
        if g32["ids"] != g["ids"]:
            res["reason"] = "float32 math gives another continuation"
            return res
        if min(g32["margins"]) < MARGIN_F32:
            res["reason"] = "float32-math margin too small"
            return res
    res["ok"] = True
    return res


def folder_files(path):
    out = {}
    for f in sorted(os.listdir(path)):
        out[f] = os.path.getsize(os.path.join(path, f))
    return out


def inv_freq_of(model):
    for mod in model.modules():
        if hasattr(mod, "inv_freq") and isinstance(getattr(mod, "inv_freq"), torch.Tensor):
            return mod.inv_freq.detach().float().tolist(), float(getattr(mod, "attention_scaling", 1.0))
    return None, None


def finalize(name, idx, outdir, search_info):
    spec = MODELS[name]
    seed = seed_for(name, idx)
    wdt = DTYPES[spec["dtype"]]
    folder = os.path.join(outdir, name)
    if os.path.exists(folder):
        shutil.rmtree(folder)
    os.makedirs(folder)

    # 1. build, initialise, cast, save
    m = build_f32(spec)
    init_weights(m, spec, seed)
    if is_half(spec):
        m = m.to(wdt)
    m.generation_config = transformers.GenerationConfig(bos_token_id=BOS_ID, eos_token_id=EOS_ID)
    save_kw = {}
    if spec["shard"]:
        save_kw["max_shard_size"] = spec["shard"]
    m.save_pretrained(folder, **save_kw)
    if not os.path.exists(os.path.join(folder, "generation_config.json")):
        m.generation_config.save_pretrained(folder)
    files = folder_files(folder)
    shards = [f for f in files if f.endswith(".safetensors")]
    if spec["shard"]:
        size = spec["shard"]
        while len(shards) < 3 and size > 10_000:
            size //= 2
            for f in list(files):
                if f.endswith(".safetensors") or f.endswith(".index.json"):
                    os.remove(os.path.join(folder, f))
            m.save_pretrained(folder, max_shard_size=size)
            files = folder_files(folder)
            shards = [f for f in files if f.endswith(".safetensors")]
        if len(shards) < 3 or "model.safetensors.index.json" not in files:
            raise RuntimeError(f"sharded save produced {shards}")
    saved_params = {n: p.detach().clone() for n, p in m.named_parameters()}
    if spec["arch"] == "qwen2":
        assert "model.layers.0.self_attn.q_proj.bias" in saved_params, sorted(saved_params)
    del m

    # 2. reload in the compute dtype and check the weights round-trip
    compute = spec["dtype"]
    try:
        mr = load_folder(folder, wdt)
        with torch.inference_mode():
            y = mr(input_ids=torch.tensor([[BOS_ID, 5, 6, 7]])).logits
        if not torch.isfinite(y.float()).all():
            raise RuntimeError("non-finite logits")
    except Exception as e:
        if not is_half(spec):
            raise
        print(f"[{name}] {spec['dtype']} compute failed on CPU ({e}); using float32", flush=True)
        compute = "float32"
        mr = load_folder(folder, torch.float32)
    for n, p in mr.named_parameters():
        ref = saved_params[n].to(p.dtype)
        if not torch.equal(p.detach(), ref):
            raise RuntimeError(f"reloaded parameter {n} differs")

    # 3. golden outputs
    prompt = fixed_prompt()
    g = greedy(mr, prompt, N_GREEDY, keep=True)
    chk = Checker(MARGIN_HALF if is_half(spec) else MARGIN_F32)
    for t in range(N_GREEDY):
        if not chk.step(g["ids"][: t + 1], g["margins"][t]):
            break
    chk.final(g["ids"])

    # cache consistency: one full forward over prompt + greedy[:-1]
    with torch.inference_mode():
        full = mr(input_ids=torch.tensor([prompt + g["ids"][:-1]]), use_cache=False).logits[0]
    full_rows = full[N_PROMPT - 1:].float()
    cache_diff = float((full_rows - g["step_logits"].float()).abs().max())
    prefill_diff = float((full[:N_PROMPT].float() - g["prompt_logits"].float()).abs().max())

    info = {}
    extra = {}
    if is_half(spec):
        m32 = load_folder(folder, torch.float32)
        g32 = greedy(m32, prompt, N_GREEDY, keep=True)
        ref_max = float(max(g32["step_logits"].abs().max(), g32["prompt_logits"].abs().max()))
        info = {
            "greedy_match": g32["ids"] == g["ids"],
            "min_margin": min(g32["margins"]),
            "greedy_margins": g32["margins"],
            "step_logits_max_abs_diff": float((g32["step_logits"] - g["step_logits"].float()).abs().max()),
            "prompt_logits_max_abs_diff": float((g32["prompt_logits"] - g["prompt_logits"].float()).abs().max()),
            "ref_max_abs": ref_max,
        }
        info["max_rel_diff"] = max(info["step_logits_max_abs_diff"], info["prompt_logits_max_abs_diff"]) / ref_max
        extra = {"prompt_logits_f32math": g32["prompt_logits"].float().contiguous(),
                 "greedy_step_logits_f32math": g32["step_logits"].float().contiguous()}
        del m32

    inv_freq, attn_scaling = inv_freq_of(mr)
    hd = HEAD_DIM
    default_inv = [1.0 / (spec["theta"] ** (i / hd)) for i in range(0, hd, 2)]

    prompt_logits = g["prompt_logits"].float().contiguous()
    step_logits = g["step_logits"].float().contiguous()
    tensors = {"prompt_logits": prompt_logits, "greedy_step_logits": step_logits}
    tensors.update(extra)
    save_file(tensors, os.path.join(folder, "golden.safetensors"))

    golden = {
        "model": name,
        "architecture": type(mr).__name__,
        "dtype": spec["dtype"],
        "compute_dtype": compute,
        "seed": seed,
        "seed_index": idx,
        "prompt_ids": prompt,
        "greedy_ids": g["ids"],
        "greedy_margins": g["margins"],
        "min_margin": min(g["margins"]),
        "distinct_tokens": len(set(g["ids"])),
        "criteria_met": chk.fail is None and (not info or (info["greedy_match"] and info["min_margin"] >= MARGIN_F32)),
        "criteria_failure": chk.fail,
        "criteria": {
            "margin_min": MARGIN_HALF if is_half(spec) else MARGIN_F32,
            "min_distinct_tokens": MIN_DISTINCT,
            "no_repeated_ngram": NO_REPEAT_NGRAM,
            "max_run": MAX_RUN,
            "max_token_count": MAX_TOKEN_COUNT,
            "eos_never_produced": True,
            "float32_math_same_greedy": is_half(spec),
        },
        "float32_math": info or None,
        "logits_max_abs": float(max(prompt_logits.abs().max(), step_logits.abs().max())),
        "logits_std": float(step_logits.std()),
        "cache_vs_full_forward_max_abs_diff": cache_diff,
        "prefill_vs_full_forward_max_abs_diff": prefill_diff,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "rope_inv_freq": inv_freq,
        "rope_inv_freq_unscaled": default_inv,
        "rope_attention_scaling": attn_scaling,
        "tied_word_embeddings": is_tied(spec),
        "weight_init": {
            "linear_std": f"{LINEAR_GAIN}/sqrt(fan_in)",
            "embed_std": EMBED_STD,
            "bias_std": BIAS_STD,
            "norm_gain": f"1 + {NORM_JITTER}*N(0,1)",
            "final_norm_gain_scale": final_gain(spec),
        },
        "search": search_info,
        "transformers_version": TF_VERSION,
        "torch_version": torch.__version__,
    }
    with open(os.path.join(folder, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")

    row = {
        "name": name,
        "arch": golden["architecture"],
        "dtype": spec["dtype"],
        "compute": compute,
        "seed": seed,
        "min_margin": golden["min_margin"],
        "distinct": golden["distinct_tokens"],
        "ok": golden["criteria_met"],
        "fail": chk.fail,
        "f32_match": info.get("greedy_match") if info else None,
        "f32_min_margin": info.get("min_margin") if info else None,
        "f32_rel": info.get("max_rel_diff") if info else None,
        "cache_diff": cache_diff,
        "files": folder_files(folder),
        "inv_freq": inv_freq,
        "default_inv": default_inv,
    }
    return row


# ---------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------
def search(pool, names, workers, deadline):
    t0 = time.time()
    next_idx = {n: 0 for n in names}
    results = {n: {} for n in names}
    best_ok = {n: None for n in names}
    errors = {n: 0 for n in names}
    dead = set()

    def resolved(n):
        if n in dead:
            return True
        i = best_ok[n]
        return i is not None and all(j in results[n] for j in range(i))

    def next_task():
        cands = [n for n in names if not resolved(n) and next_idx[n] < N_SEEDS
                 and (best_ok[n] is None or next_idx[n] < best_ok[n])]
        if not cands:
            return None
        n = min(cands, key=lambda k: (next_idx[k], names.index(k)))
        i = next_idx[n]
        next_idx[n] += 1
        return n, i

    inflight = {}
    while True:
        while len(inflight) < 2 * workers and time.time() - t0 < deadline:
            t = next_task()
            if t is None:
                break
            inflight[pool.submit(eval_seed, *t)] = t
        if not inflight:
            break
        done, _ = cf.wait(list(inflight), timeout=5, return_when=cf.FIRST_COMPLETED)
        for fut in done:
            n, i = inflight.pop(fut)
            try:
                r = fut.result()
            except Exception:
                errors[n] += 1
                print(f"[{n}] seed index {i} raised:\n{traceback.format_exc()}", flush=True)
                r = {"ok": False, "reason": "error", "steps": -1, "min_margin": -1.0}
                if errors[n] >= 3:
                    dead.add(n)
            results[n][i] = r
            if r["ok"] and (best_ok[n] is None or i < best_ok[n]):
                best_ok[n] = i

    chosen = {}
    for n in names:
        tried = len(results[n])
        if best_ok[n] is not None:
            chosen[n] = (best_ok[n], {"seeds_tried": tried, "accepted_by_search": True})
            continue
        good = [(r["steps"], r["min_margin"], -i, i) for i, r in results[n].items() if r.get("steps", -1) >= 0]
        if good:
            i = max(good)[3]
            print(f"[{n}] no seed met every criterion in {tried} tries; using best index {i}", flush=True)
            chosen[n] = (i, {"seeds_tried": tried, "accepted_by_search": False})
        else:
            print(f"[{n}] no usable seed", flush=True)
    reasons = {}
    for n in names:
        rs = {}
        for r in results[n].values():
            if not r["ok"]:
                k = r.get("reason", "?").split(" ")[0]
                rs[k] = rs.get(k, 0) + 1
        reasons[n] = rs
    print(f"search finished in {time.time() - t0:.1f}s", flush=True)
    for n in names:
        print(f"  {n:18s} tried {len(results[n]):5d}  rejections {reasons[n]}", flush=True)
    return chosen


README_HEAD = """# Golden reference data

Tiny random-weight models in Hugging Face layout, with reference outputs
computed by transformers. The C tests load each folder with dspark and compare
against `golden.json` / `golden.safetensors`.

Generated by `python3 tools/golden/make_golden.py --out DIR` (CPU, one thread
per process) with:

- transformers {tf}
- torch {torch}
- python {py}

Do not edit these files by hand; rerun the script and replace the folder.

## Folders

| folder | class | weights | compute | tied head | rope | seed | min margin | distinct | weight files |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
{rows}

Half-precision folders, float32 math on the same rounded weights
(`float32_math` in `golden.json`, `*_f32math` tensors in `golden.safetensors`):

| folder | same greedy ids | min margin (f32 math) | max abs diff / max abs (half vs f32 math) |
| --- | --- | --- | --- |
{half_rows}

Common shapes: vocab {vocab}, hidden {hidden}, {layers} layers, {heads} query
heads / {kv} KV heads, head_dim {hd}, intermediate {inter}, rms_norm_eps
{eps}, max_position_embeddings {maxpos}, SiLU MLP, eager attention.
`bos_token_id` = {bos}, `eos_token_id` = {eos}; the eos id never appears in any
recorded greedy continuation, so generation with eos stopping runs all 64
steps. `pad_token_id` is null.

Rope theta: qwen3 5000, qwen2 20000, llama3 10000 with llama3 frequency
remapping (factor 8, low_freq_factor 1, high_freq_factor 4,
original_max_position_embeddings 64), mistral 1000. At head_dim 16 the llama3
remapping leaves the fastest frequency unchanged, interpolates two, and divides
the rest by 8; `golden.json` lists the remapped (`rope_inv_freq`) and unscaled
(`rope_inv_freq_unscaled`) inverse frequencies.

`qwen3_sharded_f32` is saved with a small `max_shard_size`, so its weights are
split over `model-0000X-of-0000Y.safetensors` files with
`model.safetensors.index.json`.

## Files in each folder

- `config.json`, `generation_config.json`, `*.safetensors`: written by
  `save_pretrained`.
- `golden.json`:
  - `prompt_ids`: the 40-token prompt (the same for every folder; it starts
    with bos and contains a repeated 5-gram).
  - `greedy_ids`: the 64-token greedy continuation.
  - `greedy_margins`: top-1 minus top-2 logit at each greedy step, in the
    compute dtype.
  - `dtype` (weights on disk), `compute_dtype` (dtype the reference ran in),
    `seed`, `transformers_version`, `torch_version`.
  - `float32_math` (half-precision folders): the same weights upcast to
    float32; `greedy_match` says whether the float32 continuation is
    identical, `greedy_margins` / `min_margin` are its margins, and
    `max_rel_diff` is how far its logits are from the half-dtype ones.
  - `rope_inv_freq`: inverse frequencies as held by the reference model.
- `golden.safetensors`:
  - `prompt_logits` F32 [40, vocab]: logits at every prompt position of the
    prefill.
  - `greedy_step_logits` F32 [64, vocab]: row 0 is the last prefill row; row t
    is the logits after feeding `greedy_ids[t-1]` through the KV cache. Row t's
    argmax is `greedy_ids[t]`.

  - half-precision folders also hold `prompt_logits_f32math` and
    `greedy_step_logits_f32math` (same shapes): the same computation with the
    stored half weights upcast to float32 and float32 activations.

Logits are computed in the compute dtype, then converted to F32.

## Intended tolerances

With `err = max|a - ref| / max|ref|` over all logits of a tensor:

- float32 folders: `err <= 1e-4`.
- bfloat16 / float16 folders: `err <= 2e-2` against the half-dtype tensors
  for an engine that rounds activations to the weight dtype the way the
  reference does. An engine that keeps float32 activations over half weights
  should compare with the `*_f32math` tensors at `err <= 1e-4`; its distance to
  the half-dtype tensors is about the `max_rel_diff` column above, which can
  exceed 2e-2 for bfloat16.
- greedy ids identical to `greedy_ids` in every folder (for the half folders
  float32 math yields the same ids).

## How the weights were made

Every parameter is drawn from `torch.Generator().manual_seed(seed)` in sorted
parameter-name order: linear weights N(0, (1.5/sqrt(fan_in))^2), token
embeddings N(0, 0.05^2), biases N(0, 0.1^2), RMSNorm gains 1 + 0.1 N(0,1). The
final norm gain is further scaled so the logits have a standard deviation of
about {logit_std}, so that a loader that drops any norm weight produces visibly
different outputs and the greedy argmax is decided by a clear margin.
Half-precision folders are the float32 draw rounded to bf16/f16.

Seeds come from a fixed list per folder; the first seed whose greedy
continuation satisfies all of these is kept:

- top-1 minus top-2 margin at every step >= {mf32} (float32) or >= {mhalf}
  (bf16/f16, measured in that dtype);
- at least {distinct} distinct tokens, no token more than {maxcount} times, no
  {ngram}-gram repeated, no token repeated more than {run} times in a row, eos
  never produced;
- bf16/f16: float32 math on the same rounded weights gives the same
  continuation, with every margin >= {mf32}.
"""


def write_readme(outdir, rows):
    lines, half_lines = [], []
    for r in rows:
        spec = MODELS[r["name"]]
        rope = "llama3" if spec["scaling"] else "default"
        wfiles = [k for k in r["files"] if k.endswith(".safetensors") and not k.startswith("golden")]
        if len(wfiles) == 1:
            files = f"{wfiles[0]} ({r['files'][wfiles[0]]} B)"
        else:
            files = f"{len(wfiles)} shards + model.safetensors.index.json"
        if r["f32_match"] is not None:
            half_lines.append(f"| `{r['name']}` | {'yes' if r['f32_match'] else 'NO'} | "
                              f"{r['f32_min_margin']:.3f} | {r['f32_rel']:.4f} |")
        lines.append(
            f"| `{r['name']}` | {r['arch']} | {r['dtype']} | {r['compute']} | "
            f"{'yes' if is_tied(spec) else 'no'} | {rope} {spec['theta']:g} | {r['seed']} | "
            f"{r['min_margin']:.3f} | {r['distinct']} | {files} |")
    text = README_HEAD.format(
        tf=TF_VERSION, torch=torch.__version__, py=sys.version.split()[0],
        rows="\n".join(lines), half_rows="\n".join(half_lines),
        vocab=VOCAB, hidden=HIDDEN, layers=LAYERS, heads=HEADS, kv=KV_HEADS, hd=HEAD_DIM,
        inter=INTERMEDIATE, eps=RMS_EPS, maxpos=MAX_POS, bos=BOS_ID, eos=EOS_ID,
        logit_std=int(LOGIT_STD), mf32=MARGIN_F32, mhalf=MARGIN_HALF, distinct=MIN_DISTINCT,
        ngram=NO_REPEAT_NGRAM, run=MAX_RUN, maxcount=MAX_TOKEN_COUNT)
    with open(os.path.join(outdir, "README.md"), "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory (model folders go inside)")
    ap.add_argument("--models", default=",".join(MODEL_ORDER), help="comma-separated subset")
    ap.add_argument("--jobs", type=int, default=max(1, min(16, (os.cpu_count() or 2) - 1)))
    ap.add_argument("--deadline", type=float, default=90.0, help="seconds for the seed search")
    args = ap.parse_args()
    names = [n for n in args.models.split(",") if n]
    for n in names:
        if n not in MODELS:
            sys.exit(f"unknown model {n}")
    outdir = os.path.abspath(args.out)
    os.makedirs(outdir, exist_ok=True)

    worker_init()
    print(f"python {sys.version.split()[0]}  torch {torch.__version__}  transformers {TF_VERSION}", flush=True)
    print(f"prompt {fixed_prompt()}", flush=True)
    t0 = time.time()
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    ctx = mp.get_context("spawn")
    rows = []
    with cf.ProcessPoolExecutor(max_workers=args.jobs, mp_context=ctx, initializer=worker_init) as pool:
        chosen = search(pool, names, args.jobs, args.deadline)
        futs = {pool.submit(finalize, n, i, outdir, info): n for n, (i, info) in chosen.items()}
        for fut in cf.as_completed(futs):
            n = futs[fut]
            try:
                rows.append(fut.result())
            except Exception:
                print(f"[{n}] finalize failed:\n{traceback.format_exc()}", flush=True)
    rows.sort(key=lambda r: MODEL_ORDER.index(r["name"]))
    write_readme(outdir, rows)
    with open(os.path.join(outdir, "models.json"), "w") as f:
        json.dump([{"folder": r["name"], "architecture": r["arch"], "dtype": r["dtype"],
                    "compute_dtype": r["compute"]} for r in rows], f, indent=1)
        f.write("\n")

    print(f"\n{'model':18s} {'seed':>6s} {'dtype':9s} {'compute':9s} {'min_margin':>10s} {'distinct':>8s} "
          f"{'ok':>3s} {'f32match':>8s} {'f32margin':>9s} {'f32reldiff':>10s} {'cache_diff':>10s}")
    for r in rows:
        f32m = "-" if r["f32_min_margin"] is None else f"{r['f32_min_margin']:.4f}"
        f32r = "-" if r["f32_rel"] is None else f"{r['f32_rel']:.4f}"
        print(f"{r['name']:18s} {r['seed']:6d} {r['dtype']:9s} {r['compute']:9s} {r['min_margin']:10.4f} "
              f"{r['distinct']:8d} {'yes' if r['ok'] else 'NO':>3s} {str(r['f32_match']):>8s} {f32m:>9s} "
              f"{f32r:>10s} {r['cache_diff']:10.3g}" + (f"  ({r['fail']})" if r["fail"] else ""))
    for r in rows:
        if MODELS[r["name"]]["scaling"] and r["inv_freq"]:
            print(f"{r['name']} inv_freq   {['%.6g' % x for x in r['inv_freq']]}")
            print(f"{r['name']} unscaled   {['%.6g' % x for x in r['default_inv']]}")
    total = 0
    for dp, _, fs in os.walk(outdir):
        for f in fs:
            total += os.path.getsize(os.path.join(dp, f))
    print(f"\ntotal {total} bytes in {outdir}; {time.time() - t0:.1f}s", flush=True)
    missing = [n for n in names if n not in {r['name'] for r in rows}]
    if missing:
        print(f"MISSING: {missing}", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
