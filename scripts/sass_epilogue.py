#!/usr/bin/env python3
"""SASS instructions per accumulator pair in coda's epilogue, from a compiled kernel.

    scripts/sass_epilogue.py FILE.cubin|FILE.o|libcoda.so [--nvdisasm PATH] [--kernel SUBSTR]

Disassembles with line information (nvdisasm -gi, or cuobjdump -sass for objects and libraries)
and attributes every instruction to its inlining stack. An instruction belongs to the program
visit if its stack passes through `prog(f, ctx)` in include/coda/kernel/sm90_gemm.cuh; the
visit is the interior one (`visit_chunk<false, kOff>`) or the edge one (`visit_chunk<true, kOff>`),
inside the epilogue instantiation chosen by the output dtype (`case kDtBF16: run_epi(...)` ...). One
chunk visit covers 16 pairs per thread; a tile inside M x N visits kGroup chunks per loop iteration
(sm90_gemm.cuh: the program's Resources::visit_chunks, else 2, or 1 for LSE programs), each with
its own copy of the interior visit, so
instructions / (16 copies) = SASS instructions per pair (--group, default 2).
Also reported: the chunk loop's instructions outside the visit (per-chunk overhead, / 16 too), and
RoPE's pair visit apart (`visit_chunk_pair`: `prog(f, ctx0)` and `prog(f, ctx1)`, 32 pairs per
thread per visit, so its instructions / 32 = SASS per pair there; 0 in kernels without it).
Instructions placed after a kernel's last EXIT are out-of-line blocks: where the visit has warp
shuffles (a direct output's quad exchange), ptxas emits a copy of the surrounding code for a warp
that reaches the shuffle diverged (the BRA.DIV targets), which a converged warp never executes.
They are left out of the counts and reported apart (`fallback/pair`): counted in, they doubled the
SwiGLU backward's figure (bench/NOTES.md 2026-12-05).
Build with -lineinfo (the default build does). The compiler may share code between the interior
and the edge visit and attribute it to either; for unambiguous counts compile the kernel with
-DCODA_SASS_INTERIOR_ONLY (one visit per chunk, for measurement only). The interior visit is compiled
once per combination of the program's switch bits (Program::flags); -DCODA_SASS_FLAGS=MASK keeps the
combination MASK only, so the count is that of one visit. E.g. one kernel:

    printf '#include "fused_instances.hpp"\nnamespace coda::sm90 {\nCODA_GEMM_INSTANTIATE(cutlass::bfloat16_t, true, true, 2, ::coda::programs::Rope)\n}\n' > k.cu
    nvcc -Iinclude -Isrc/gpu -I$CUTLASS/include -I$CUTLASS/tools/util/include -std=c++17 -O3 \
      -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo \
      -DCODA_SASS_INTERIOR_ONLY -DCODA_SASS_FLAGS=1 -cubin -o k.cubin k.cu
    scripts/sass_epilogue.py k.cubin            # nvdisasm: pip package nvidia-cuda-nvdisasm
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNEL_SRC = "include/coda/kernel/sm90_gemm.cuh"


def source_lines():
    with open(os.path.join(ROOT, KERNEL_SRC)) as f:
        lines = f.read().split("\n")
    find = lambda pat: [i + 1 for i, l in enumerate(lines) if pat in l]
    out = {
        "program": find("prog(f, ctx);"),
        "pair": find("prog(f, ctx0);") + find("prog(f, ctx1);"),
        "interior": find("visit_chunk<false, kOff>(p, "),
        "edge": find("visit_chunk<true, kOff>(p, "),
        "epi_bf16": find("epilogue<kDtBF16, TileDt>("),
        "epi_fp16": find("epilogue<kDtFP16, TileDt>("),
        "epi_fp32": find("epilogue<kDtFP32, TileDt>("),
        "epilogue_def": find("CUTE_DEVICE static void epilogue("),
        "tile_fp16": find("dispatch_epilogue<kDtFP16>("),
    }
    for k in ("program", "interior", "edge"):
        if len(out[k]) != 1:
            sys.exit(f"sass_epilogue: expected one '{k}' marker in {KERNEL_SRC}, found {out[k]}")
    return out


def disassemble(path, tool):
    if path.endswith(".cubin"):
        exe = tool or shutil.which("nvdisasm")
        if not exe:
            sys.exit("sass_epilogue: nvdisasm not found (pass --nvdisasm, or pip download nvidia-cuda-nvdisasm)")
        return subprocess.run([exe, "-c", "-gi", path], check=True, capture_output=True, text=True).stdout
    exe = tool or shutil.which("cuobjdump")
    if not exe:
        sys.exit("sass_epilogue: cuobjdump not found")
    return subprocess.run([exe, "-sass", "-gi", path], check=True, capture_output=True, text=True).stdout


FUNC = re.compile(r"^\s*(?:\.text\.|Function : )(\S+?):?\s*$")
INSN = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?);")
EXIT = re.compile(r"(@!?U?P[T0-9] )?EXIT\b")
LINE = re.compile(r'//## File "([^"]+)", line (\d+)(?: inlined at "([^"]+)", line (\d+))?')


def parse(text):
    """Yield (function, instruction text, [(file, line), ...] innermost first, out_of_line).

    A block of '//## File' lines precedes the instructions it describes (innermost frame first);
    the next instruction keeps the last block until a new block starts. out_of_line: the
    instruction lies after the function's last EXIT (see the module's docstring)."""
    rows, last_exit = [], {}
    func, stack, in_block = None, [], False
    for raw in text.split("\n"):
        m = FUNC.match(raw)
        if m:
            func, stack, in_block = m.group(1), [], False
            continue
        m = LINE.search(raw)
        if m:
            if not in_block:
                stack, in_block = [], True
            stack.append((m.group(1), int(m.group(2))))
            continue
        m = INSN.match(raw)
        if m and func:
            in_block = False
            addr, insn = int(m.group(1), 16), m.group(2).strip()
            if EXIT.match(insn):
                last_exit[func] = max(addr, last_exit.get(func, -1))
            rows.append((func, addr, insn, stack))
    for func, addr, insn, stack in rows:
        yield func, insn, stack, addr > last_exit.get(func, addr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--nvdisasm", help="path of nvdisasm / cuobjdump")
    ap.add_argument("--kernel", default="sm90_gemm_kernel", help="substring of the kernels to report")
    ap.add_argument("--group", type=int, default=2, help="interior visit copies per chunk loop (kGroup)")
    ap.add_argument("--dump", metavar="OUT", help="print the interior visit of the kernels with this output dtype")
    args = ap.parse_args()
    marks = source_lines()
    text = disassemble(args.file, args.nvdisasm)
    counts = collections.defaultdict(lambda: collections.Counter())
    ops = collections.defaultdict(collections.Counter)
    for func, insn, frames, out_of_line in parse(text):
        if args.kernel not in func:
            continue
        here = {(os.path.relpath(f, ROOT) if f.startswith("/") else f, l) for f, l in frames}
        def has(key):
            return any((KERNEL_SRC, l) in here for l in marks[key])
        dt = "bf16" if has("epi_bf16") else "fp16" if has("epi_fp16") else "fp32" if has("epi_fp32") else "?"
        if dt != "?" and has("tile_fp16"):
            dt += "/t16"
        if out_of_line:  # not executed by a converged warp: the interior visit's copies reported apart
            if (has("program") and has("interior")) or has("pair"):
                counts[(func, dt)]["fallback"] += 1
            continue
        if has("pair"):
            counts[(func, dt)]["pair"] += 1
        elif has("program"):
            kind = "interior" if has("interior") else "edge" if has("edge") else "?"
            counts[(func, dt)][kind] += 1
            if args.dump == dt and kind == "interior":
                print(insn, "   //", " <- ".join(f"{os.path.basename(f)}:{l}" for f, l in frames[:3]))
            if kind == "interior":
                ops[(func, dt)][insn.split()[0].lstrip("@!P0123456789T ").split(".")[0] if not insn.startswith("@") else insn.split()[1].split(".")[0]] += 1
        elif any(f == KERNEL_SRC and any(l >= d for d in marks["epilogue_def"]) for f, l in here) and dt != "?":
            counts[(func, dt)]["chunk"] += 1
    if not counts:
        sys.exit("sass_epilogue: no epilogue instructions found (built without -lineinfo?)")
    print(f"{'kernel':<90} {'out':>9} {'/pair':>6} {'edge/pair':>9} {'epilogue rest/pair':>18} {'fallback/pair':>13}"
          f" {'pair visit/pair':>15}")
    for (func, dt), c in sorted(counts.items()):
        short = func if len(func) <= 90 else func[:87] + "..."
        per = 16 * args.group
        print(f"{short:<90} {dt:>9} {c['interior'] / per:6.1f} {c['edge'] / 16:9.1f} {c['chunk'] / per:18.1f}"
              f" {c['fallback'] / per:13.1f} {c['pair'] / 32:15.1f}")
        top = ", ".join(f"{k} {v / per:.1f}" for k, v in ops[(func, dt)].most_common(12))
        print(f"    interior per pair: {top}")


if __name__ == "__main__":
    main()
