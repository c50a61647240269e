"""Tokenizes the corpus: raw documents and conversations, each followed by <|endoftext|>, in a
seeded shuffled order, into flat uint16 token streams (train.npy, heldout_docs.npy,
heldout_chat.npy) in --data."""
import argparse
import json
import os
import pickle
import random
import sys
import time

import numpy as np
from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import EOT_ID  # noqa: E402


def encode_all(tok, texts, chunk=8192):
    out = []
    enc = getattr(tok, "encode_batch_fast", tok.encode_batch)  # no offsets: faster
    for i in range(0, len(texts), chunk):
        for e in enc(texts[i:i + chunk], add_special_tokens=False):
            out.append(np.asarray(e.ids, dtype=np.uint16))
    return out


def stream(pieces):
    parts = []
    for p in pieces:
        parts.append(p)
        parts.append(np.array([EOT_ID], dtype=np.uint16))
    return np.concatenate(parts) if parts else np.zeros(0, np.uint16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--tokenizer", required=True, help="folder with tokenizer.json")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    t0 = time.time()
    tok = Tokenizer.from_file(os.path.join(args.tokenizer, "tokenizer.json"))
    assert tok.get_vocab_size() <= 65535
    load = lambda n: pickle.load(open(os.path.join(args.data, n + ".pkl"), "rb"))  # noqa: E731
    stats = {}
    docs_train = encode_all(tok, load("docs_train"))
    chat_train = encode_all(tok, load("chat_train"))
    stats["train_doc_tokens"] = int(sum(len(x) for x in docs_train))
    stats["train_chat_tokens"] = int(sum(len(x) for x in chat_train))
    pieces = docs_train + chat_train
    order = list(range(len(pieces)))
    random.Random(args.seed).shuffle(order)
    train = stream([pieces[i] for i in order])
    np.save(os.path.join(args.data, "train.npy"), train)
    for name in ("docs_heldout", "chat_heldout"):
        p = encode_all(tok, load(name))
        random.Random(args.seed + 1).shuffle(p)
        s = stream(p)
        stats[name.replace("_heldout", "") + "_heldout_tokens"] = int(len(s))
        np.save(os.path.join(args.data, "heldout_" + name.split("_")[0] + ".npy"), s)
    stats["train_tokens"] = int(len(train))
    with open(os.path.join(args.data, "corpus_stats.json")) as f:
        cs = json.load(f)
    raw_bytes = cs["train_code_bytes"] + cs["train_doc_bytes"]
    stats["train_doc_bytes_per_token"] = round(raw_bytes / max(1, stats["train_doc_tokens"]), 3)
    stats["seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(args.data, "token_stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    print(json.dumps(stats, indent=1), flush=True)


if __name__ == "__main__":
    main()
