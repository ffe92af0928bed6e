"""scripts/ab-rounds.sh and scripts/rounds_summary.py on a fake `coda` binary (no GPU needed).

The fake binary prints a header and two bench lines whose times scale with FAKE_FACTOR (and a
per-round jitter from a counter file), so the rounds, the medians and the per-round wins are known.
Run by ctest (`scripts`), or directly: python3 tests/scripts/test_ab_rounds.py
"""
import os
import random
import statistics
import stat
import subprocess
import tempfile
import unittest

from script_module import load, script_path

ROUNDS = script_path("ab-rounds.sh")
SUMMARY = script_path("rounds_summary.py")

FAKE = """#!/usr/bin/env bash
# a stand-in for build/bin/coda: `coda bench FILTERS`
n=$(cat "{counter}" 2>/dev/null || echo 0); echo $((n + 1)) > "{counter}"
f=${{FAKE_FACTOR:-1}}
echo "coda 0.1.0 bench on a fake GPU (commit test), seed 1"
awk -v f="$f" -v n="$n" 'BEGIN {{
  j = 1 + 0.01 * (n % 3);
  printf "op.case_a.1b   16384   2048   2048 %9.1f %9.1f 0.0 1 1 90.0 %.3f -\\n", 200 * f * j, 180, 200 * f * j / 180;
  printf "lmhead.case_b  16384 128256   2048 %9.1f %9.1f 0.0 1 1 80.0 %.3f -  a note\\n", 1000 * f * j, 900, 1000 * f * j / 900;
}}'
echo "fused operators (op.*): geomean 1.111 x cuBLAS (bar 1.04)"
"""


class RoundsSummaryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rs = load("rounds_summary")

    def test_medians_and_wins(self):
        rng = random.Random()
        base = [rng.uniform(900, 1100) for _ in range(5)]
        faster = [t * 0.9 for t in base]  # faster than the baseline in every round
        mixed = [t * (0.95 if i % 2 else 1.05) for i, t in enumerate(base)]  # faster in rounds 2, 4
        lines = []
        for r in range(5):
            for name, times in (("base", base), ("fast", faster), ("mixed", mixed)):
                lines.append(f"r{r + 1} {name}: op.x.1b  16384 2048 2048 {times[r]:.3f} 800.0 0.0 1 1 90 1.2 -\n")
        lines.append("a line that is not a bench line\n")
        result = self.rs.summarize(self.rs.parse(lines))
        entries = {e[0]: e for e in result["op.x.1b"]}
        self.assertEqual(list(entries), ["base", "fast", "mixed"])
        s, times, med, ratio, vs, wins, n = entries["base"]
        self.assertAlmostEqual(med, sorted(round(t, 3) for t in base)[2], places=3)
        self.assertIsNone(vs)
        s, times, med, ratio, vs, wins, n = entries["fast"]
        self.assertEqual((wins, n), (5, 5))
        self.assertAlmostEqual(vs, 0.9, places=3)
        self.assertAlmostEqual(ratio, statistics.median(t / 800.0 for t in faster), places=4)
        s, times, med, ratio, vs, wins, n = entries["mixed"]
        self.assertEqual((wins, n), (2, 5))
        text = self.rs.render(result)
        self.assertIn("faster in 5 of 5 rounds (every round)", text)
        self.assertIn("faster in 2 of 5 rounds", text)
        self.assertNotIn("faster in 2 of 5 rounds (every round)", text)

    def test_missing_rounds_are_not_counted(self):
        lines = [
            "r1 a: op.y  1 1 1 10.0 10.0\n",
            "r1 b: op.y  1 1 1 9.0 10.0\n",
            "r2 b: op.y  1 1 1 8.0 10.0\n",  # no baseline sample in round 2
        ]
        entries = {e[0]: e for e in self.rs.summarize(self.rs.parse(lines))["op.y"]}
        self.assertEqual(entries["b"][5:], (1, 1))

    def test_no_lines_is_an_error(self):
        with tempfile.NamedTemporaryFile("w", suffix=".log") as f:
            f.write("nothing here\n")
            f.flush()
            p = subprocess.run(["python3", SUMMARY, f.name], capture_output=True, text=True)
        self.assertEqual(p.returncode, 1)
        self.assertIn("no bench lines", p.stderr)


class AbRoundsScriptTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.bin = os.path.join(self.dir.name, "coda")
        with open(self.bin, "w") as f:
            f.write(FAKE.format(counter=os.path.join(self.dir.name, "n")))
        os.chmod(self.bin, os.stat(self.bin).st_mode | stat.S_IXUSR)

    def tearDown(self):
        self.dir.cleanup()

    def run_rounds(self, *args, out=None):
        env = dict(os.environ)
        env.pop("OUT", None)
        if out:
            env["OUT"] = out
        return subprocess.run(["bash", ROUNDS, *args], capture_output=True, text=True, env=env)

    def test_alternating_rounds_and_summary(self):
        out = os.path.join(self.dir.name, "out")
        p = self.run_rounds("3", f"base={self.bin}", f"fast=FAKE_FACTOR=0.8 {self.bin}", "--", "case", out=out)
        self.assertEqual(p.returncode, 0, p.stderr)
        bench = [l for l in p.stdout.splitlines() if l.startswith("r")]
        self.assertEqual(len(bench), 3 * 2 * 2)  # rounds x settings x cases
        # alternating, each round starting one setting later: r1 base fast, r2 fast base, r3 base fast
        order = [(l.split()[0], l.split()[1]) for l in bench[::2]]
        self.assertEqual(order, [("r1", "base:"), ("r1", "fast:"), ("r2", "fast:"), ("r2", "base:"),
                                 ("r3", "base:"), ("r3", "fast:")])
        self.assertIn("lmhead.case_b", p.stdout)
        self.assertEqual(p.stdout.count("faster in 3 of 3 rounds (every round)"), 2)
        with open(os.path.join(out, "rounds.log")) as f:
            self.assertEqual(len(f.read().splitlines()), 12)

    def test_bad_arguments(self):
        for args, msg in ((("0", f"a={self.bin}", "--", "x"), "ROUNDS"),
                          (("2", f"a={self.bin}", f"b={self.bin}"), "after --"),
                          (("2", "noequals", "--", "x"), "NAME=SETTING"),
                          (("1", "a=/nonexistent/coda", "--", "x"), "no coda binary")):
            p = self.run_rounds(*args)
            self.assertEqual(p.returncode, 2, args)
            self.assertIn(msg, p.stderr, args)


if __name__ == "__main__":
    unittest.main()
