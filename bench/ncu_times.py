#!/usr/bin/env python3
"""bench/ncu_times.py: each profiled launch's duration, from the CSV of `ncu --metrics
gpu__time_duration.sum --csv --page raw ...` (the program's own output before the table is
skipped): a line per launch with its kernel, grid and microseconds.

    ncu --clock-control none -k regex:k_mmg4 -c 8 --metrics gpu__time_duration.sum --csv \\
        --page raw bench_gpu /tmp/m8b --ctx 1 --long 512 --probe 512,1 > t.csv
    python3 bench/ncu_times.py t.csv
"""
import csv
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        lines = f.read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        tail = "\n".join(lines[-3:])
        sys.exit(f"{sys.argv[1]}: no ncu table (did ncu profile any launch?)\n{tail}")
    rows = list(csv.DictReader(lines[start:]))
    unit = rows[0].get("gpu__time_duration.sum", "")  # the units row
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3,
             "msecond": 1e3}.get(unit)
    if scale is None:
        sys.exit(f"{sys.argv[1]}: unknown duration unit {unit!r}")
    for r in rows[1:]:
        t = float(r["gpu__time_duration.sum"].replace(",", "")) * scale
        name = r["Kernel Name"].split("(")[0].removeprefix("void ")
        print(f"{r['ID']:>3} {name:24s} grid {r['Grid Size'].replace(' ', ''):14s} {t:9.1f} us")


if __name__ == "__main__":
    main()
