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

With --blocks (stamps with the SM id, from 13 fields a line), also per kind, medians over the
layers: how late blocks entered (entry after the first block passed its wait), and each
block's own stream (past its wait -> its last products) for blocks that ran an epilogue before
their last piece ("mid") and those that did not; and the ten blocks that finished last.
"""
import statistics
import sys

KINDS_8B = {(256, 384): "qkv", (256, 256): "o", (256, 1536): "gate_up", (768, 256): "down"}


def load(path):
    recs = []
    with open(path) as f:
        for line in f:
            v = [int(x) for x in line.split()]
            if len(v) >= 10:
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
    if "--blocks" in sys.argv:
        blocks_report(recs, names)


def blocks_report(recs, names):
    if len(recs[0]) < 13:
        sys.exit("--blocks needs stamps with the SM id (13 fields a line)")
    per = {}
    last = {}
    for kind, blocks in launches(recs):
        wait = min(r[7] for r in blocks)
        late = [r[6] - wait for r in blocks if r[6] > wait]
        own = {0: [], 1: []}
        for r in blocks:
            own[r[11]].append(r[8] - r[7])
        d = {
            "late_n": len(late),
            "late_max": max(late) if late else 0,
            "own_med": statistics.median(own[0]) if own[0] else 0,
            "own_max": max(own[0]) if own[0] else 0,
            "mid_n": len(own[1]),
            "mid_med": statistics.median(own[1]) if own[1] else 0,
            "mid_max": max(own[1]) if own[1] else 0,
        }
        per.setdefault(kind, []).append(d)
        if kind not in last:  # the first launch of each kind: its last ten blocks
            end = max(r[8] for r in blocks)
            last[kind] = [(end - r[8], r[4], r[10], r[11], r[6] - wait, r[8] - r[7])
                          for r in sorted(blocks, key=lambda r: -r[8])[:10]]
    print(f"{'kind':>10} {'late':>5} {'late max':>8} {'own med':>8} {'own max':>8}"
          f" {'mid':>4} {'mid med':>8} {'mid max':>8}")
    for kind, ds in per.items():
        med = {k: statistics.median(d[k] for d in ds) for k in ds[0]}
        name = names.get(kind, f"{kind[0]}x{kind[1]}")
        print(f"{name:>10} {med['late_n']:5.0f} {med['late_max'] / 1e3:8.2f} "
              f"{med['own_med'] / 1e3:8.2f} {med['own_max'] / 1e3:8.2f} {med['mid_n']:4.0f} "
              f"{med['mid_med'] / 1e3:8.2f} {med['mid_max'] / 1e3:8.2f}")
    for kind, rows in last.items():
        name = names.get(kind, f"{kind[0]}x{kind[1]}")
        print(f"{name}: last blocks (before the end us, block, SM, mid, entry after the wait us,"
              f" own stream us)")
        for e, b, sm, mid, ent, own in rows:
            print(f"    {e / 1e3:6.2f} {b:5d} {sm:4d} {mid:2d} {ent / 1e3:7.2f} {own / 1e3:7.2f}")


if __name__ == "__main__":
    main()
