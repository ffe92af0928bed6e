#!/usr/bin/env python3
"""Summarize an ncu source-view CSV (scripts/ncu-source.sh): where a kernel's warps spend time.

    scripts/ncu_source_summary.py FILE.csv[.gz] [--bucket N] [--top N] [--range A:B ...]

Prints the stall samples and executed warp instructions per bucket of N consecutive SASS
instructions (the epilogue, mainloop, producer and set-up code sit in separate address ranges),
then the top instructions by samples, and for each --range A:B (instruction indices) its totals:
samples, warp instructions per tile per warp (with --tiles and --warps), cycles per issued
instruction (samples / 'selected' samples) and the leading stall reasons.
"""
import argparse
import collections
import csv
import gzip


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    hdr = rows[1]
    return hdr, rows[2:]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--bucket", type=int, default=250)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--range", action="append", default=[], help="A:B instruction indices (repeatable)")
    ap.add_argument("--tiles", type=int, default=0, help="tiles of the launch (per-tile counts)")
    ap.add_argument("--warps", type=int, default=4, help="warps that execute a tile's epilogue")
    a = ap.parse_args()
    hdr, data = load(a.csv)
    ix = {h: i for i, h in enumerate(hdr)}

    def num(r, k):
        try:
            return float(r[ix[k]].replace(",", ""))
        except (KeyError, ValueError):
            return 0.0

    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    S, E = "Warp Stall Sampling (All Samples)", "Instructions Executed"

    def summary(seg):
        agg = collections.Counter()
        for r in seg:
            for st in stalls:
                agg[st[6:]] += num(r, st)
        return sum(num(r, S) for r in seg), sum(num(r, E) for r in seg), agg

    total, _, agg = summary(data)
    print(f"{len(data)} SASS instructions, {int(total)} samples;",
          " ".join(f"{k}={int(v)}" for k, v in agg.most_common(8)))
    print(f"\nper bucket of {a.bucket} instructions (empty buckets omitted)")
    for b in range(0, len(data), a.bucket):
        s, ex, agg = summary(data[b:b + a.bucket])
        if s or ex:
            print(f"{b:6d}-{min(b + a.bucket, len(data)) - 1:6d} samples {int(s):7d} exec {int(ex):10d}  " +
                  " ".join(f"{k}={int(v)}" for k, v in agg.most_common(4)))
    print(f"\ntop {a.top} instructions by samples")
    order = sorted(range(len(data)), key=lambda i: -num(data[i], S))[:a.top]
    for i in sorted(order):
        r = data[i]
        st = sorted(((num(r, s), s[6:]) for s in stalls), reverse=True)[:2]
        print(f"{i:6d} {int(num(r, S)):6d} exec {int(num(r, E)):9d}  {r[1][:64]:64s} " +
              " ".join(f"{n}={int(v)}" for v, n in st))
    for spec in a.range:
        lo, hi = (int(x) for x in spec.split(":"))
        s, ex, agg = summary(data[lo:hi])
        per = f" {ex / a.tiles / a.warps:8.0f} warp-instr/tile/warp" if a.tiles else ""
        print(f"range {lo}:{hi} samples {int(s)}{per} cycles/issue {s / max(agg['selected'], 1):.2f}  " +
              " ".join(f"{k}={int(v)}" for k, v in agg.most_common(6)))


if __name__ == "__main__":
    main()
