#!/usr/bin/env python3
"""Where a kernel's warps stall, from an ncu source page:

    ncu ... -o REPORT ...; ncu --import REPORT.ncu-rep --page source --csv --print-source sass > K.csv
    bench/ncu-stalls.py K.csv [N]

prints the stall reasons' share of all warp samples, the N (default 25)
SASS instructions with the most samples and their two main reasons, and the
instructions with the most excessive shared-memory wavefronts (bank
conflicts).  The round logs in docs/perf/ quote it.

ncu prints template arguments with their types, so a kernel filter with
--kernel-name-base demangled is written as ncu spells the name, e.g.
-k "regex:mmv_kernel<.int.12, .bool.1>" for mmv_kernel<QUANT_Q4_K, true>
(a filter that matches nothing profiles nothing and says so only at the
end: "No kernels were profiled").  The report needs --import-source yes
and --section SourceCounters for the source page.
"""
import csv
import sys


def number(row, col):
    try:
        return float(row[col])
    except (ValueError, IndexError):
        return 0.0


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    try:
        with open(sys.argv[1], newline="") as f:
            rows = list(csv.reader(f))
        top_n = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    except (OSError, ValueError) as e:
        sys.exit(f"ncu-stalls.py: {e}")
    start = next((i for i, r in enumerate(rows) if r and r[0] == "Address"), None)
    if start is None:
        sys.exit(f"ncu-stalls.py: {sys.argv[1]}: no 'Address' header row: not an ncu source page "
                 "(--page source --csv)")
    header, body = rows[start], rows[start + 1:]
    col = {h: i for i, h in enumerate(header)}
    if "Warp Stall Sampling (All Samples)" not in col:
        sys.exit(f"ncu-stalls.py: {sys.argv[1]}: no warp stall samples (profile with "
                 "--section WarpStateStats --section SourceCounters, or --set full)")
    samples = col["Warp Stall Sampling (All Samples)"]
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    total = sum(number(r, samples) for r in body) or 1.0
    print(f"{sys.argv[1]}: {len(body)} instructions, {total:.0f} warp samples\n")
    print("| stall reason | samples | share |\n| --- | --- | --- |")
    sums = {h: sum(number(r, col[h]) for r in body) for h in reasons}
    for h, v in sorted(sums.items(), key=lambda x: -x[1])[:10]:
        print(f"| {h} | {v:.0f} | {100 * v / total:.1f}% |")
    print("\n| address | samples | instruction | main reasons |\n| --- | --- | --- | --- |")
    for r in sorted(body, key=lambda r: -number(r, samples))[:top_n]:
        why = sorted(((h, number(r, col[h])) for h in reasons), key=lambda x: -x[1])[:2]
        print(f"| {r[col['Address']][-5:]} | {number(r, samples):.0f} | `{r[col['Source']].strip()}` | "
              + ", ".join(f"{h[6:]} {v:.0f}" for h, v in why) + " |")
    excess = col.get("L1 Wavefronts Shared Excessive")
    if excess is not None:
        print("\n| address | instruction | shared wavefronts | ideal |\n| --- | --- | --- | --- |")
        for r in sorted(body, key=lambda r: -number(r, excess))[:8]:
            if number(r, excess) > 0:
                print(f"| {r[col['Address']][-5:]} | `{r[col['Source']].strip()}` | "
                      f"{number(r, col['L1 Wavefronts Shared']):.0f} | "
                      f"{number(r, col['L1 Wavefronts Shared Ideal']):.0f} |")


if __name__ == "__main__":
    main()
