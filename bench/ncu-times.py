#!/usr/bin/env python3
"""Every kernel's time in a run, side by side across runs, from ncu's durations:

    ncu --clock-control none --metrics gpu__time_duration.sum --launch-count N --csv \\
        --print-units base PROGRAM ... > RUN.csv
    bench/ncu-times.py [--launches] A.csv B.csv ...

prints, per kernel name (template arguments kept, parameters dropped), the
summed microseconds and launch count of each run and each run's difference
from the first, largest difference first.  --launches instead prints launch
by launch (the first 40 of the first run, with each run's time beside it),
which places a difference at one GEMM of a layer.  ncu's rows are the lines
that start with a quote: a profiled program's own output (llmq-run --bench
prints a table and JSON) is mixed into the same stream and skipped.
Round 13 (docs/perf/13) found issue 14's qwen2 gap with it.
"""
import collections
import csv
import sys


def launches(path):
    """[(kernel, grid, microseconds)] in launch order."""
    with open(path, newline="") as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    if not rows or "Kernel Name" not in rows[0]:
        sys.exit(f"{path}: no ncu CSV rows (run ncu with --csv --print-units base)")
    head = rows[0]
    name, grid, value = head.index("Kernel Name"), head.index("Grid Size"), head.index("Metric Value")
    out = []
    for r in rows[1:]:
        if len(r) <= value:
            continue
        out.append((r[name].split("(")[0].strip(), r[grid], float(r[value].replace(",", "")) / 1e3))
    return out


def by_kernel(runs, names):
    totals = [collections.defaultdict(float) for _ in runs]
    counts = [collections.Counter() for _ in runs]
    for t, c, run in zip(totals, counts, runs):
        for kernel, _, us in run:
            t[kernel] += us
            c[kernel] += 1
    kernels = set().union(*totals)
    first = totals[0]
    order = sorted(kernels, key=lambda k: -max(abs(t[k] - first[k]) for t in totals))
    print("| kernel | " + " | ".join(f"{n} us (launches)" for n in names) + " | " +
          " | ".join(f"{n} - {names[0]}" for n in names[1:]) + " |")
    print("| --- " * (2 * len(runs)) + "|")
    for k in order:
        cells = [f"{t[k]:.1f} ({c[k]})" for t, c in zip(totals, counts)]
        diffs = [f"{t[k] - first[k]:+.1f}" for t in totals[1:]]
        print(f"| `{k}` | " + " | ".join(cells + diffs) + " |")
    sums = [sum(t.values()) for t in totals]
    print("| total | " + " | ".join(f"{s:.1f}" for s in sums) + " | " +
          " | ".join(f"{s - sums[0]:+.1f} ({100 * (s - sums[0]) / sums[0]:+.2f}%)" for s in sums[1:]) +
          " |")


def by_launch(runs, names, n=40):
    print("| # | kernel | grid | " + " | ".join(f"{x} us" for x in names) + " |")
    print("| --- " * (3 + len(runs)) + "|")
    for i, (kernel, grid, _) in enumerate(runs[0][:n]):
        cells = [f"{r[i][2]:.1f}" if i < len(r) and r[i][0] == kernel else "-" for r in runs]
        print(f"| {i} | `{kernel}` | {grid} | " + " | ".join(cells) + " |")


def main():
    args = sys.argv[1:]
    per_launch = "--launches" in args
    paths = [a for a in args if a != "--launches"]
    if not paths:
        sys.exit(__doc__)
    runs = [launches(p) for p in paths]
    names = [p.rsplit("/", 1)[-1].removesuffix(".csv") for p in paths]
    (by_launch if per_launch else by_kernel)(runs, names)


if __name__ == "__main__":
    main()
