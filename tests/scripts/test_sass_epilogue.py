"""scripts/sass_epilogue.py on a synthetic disassembly (no GPU, no CUDA tools needed).

The listing imitates `nvdisasm -c -gi`: a kernel whose interior visit has 64 instructions in line,
a predicated EXIT in the middle, the last EXIT, then 0, 32 or 96 more of the visit out of line
(the copy ptxas emits for a warp that reaches a shuffle diverged). Run by ctest (`scripts`), or
directly: python3 tests/scripts/test_sass_epilogue.py
"""
import os
import random
import stat
import subprocess
import sys
import tempfile
import unittest

from script_module import ROOT, load, script_path

SCRIPT = script_path("sass_epilogue.py")


class SassEpilogueTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.se = load("sass_epilogue")
        cls.marks = cls.se.source_lines()

    def listing(self, in_line, out_of_line, kernel="sm90_gemm_kernel_X", pair=0):
        src = os.path.join(ROOT, self.se.KERNEL_SRC)
        m = self.marks
        frames = [m["program"][0], m["interior"][0], m["epi_bf16"][0]]  # innermost first
        block = "".join(f'\t//## File "{src}", line {l}\n' for l in frames)
        other = '\t//## File "/elsewhere/cutlass.h", line 1\n'  # not the epilogue
        out, addr = [f"\t.text.{kernel}:\n"], 0

        def insn(text, visit=True):
            nonlocal addr
            out.append((block if visit else other) + f"        /*{addr:04x}*/                   {text} ;\n")
            addr += 0x10

        ops = ["FMUL R1, R2, R3", "FADD R4, R5, R6", "MUFU.EX2 R7, R8"]
        for i in range(in_line):
            insn(ops[i % 3])
            if i == 0 and pair:  # RoPE's pair visit: prog(f, ctx0) / prog(f, ctx1) inside the epilogue
                for j in range(pair):
                    lines = [m["pair"][j % 2], m["epi_bf16"][0]]
                    out.append("".join(f'\t//## File "{src}", line {l}\n' for l in lines) +
                               f"        /*{addr:04x}*/                   {ops[j % 3]} ;\n")
                    addr += 0x10
            if i == in_line // 2:
                insn("@P0 EXIT", visit=False)
        insn("EXIT", visit=False)
        insn("BRA `(.L_x_1)", visit=False)
        for i in range(out_of_line):
            insn(ops[i % 3])
        return "".join(out)

    def test_parse_marks_what_follows_the_last_exit(self):
        rows = list(self.se.parse(self.listing(10, 4)))
        in_line = [r for r in rows if not r[3]]
        after = [r[1] for r in rows if r[3]]
        self.assertEqual(after[0], "BRA `(.L_x_1)")
        self.assertEqual(len(after), 5)
        self.assertTrue(all(i.startswith(("FMUL", "FADD", "MUFU")) for i in after[1:]))
        self.assertIn("EXIT", [r[1] for r in in_line])
        self.assertIn("@P0 EXIT", [r[1] for r in in_line])

    def test_a_kernel_without_exit_is_all_in_line(self):
        text = self.listing(6, 0).replace("@P0 EXIT", "NOP").replace("EXIT", "NOP")
        self.assertFalse(any(r[3] for r in self.se.parse(text)))

    def test_counts_leave_the_fallback_copy_out(self):
        in_line, out_of_line, pair = 64, random.choice([0, 32, 96]), random.choice([0, 64, 352])
        with tempfile.TemporaryDirectory() as d:
            listing = os.path.join(d, "k.sass")
            with open(listing, "w") as f:
                f.write(self.listing(in_line, out_of_line, pair=pair))
            tool = os.path.join(d, "fake_nvdisasm")
            with open(tool, "w") as f:
                f.write(f"#!/bin/sh\ncat '{listing}'\n")
            os.chmod(tool, os.stat(tool).st_mode | stat.S_IEXEC)
            cubin = os.path.join(d, "k.cubin")
            open(cubin, "w").close()
            res = subprocess.run([sys.executable, SCRIPT, cubin, "--nvdisasm", tool, "--group", "2",
                                  "--kernel", "sm90_gemm_kernel"], capture_output=True, text=True, check=True)
        row = [l for l in res.stdout.splitlines() if l.startswith("sm90_gemm_kernel_X")]
        self.assertEqual(len(row), 1, res.stdout)
        fields = row[0].split()
        self.assertEqual(fields[1], "bf16")
        per_pair, fallback, pair_visit = float(fields[2]), float(fields[-2]), float(fields[-1])
        self.assertAlmostEqual(per_pair, in_line / 32, places=1)  # 16 pairs x 2 visit copies
        self.assertAlmostEqual(fallback, out_of_line / 32, places=1)
        self.assertAlmostEqual(pair_visit, pair / 32, places=1)  # 16 slots x 2 chunks
        self.assertAlmostEqual(float(fields[4]), 0.0, places=1)  # the pair visit is not "the rest"


if __name__ == "__main__":
    unittest.main()
