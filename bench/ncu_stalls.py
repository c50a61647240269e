#!/usr/bin/env python3
"""bench/ncu_stalls.py: where one kernel launch's warps wait, from Nsight Compute's SASS source
page. Reads the CSV of `ncu -i REPORT --page source --csv --print-source sass` (the report
taken with `--set full --import-source yes`; plain or gzipped; the first kernel in it) and
prints the samples by stall reason, then by runs of instructions (--run, default 250) with
each run's share, its top stall reasons and its most sampled operations, then the single
instructions with at least --top samples. Shares are of all warp samples: in a phase where
some warps wait at a barrier for others, the waiting warps' samples count too.

    ncu --set full --import-source yes -k regex:k_mmg4 -c 1 -o /tmp/rep BIN ARGS
    ncu -i /tmp/rep.ncu-rep --page source --csv --print-source sass > src.csv
    python3 bench/ncu_stalls.py src.csv [--run 250] [--top 100] [--from A --to B]
"""
import argparse
import csv
import gzip
import sys


def rows_of(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = f.read().splitlines()
    # the first line names the kernel, the second is the header
    start = next((i for i, l in enumerate(lines) if l.startswith('"Address"')), None)
    if start is None:
        sys.exit(f"{path}: no SASS source table (expected a line starting with \"Address\")")
    return lines[max(0, start - 1)].strip(), list(csv.DictReader(lines[start:]))


def op_of(src):
    parts = src.split()
    if parts and parts[0].startswith("@"):
        parts = parts[1:]
    return parts[0].split(".")[0] if parts else ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--run", type=int, default=250, help="instructions a run")
    ap.add_argument("--top", type=int, default=100,
                    help="list the instructions with this many samples")
    ap.add_argument("--from", dest="lo", type=int, default=0)
    ap.add_argument("--to", dest="hi", type=int, default=None)
    a = ap.parse_args()
    title, rows = rows_of(a.csv)
    stalls = [k for k in rows[0] if k.startswith("stall_") and "Not Issued" not in k]
    n = lambda r, k="# Samples": int(r[k] or 0)
    total = sum(n(r) for r in rows) or 1
    print(title)
    print(f"{len(rows)} instructions, {total} samples")
    by = sorted(((sum(n(r, k) for r in rows), k[6:]) for k in stalls), reverse=True)
    print("by reason: " + ", ".join(f"{k} {v} ({100 * v / total:.1f}%)" for v, k in by[:8]))
    hi = len(rows) if a.hi is None else min(a.hi, len(rows))
    for s in range(a.lo, hi, a.run):
        seg = rows[s : min(s + a.run, hi)]
        m = sum(n(r) for r in seg)
        if not m:
            continue
        st = sorted(((sum(n(r, k) for r in seg), k[6:]) for k in stalls), reverse=True)[:3]
        ops = {}
        for r in seg:
            ops[op_of(r["Source"])] = ops.get(op_of(r["Source"]), 0) + n(r)
        top_ops = sorted(ops.items(), key=lambda x: -x[1])[:4]
        reasons = " ".join(f"{k}:{v}" for v, k in st)
        opers = " ".join(f"{k}:{v}" for k, v in top_ops)
        print(f"{s:6d}-{s + len(seg) - 1:<6d} {m:7d} {100 * m / total:5.1f}%  {reasons}  | {opers}")
    for i in range(a.lo, hi):
        r = rows[i]
        if n(r) >= a.top:
            st = sorted(((n(r, k), k[6:]) for k in stalls if n(r, k)), reverse=True)[:3]
            reasons = " ".join(f"{k}:{v}" for v, k in st)
            print(f"{i:6d} {n(r):6d} {r['Source'].strip()[:56]:56s} {reasons}")


if __name__ == "__main__":
    main()
