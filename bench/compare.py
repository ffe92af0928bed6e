#!/usr/bin/env python3
"""coda's ratio next to torch.compile's: reads `coda bench --json` and `bench/peers.py --json` output.

    python3 bench/compare.py BENCH.json PEERS.json [--us]

One row per case: coda x cuBLAS (coda record op.<case>, block.<m>.fwd, block.<m>.fwdbwd,
lmhead.loss_fwd or lmhead.fwdbwd), torch.compile x cuBLAS and eager x cuBLAS (peer.compile.<case>,
peer.eager.<case>), and coda / compile (the ratio of the two ratios: below 1, coda is faster). Each
ratio is against the plain cuBLAS GEMM(s) of the same shape measured in the same process as the time
it divides, so the two processes' cuBLAS need not agree. Missing records print as "-"; a missing
file is reported and read as empty. The last line counts the cases where coda is faster.
"""

import argparse
import json
import sys

# coda records that have a peer form (op.* are all of them)
CODA_PREFIXES = ("op.", "block.")
CODA_NAMES = ("lmhead.loss_fwd", "lmhead.fwdbwd")


def load(path, what):
    try:
        with open(path) as fh:
            d = json.load(fh)
    except (OSError, ValueError) as e:
        print("compare: cannot read %s JSON %s (%s); its columns stay empty" % (what, path, e))
        return None
    if not isinstance(d, dict) or not isinstance(d.get("records"), list):
        print("compare: %s has no records list; its columns stay empty" % path)
        return None
    return d


def ratio(rec):
    """vs_cublas of a record, or None (missing, null, failed)."""
    if not rec or rec.get("error"):
        return None
    v = rec.get("vs_cublas")
    if isinstance(v, (int, float)) and v > 0:
        return float(v)
    t, c = rec.get("time_us"), rec.get("cublas_us", rec.get("gemm_us"))
    if isinstance(t, (int, float)) and isinstance(c, (int, float)) and t > 0 and c > 0:
        return float(t) / float(c)
    return None


def case_of_coda(name):
    if name.startswith("op."):
        return name[3:]
    if name.startswith(CODA_PREFIXES) or name in CODA_NAMES:
        return name
    return None


def main(argv=None):
    ap = argparse.ArgumentParser(description="coda x cuBLAS next to torch.compile x cuBLAS (docs/peers.md)")
    ap.add_argument("bench", help="coda bench --json output")
    ap.add_argument("peers", help="bench/peers.py --json output")
    ap.add_argument("--us", action="store_true", help="also print the times (us)")
    args = ap.parse_args(argv)
    coda, peers = load(args.bench, "coda bench"), load(args.peers, "peers")
    if coda is None and peers is None:
        return 2

    cases, coda_rec, peer_rec = [], {}, {}
    for r in (coda or {}).get("records", []):
        c = case_of_coda(str(r.get("name", "")))
        if c is not None:
            coda_rec[c] = r
            if c not in cases:
                cases.append(c)
    for r in (peers or {}).get("records", []):
        name = str(r.get("name", ""))
        for eng in ("compile", "eager"):
            pre = "peer.%s." % eng
            if name.startswith(pre):
                c = name[len(pre):]
                peer_rec[(eng, c)] = r
                if c not in cases:
                    cases.append(c)

    def who(d):
        if not d:
            return "-"
        s = "%s on %s" % (d.get("commit", "?"), d.get("gpu", "?"))
        return s + (", torch %s" % d["torch"] if "torch" in d else "")
    print("coda %s  |  peers: %s" % (who(coda), who(peers)))
    if coda and peers and coda.get("gpu") != peers.get("gpu"):
        print("note: different GPUs (%s / %s): the ratios are each against their own cuBLAS" %
              (coda.get("gpu"), peers.get("gpu")))
    if peers and peers.get("small"):
        print("note: the peers ran with --small (tiny shapes): not comparable with coda's shapes")

    fmt = lambda v: "%.3f" % v if v is not None else "-"
    us = lambda rec: "%.1f" % rec["time_us"] if rec and isinstance(rec.get("time_us"), (int, float)) else "-"
    head = ["case", "coda x cuBLAS", "torch.compile x cuBLAS", "eager x cuBLAS", "coda / compile", "faster"]
    if args.us:
        head += ["coda us", "compile us", "eager us"]
    rows, notes, wins, both = [], [], 0, 0
    for c in cases:
        rc, rp, re_ = ratio(coda_rec.get(c)), ratio(peer_rec.get(("compile", c))), ratio(peer_rec.get(("eager", c)))
        rel, faster = None, "-"
        if rc is not None and rp is not None:
            both += 1
            rel = rc / rp
            faster = "coda" if rel < 1.0 else "compile" if rel > 1.0 else "tie"
            wins += rel < 1.0
        row = [c, fmt(rc), fmt(rp), fmt(re_), fmt(rel), faster]
        if args.us:
            row += [us(coda_rec.get(c)), us(peer_rec.get(("compile", c))), us(peer_rec.get(("eager", c)))]
        for eng in ("compile", "eager"):
            err = (peer_rec.get((eng, c)) or {}).get("error")
            if err:
                notes.append("%s: %s failed: %s" % (c, "torch.compile" if eng == "compile" else eng, err))
        rows.append(row)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    line = lambda cells: "  ".join((cells[0].ljust(widths[0]),) +
                                   tuple(x.rjust(w) for x, w in zip(cells[1:], widths[1:]))).rstrip()
    print(line(head))
    for r in rows:
        print(line(r))
    for n in notes:
        print(n)
    print("coda faster than torch.compile (x cuBLAS) in %d of %d cases measured by both (%d cases in all)" %
          (wins, both, len(cases)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
