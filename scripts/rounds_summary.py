#!/usr/bin/env python3
"""Medians of alternating `coda bench` rounds (scripts/ab-rounds.sh writes the log).

    python3 scripts/rounds_summary.py ROUNDS.log

A log line is "r<round> <setting>: <bench line>", the bench line starting
"<case> <M> <N> <K> <time us> <cuBLAS us>". Per case and setting it prints the samples, the median
time, the median of the per-sample x cuBLAS ratios, the median time against the first setting's
(the baseline: the first setting seen in the log), and how many rounds the setting beat the
baseline in (both ran in that round). A setting that wins every round says so with "every round":
the test that one-sample comparisons on a noisy device fail (bench/NOTES.md, 2026-12-06).
"""
import re
import statistics
import sys

LINE = re.compile(r"^r(\d+) (\S+): (\S+)\s+\d+\s+\d+\s+\d+\s+([0-9.]+)\s+([0-9.]+)")


def parse(lines):
    """[(round, setting, case, time_us, cublas_us)] of the lines that match, in order."""
    out = []
    for line in lines:
        m = LINE.match(line)
        if m:
            out.append((int(m.group(1)), m.group(2), m.group(3), float(m.group(4)), float(m.group(5))))
    return out


def summarize(rows):
    """{case: [(setting, samples, median_us, median_x_cublas, vs_base, wins, rounds_compared)]}, the
    settings in first-seen order; vs_base is None for the baseline and where it has no samples."""
    settings, cases = [], []
    data = {}
    for rnd, setting, case, t, cub in rows:
        if setting not in settings:
            settings.append(setting)
        if case not in cases:
            cases.append(case)
        data.setdefault((case, setting), {})[rnd] = (t, cub)
    base = settings[0] if settings else None
    result = {}
    for case in cases:
        b = data.get((case, base), {})
        b_med = statistics.median(t for t, _ in b.values()) if b else None
        entries = []
        for s in settings:
            d = data.get((case, s))
            if not d:
                continue
            times = [d[r][0] for r in sorted(d)]
            med = statistics.median(times)
            ratios = [t / c for t, c in d.values() if c > 0]
            ratio = statistics.median(ratios) if ratios else None
            common = [r for r in d if r in b]
            wins = sum(1 for r in common if d[r][0] < b[r][0])
            vs = None if s == base or b_med is None else med / b_med
            entries.append((s, times, med, ratio, vs, wins, len(common)))
        result[case] = entries
    return result


def render(result):
    out = []
    for case, entries in result.items():
        out.append(case)
        for s, times, med, ratio, vs, wins, n in entries:
            samples = " / ".join(f"{t:.1f}" for t in times)
            text = f"  {s:<12} {med:10.1f} us"
            text += f"  x{ratio:.3f} cuBLAS" if ratio is not None else "  x -- cuBLAS"
            if vs is None:
                text += "  (baseline)"
            else:
                text += f"  {vs:.3f} of the baseline, faster in {wins} of {n} rounds"
                if n > 0 and wins == n:
                    text += " (every round)"
                elif n > 0 and wins == 0:
                    text += " (slower every round)"
            out.append(f"{text}   [{samples}]")
    return "\n".join(out)


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        rows = parse(f)
    if not rows:
        print(f"rounds_summary: no bench lines in {argv[1]}", file=sys.stderr)
        return 1
    print(render(summarize(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
