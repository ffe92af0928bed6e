#!/usr/bin/env python3
"""What libcoda.so exports and what it depends on (CTest abi.exports).

A shared library must load into any host process, one that already holds its own C++ and CUDA
runtimes (a Python that has imported PyTorch). So the library

  1. takes the C++ runtime from the shared library (libstdc++.so, or libc++.so with clang's
     runtime): it is among the NEEDED entries, and the library carries no private copy of it
     (it defines none of the runtime's own symbols, even locally);
  2. exports every coda_* function that include/coda/coda.h declares, and no other C symbol;
  3. exports C++ symbols only in namespace coda, none of them internal (detail namespaces, the
     kernels and their launchers, validation and test helpers), and no std::, CUTLASS or CuTe
     symbol (src/libcoda.map is the list).

Usage: check_exports.py LIBRARY CODA_H [--nm NM] [--readelf READELF]
Exit status 0 when every rule holds, 1 otherwise (each broken rule is printed).
"""
import argparse
import re
import subprocess
import sys

# Symbols that only the C++ runtime itself defines: finding one defined in libcoda.so (even as a
# local symbol) means a static copy of the runtime was linked in.
RUNTIME_OWN = {
    "__cxa_throw": "the C++ ABI runtime (exceptions)",
    "__cxa_begin_catch": "the C++ ABI runtime (exceptions)",
    "__gxx_personality_v0": "the C++ ABI runtime (unwinding)",
    "_ZNSo9_M_insertIlEERSoT_": "std::ostream::_M_insert<long> (libstdc++)",
    "_ZNSt8ios_base4InitC1Ev": "std::ios_base::Init (libstdc++)",
}
RUNTIME_LIBS = re.compile(r"^lib(stdc\+\+|c\+\+)\.so")

# Demangled prefixes of exportable C++ symbols, and what makes one internal even in namespace coda.
CXX_PREFIXES = ("coda::", "vtable for coda::", "typeinfo for coda::", "typeinfo name for coda::",
                "VTT for coda::", "guard variable for coda::")
INTERNAL = ("::detail::", "coda::sm90", "coda::gpu_host::", "coda::dev::", "coda::programs::",
            "coda::epi::", "(anonymous namespace)", "coda::ArgCheck", "coda::check_gemm_operands",
            "std::", "cute::", "cutlass::")


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if r.returncode != 0:
        sys.exit("abi.exports: `%s` failed: %s" % (" ".join(cmd), r.stderr.strip()))
    return r.stdout


def header_functions(path):
    """Names of the functions coda.h declares (comments and preprocessor lines removed)."""
    text = open(path).read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    return set(re.findall(r"\b(coda_[A-Za-z0-9_]*)\s*\(", text))


def defined_symbols(nm, lib, dynamic):
    """[(raw, demangled)] of the defined symbols of the dynamic (or full) symbol table."""
    base = [nm, "--defined-only", "--no-sort"] + (["-D"] if dynamic else [])
    raw = run(base + [lib]).splitlines()
    dem = run(base + ["-C", lib]).splitlines()
    if len(raw) != len(dem):
        sys.exit("abi.exports: nm listed %d raw and %d demangled symbols" % (len(raw), len(dem)))
    out = []
    for r, d in zip(raw, dem):
        r_parts, d_parts = r.split(None, 2), d.split(None, 2)
        if len(r_parts) == 3 and len(d_parts) == 3:
            out.append((r_parts[2], d_parts[2]))
    return out


def base_name(demangled):
    """The qualified name without its parameter list (the text before the top-level '(')."""
    depth = 0
    for i, ch in enumerate(demangled):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and not demangled.startswith("(anonymous", i):
            return demangled[:i]
    return demangled


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("library")
    ap.add_argument("header")
    ap.add_argument("--nm", default="nm")
    ap.add_argument("--readelf", default="readelf")
    args = ap.parse_args()
    problems = []

    # 1. The C++ runtime: dynamic, and no private copy.
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run([args.readelf, "-d", args.library]))
    print("NEEDED: " + ", ".join(needed))
    if not any(RUNTIME_LIBS.match(n) for n in needed):
        problems.append("no shared C++ runtime (libstdc++.so / libc++.so) among the NEEDED libraries: "
                        "the C++ runtime was linked statically (-static-libstdc++ in the flags, LDFLAGS "
                        "or the compiler's specs, or a toolchain without a shared libstdc++)")
    has_symtab = ".symtab" in run([args.readelf, "-S", "-W", args.library])
    everything = defined_symbols(args.nm, args.library, dynamic=not has_symtab)
    defined = {raw for raw, _ in everything}
    for sym, what in sorted(RUNTIME_OWN.items()):
        if sym in defined:
            problems.append("defines %s (%s): a static copy of the C++ runtime is inside the library" % (sym, what))
    if not has_symtab:
        print("note: the library is stripped; the runtime-copy check looked at the dynamic symbols only")

    # 2, 3. The exported (dynamic) symbols.
    declared = header_functions(args.header)
    exported = defined_symbols(args.nm, args.library, dynamic=True)
    exported_c = {raw for raw, _ in exported if not raw.startswith("_Z")}
    cxx = [(raw, dem) for raw, dem in exported if raw.startswith("_Z")]
    for name in sorted(declared - exported_c):
        problems.append("coda.h declares %s, the library does not export it" % name)
    for name in sorted(exported_c - declared):
        problems.append("exports the C symbol %s, which coda.h does not declare" % name)
    bad_cxx = []
    for raw, dem in cxx:
        name = base_name(dem)
        if not dem.startswith(CXX_PREFIXES) or any(m in name for m in INTERNAL):
            bad_cxx.append(dem)
    for dem in sorted(bad_cxx)[:40]:
        problems.append("exports the internal or foreign C++ symbol %s" % dem)
    if len(bad_cxx) > 40:
        problems.append("... and %d more internal or foreign C++ symbols" % (len(bad_cxx) - 40))

    std_count = sum(1 for _, dem in exported if base_name(dem).startswith(("std::", "__gnu_cxx::")))
    print("exported: %d symbols: %d C (coda.h declares %d), %d C++ (%d internal or foreign, %d std::)"
          % (len(exported), len(exported_c), len(declared), len(cxx), len(bad_cxx), std_count))
    if problems:
        print("\n".join("FAIL: " + p for p in problems))
        return 1
    print("abi.exports: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
