"""Trains the byte-level BPE tokenizer (tokenizers library) on the sample that build_corpus.py
wrote, and writes tokenizer.json + tokenizer_config.json (with the chat template) to --out."""
import argparse
import json
import os
import pickle
import sys
import time

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, \
    processors, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import HIDDEN_SPECIALS, SPECIAL_TOKENS, SPLIT_PATTERN, chat_template  # noqa: E402


def build(vocab_size, texts):
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tok


def config(tok_json):
    decoder = {}
    for t in tok_json["added_tokens"]:
        decoder[str(t["id"])] = {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                                   "single_word", "special")}
    return {
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|MASK|>"],
        "bos_token": "<|endoftext|>",
        "chat_template": chat_template(),
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "mask_token": "<|MASK|>",
        "model_max_length": 2048,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True, help="build_corpus.py output folder")
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab-size", type=int, default=8192)
    args = ap.parse_args()
    t0 = time.time()
    with open(os.path.join(args.data, "tok_sample.pkl"), "rb") as f:
        texts = pickle.load(f)
    tok = build(args.vocab_size, texts)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "tokenizer.json")
    tok.save(path)
    with open(path, encoding="utf-8") as f:
        tj = json.load(f)
    ids = [t["id"] for t in tj["added_tokens"]]
    assert ids == list(range(len(SPECIAL_TOKENS))), ids
    for t in tj["added_tokens"]:
        t["special"] = t["content"] in HIDDEN_SPECIALS
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False, separators=(",", ":"))
    with open(os.path.join(args.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config(tj), f, ensure_ascii=False, indent=2)
        f.write("\n")
    tok = Tokenizer.from_file(path)
    print(f"vocab {tok.get_vocab_size()}; sample {sum(map(len, texts)) / 1e6:.1f} M chars; "
          f"{time.time() - t0:.1f}s", flush=True)
    demo = "def add(a, b):\n    return a + b  # sum\n<|im_start|>user\nhi<|im_end|>"
    enc = tok.encode(demo, add_special_tokens=False)
    print(enc.tokens, flush=True)
    assert tok.decode(enc.ids, skip_special_tokens=False) == demo


if __name__ == "__main__":
    main()
