#!/usr/bin/env python3
"""Sustained-load probe: SM clock, power and time per launch of a fused operator against the plain
GEMM of the same shape (coda's and cuBLAS's), each run back to back for a few seconds while
nvidia-smi samples the GPU. Answers whether a fused epilogue slows the GEMM through the clock
(power draw) rather than through the kernel's own schedule (bench/NOTES.md).

  CODA_LIBRARY=build/lib/libcoda.so PYTHONPATH=python python3 scripts/clock_probe.py [--seconds 3]
      [--graph | --flush] [--cases SUBSTR[,SUBSTR...]]

"host us" is the host's time per call (Python, the op's dispatch and the C ABI call); where it is
above "us/launch" the GPU waits for the host and the ratio measures the wrapper, not the kernel.
--graph replays each group of ten calls from a captured CUDA graph (no per-call host work).
--flush writes 256 MiB before every call and times each call alone with CUDA events, as
`coda bench` does: the same kernels measured both ways tell what back-to-back launches cost.
CODA_DEBUG_EPILOGUE (launch_host.hpp) applies to the fused calls here too (e.g. 16: no output
stores), which splits a gap between the epilogue's parts.
"""

import argparse
import subprocess
import time

import torch

import coda


def sample(fn, seconds, graph, flush):
    smi = subprocess.Popen(
        ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,clocks_event_reasons.active",
         "--format=csv,noheader,nounits", "-lms", "25"],
        stdout=subprocess.PIPE, text=True)
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    step = lambda: [fn() for _ in range(10)]
    timed = []  # --flush: (start, stop) events around each call
    if flush is not None:
        def step():
            for _ in range(10):
                flush.zero_()
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                fn()
                e1.record()
                timed.append((e0, e1))
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        step = g.replay
    host = 0.0
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    n = 0
    t0 = time.time()
    start.record()
    while time.time() - t0 < seconds:
        h0 = time.perf_counter()
        step()
        host += time.perf_counter() - h0
        n += 10
        torch.cuda.synchronize()  # keeps the host from queueing far ahead of the samples
    stop.record()
    torch.cuda.synchronize()
    smi.terminate()
    out, _ = smi.communicate()
    rows = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            rows.append((float(parts[0]), float(parts[1]), parts[2]))
        except (ValueError, IndexError):
            pass
    rows = rows[len(rows) // 5:]  # the first fifth: ramp
    clocks = sorted(r[0] for r in rows)
    power = sorted(r[1] for r in rows)
    reasons = sorted({r[2] for r in rows})
    med = lambda v: v[len(v) // 2] if v else float("nan")
    gpu_ms = sum(a.elapsed_time(b) for a, b in timed) if timed else start.elapsed_time(stop)
    return gpu_ms * 1e3 / n, med(clocks), med(power), reasons, host * 1e6 / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--graph", action="store_true", help="replay the calls from CUDA graphs")
    ap.add_argument("--flush", action="store_true", help="flush L2 before each call, time each call alone")
    ap.add_argument("--cases", default="", help="comma-separated substrings of the case names to run")
    args = ap.parse_args()
    if args.graph and args.flush:
        ap.error("--graph and --flush do not combine")
    keep = [c for c in args.cases.split(",") if c]
    want = lambda name: not keep or any(k in name for k in keep)
    torch.manual_seed(0)
    dev = "cuda"
    bf = torch.bfloat16
    cases = []

    def add_case(name, m, n, k, fused):
        """The fused operator on A [m, k], B [n, k] beside coda's plain GEMM and cuBLAS's."""
        a = torch.randn(m, k, device=dev, dtype=bf)
        b = torch.randn(n, k, device=dev, dtype=bf) * k ** -0.5
        cases.append((name, "fused", fused(a, b)))
        cases.append((name, "coda gemm", lambda: coda.gemm(a, b)))
        cases.append((name, "cublas", lambda: a @ b.t()))

    def row_scale(m):
        return torch.rand(m, device=dev, dtype=torch.float32) + 0.5

    def add_residual(name, m, n, k):
        res = torch.randn(m, n, device=dev, dtype=bf)
        w = torch.randn(n, device=dev, dtype=bf)
        add_case(name, m, n, k, lambda a, b: lambda: coda.gemm_residual_rmsnorm_partial(a, b, w, res))

    def add_swiglu(name, m, n, k):
        r = row_scale(m)
        add_case(name, m, n, k, lambda a, b: lambda: coda.gemm_rmsnorm_swiglu(a, b, r, save_z=True))

    def add_rope(name, m, k, heads):
        hq, hkv, hd = heads
        r = row_scale(m)
        pos = (torch.arange(m, device=dev, dtype=torch.int32) % 8192).contiguous()
        freqs = coda.rope_frequencies(hd, device=dev)
        add_case(name, m, (hq + 2 * hkv) * hd, k,
                 lambda a, b: lambda: coda.gemm_rmsnorm_rope(a, b, r, pos, freqs, heads))

    for add, name, *shape in [(add_residual, "residual 1b.oproj", 16384, 2048, 2048),
                              (add_rope, "rope 1b.qkv", 16384, 2048, (32, 8, 64)),
                              (add_rope, "rope 8b.qkv", 8192, 4096, (32, 8, 128)),
                              (add_residual, "residual 8b.oproj", 8192, 4096, 4096),
                              (add_swiglu, "swiglu 1b.gateup", 16384, 16384, 2048)]:
        if want(name):  # only the cases asked for get tensors
            add(name, *shape)
    if not cases:
        ap.error(f"--cases {args.cases!r} matches no case")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev) if args.flush else None
    print(f"{'case':<22} {'kernel':<10} {'us/launch':>10} {'host us':>8} {'SM MHz':>8} {'W':>7}  x cuBLAS  throttle reasons")
    for _, _, fn in cases:  # a first pass brings the GPU to its sustained (power-capped) state
        sample(fn, args.seconds, args.graph, flush)
    rows = [(name, kind, *sample(fn, args.seconds, args.graph, flush)) for name, kind, fn in cases]
    base = {name: us for name, kind, us, *_ in rows if kind == "cublas"}  # this pass's cuBLAS
    for name, kind, us, mhz, w, reasons, host in rows:
        print(f"{name:<22} {kind:<10} {us:10.1f} {host:8.1f} {mhz:8.0f} {w:7.1f}  {us / base[name]:7.3f}  {' '.join(reasons)}")


if __name__ == "__main__":
    main()
