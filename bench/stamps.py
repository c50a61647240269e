#!/usr/bin/env python3
"""bench/stamps.py: where a pass's time goes between the decode matmuls, from the block stamps
of a DSPARK_LAB_STAMPS build.

    make CUDA=1 BUILD=build/gpust NVCC="nvcc -DDSPARK_LAB_STAMPS" build/gpust/bench_gpu
    DSPARK_LAB_STAMPS=/tmp/st build/gpust/bench_gpu MODEL --lab --batch 1,16
    python3 bench/stamps.py /tmp/st-1x1.txt [--qwen3-8b]

Each line of a stamps file is one block of one matmul launch of one pass: KT MS T nb block
ran_epilogue t_entry t_wait_passed t_products_done t_exit (ns, %globaltimer). Launches of a
matrix kind (same KT, MS) are told apart by time: sorted by entry, each run of nb blocks is one
launch. Printed per kind, medians over the layers, in microseconds:

  stream  first block past its wait -> last block's products done
  spread  first -> last block's products done
  tail    last block's products done -> last block's exit (split sums, epilogue)
  epi     the slowest epilogue block: products done -> exit
  finish  a block without the epilogue: products done -> exit (partial sums, arrival)
  gap     previous launch's last exit -> this launch's first block past its wait
"""
import statistics
import sys

KINDS_8B = {(256, 384): "qkv", (256, 256): "o", (256, 1536): "gate_up", (768, 256): "down"}


def load(path):
    recs = []
    with open(path) as f:
        for line in f:
            v = [int(x) for x in line.split()]
            if len(v) == 10:
                recs.append(v)
    if not recs:
        sys.exit(f"{path}: no stamps (was bench_gpu built with -DDSPARK_LAB_STAMPS?)")
    return recs


def launches(recs):
    by_kind = {}
    for r in recs:
        by_kind.setdefault((r[0], r[1]), []).append(r)
    out = []
    for kind, rs in by_kind.items():
        nb = rs[0][3]
        rs.sort(key=lambda r: r[6])
        for i in range(0, len(rs) - nb + 1, nb):
            out.append((kind, rs[i:i + nb]))
    out.sort(key=lambda x: min(r[6] for r in x[1]))
    return out


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    names = KINDS_8B if "--qwen3-8b" in sys.argv else {}
    recs = load(sys.argv[1])
    t0 = min(r[6] for r in recs)
    rows = {}
    prev_exit = None
    for kind, blocks in launches(recs):
        wait = min(r[7] for r in blocks)
        done = [r[8] for r in blocks]
        last_exit = max(r[9] for r in blocks)
        epi = [r[9] - r[8] for r in blocks if r[5]]
        fin = [r[9] - r[8] for r in blocks if not r[5]]
        d = {
            "stream": max(done) - wait,
            "spread": max(done) - min(done),
            "tail": last_exit - max(done),
            "epi": max(epi) if epi else 0,
            "finish": statistics.median(fin) if fin else 0,
            "gap": wait - prev_exit if prev_exit is not None else 0,
        }
        prev_exit = last_exit
        rows.setdefault(kind, []).append(d)
    span = (max(r[9] for r in recs) - t0) / 1e3
    print(f"{sys.argv[1]}: {len(recs)} blocks, pass {span:.1f} us")
    print(f"{'kind':>10} {'launches':>8} {'stream':>8} {'spread':>7} {'tail':>6} {'epi':>6}"
          f" {'finish':>7} {'gap':>6}")
    for kind, ds in rows.items():
        med = {k: statistics.median(d[k] for d in ds) / 1e3 for k in ds[0]}
        name = names.get(kind, f"{kind[0]}x{kind[1]}")
        print(f"{name:>10} {len(ds):8d} {med['stream']:8.2f} {med['spread']:7.2f} "
              f"{med['tail']:6.2f} {med['epi']:6.2f} {med['finish']:7.2f} {med['gap']:6.2f}")


if __name__ == "__main__":
    main()
