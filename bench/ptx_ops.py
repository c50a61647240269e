#!/usr/bin/env python3
"""bench/ptx_ops.py: whether a change to the CUDA backend leaves its kernels' instructions
alone, for changes no GPU has run yet. Compiles each src/backend/cuda/*.cu to PTX at REV
(default HEAD, in a temporary git worktree) and in the working tree, and compares each
kernel entry's multiset of PTX operations (an operation and its count, whatever its
registers and order). An entry renamed by the change is paired with an entry of equal
multiset where there is one. Equal multisets do not prove equal code (order and operands
may differ); a difference prints the counts that changed. nvcc merges or splits a
shared-memory load in a few k_attn / k_attnp entries from one compile to the next
(ld.shared.v2.f32 +-1): that alone is not a change.

    python3 bench/ptx_ops.py [--rev REV] [FILE.cu ...]    (default: every backend .cu)
"""
import argparse
import collections
import glob
import os
import re
import subprocess
import sys
import tempfile


def entries(ptx):
    """{entry name: Counter of operations}"""
    out, name = {}, None
    for line in open(ptx):
        m = re.search(r"\.entry\s+(\w+)", line)
        if m:
            name = m.group(1)
            out[name] = collections.Counter()
        elif re.search(r"\.func\s", line):
            name = None
        elif name and re.match(r"\t[@a-z]", line):
            words = line.split()
            op = words[1] if words[0].startswith("@") else words[0]
            out[name][op.rstrip(";")] += 1
    return out


def key(c):
    return tuple(sorted(c.items()))


def compare(label, old, new):
    same, differ = 0, []
    for n in sorted(set(old) & set(new)):
        if old[n] == new[n]:
            same += 1
        else:
            d = collections.Counter(new[n])
            d.subtract(old[n])
            differ.append((n, {k: v for k, v in d.items() if v}))
    # renamed entries: paired by equal multisets
    gone = collections.Counter(key(old[n]) for n in set(old) - set(new))
    renamed, unpaired = 0, []
    for n in sorted(set(new) - set(old)):
        if gone[key(new[n])] > 0:
            gone[key(new[n])] -= 1
            renamed += 1
        else:
            unpaired.append(n)
    for n, d in differ:
        print(f"{label}: {n} differs: " + " ".join(f"{k} {v:+d}" for k, v in sorted(d.items())))
    for n in unpaired:
        print(f"{label}: {n} is new, equal to no entry gone")
    lost = sum(gone.values())
    print(f"{label}: {same} entries the same, {renamed} renamed with the same operations, "
          f"{len(differ)} differ, {len(unpaired)} new unpaired, {lost} gone unpaired")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.chdir(root)
    files = a.files or sorted(glob.glob("src/backend/cuda/*.cu"))
    nvcc = os.environ.get("NVCC", "nvcc").split()
    with tempfile.TemporaryDirectory() as tmp:
        old = os.path.join(tmp, "old")
        subprocess.run(["git", "worktree", "add", "-q", "--detach", old, a.rev], check=True)
        try:
            for f in files:
                b = os.path.basename(f)[:-3]
                jobs = []
                for tree, tag in ((old, "old"), (".", "new")):
                    cmd = nvcc + ["-O3", "-arch=sm_90a", "-std=c++17",
                                  "-I" + os.path.join(tree, "src"), "-ptx",
                                  "-o", os.path.join(tmp, f"{b}.{tag}.ptx"), os.path.join(tree, f)]
                    jobs.append(subprocess.Popen(cmd))
                if any(j.wait() for j in jobs):
                    sys.exit(f"nvcc failed on {f}")
                compare(b, entries(os.path.join(tmp, f"{b}.old.ptx")),
                        entries(os.path.join(tmp, f"{b}.new.ptx")))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", old], check=True)


if __name__ == "__main__":
    main()
