#!/usr/bin/env python3
"""libcoda.so inside a host process that holds its own C++ runtime (CTests abi.torch, abi.ctypes).

--host torch   imports torch first (its libstdc++, CUDA runtime and the rest, loaded the way
               PyTorch loads them), then loads libcoda.so with ctypes; exits 77 (CTest: skipped)
               with a message when torch is not installed.
--host plain   no torch: loads the C++ runtime into the global namespace first, as torch does
               (libtorch_global_deps), then libcoda.so.

Then it calls every function coda.h declares (parsed from the header, so a new entry point is
called too):
  1. each with null pointers, zero sizes and the legacy stream;
  2. each with every tensor argument one small host tensor (deeper validation);
  3. coda_gemm with operands whose shapes disagree: the error message is formatted by
     coda::TensorView::describe (std::ostringstream), the call that crashed in issue 10;
  4. a small coda_gemm that can run: on the GPU (torch CUDA tensors, current stream) when
     coda_device_check says this is a Hopper GPU, compared with torch; on host memory otherwise
     (the CPU emulator behind the C ABI; NOT_SUPPORTED with a message is accepted where this
     build has none).
Every status must be a coda_status_t; every failure must come with a message (coda_last_error).
A crash fails the test. Exit 0 when all holds, 1 otherwise.

Usage: load_in_host.py LIBCODA CODA_H --host torch|plain
"""
import argparse
import ctypes
import ctypes.util
import os
import re
import struct
import sys

SKIP = 77
STATUS = {0: "CODA_SUCCESS", 1: "CODA_ERROR_INVALID_ARGUMENT", 2: "CODA_ERROR_NOT_SUPPORTED",
          3: "CODA_ERROR_CUDA", 4: "CODA_ERROR_INTERNAL"}
BF16, FP16, FP32, INT32 = 0, 1, 2, 3
MAX_RANK = 4


class Tensor(ctypes.Structure):  # coda_tensor_t
    _fields_ = [("data", ctypes.c_void_p), ("rank", ctypes.c_int32), ("dtype", ctypes.c_int),
                ("sizes", ctypes.c_int64 * MAX_RANK), ("strides", ctypes.c_int64 * MAX_RANK)]


class Heads(ctypes.Structure):  # coda_heads_t
    _fields_ = [("heads_q", ctypes.c_int64), ("heads_kv", ctypes.c_int64), ("head_dim", ctypes.c_int64)]


# Every parameter and return type coda.h uses: (ctypes type, kind). A type not listed here stops
# the test with a message, so a new one is taught here rather than skipped.
TYPES = {
    "coda_status_t": (ctypes.c_int, "int"), "coda_dtype_t": (ctypes.c_int, "int"),
    "coda_reduction_t": (ctypes.c_int, "int"), "int": (ctypes.c_int, "int"),
    "int32_t": (ctypes.c_int32, "int"), "int64_t": (ctypes.c_int64, "int"),
    "size_t": (ctypes.c_size_t, "int"), "float": (ctypes.c_float, "float"),
    "double": (ctypes.c_double, "float"), "coda_stream_t": (ctypes.c_void_p, "ptr"),
    "const coda_tensor_t*": (ctypes.POINTER(Tensor), "tensor"), "coda_tensor_t": (Tensor, "struct"),
    "coda_heads_t": (Heads, "heads"), "void*": (ctypes.c_void_p, "ptr"),
    "const void*": (ctypes.c_void_p, "ptr"), "float*": (ctypes.c_void_p, "ptr"),
    "const float*": (ctypes.c_void_p, "ptr"), "const char*": (ctypes.c_char_p, "ptr"),
}


def parse_header(path):
    """[(return type, name, [parameter types])] of every function coda.h declares."""
    text = open(path).read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    text = re.sub(r"typedef[^;]*;", " ", text)  # typedefs, structs and enums
    text = re.sub(r'extern\s+"C"\s*\{|\}', " ", text)
    decls = []
    for m in re.finditer(r"([A-Za-z_][\w\s\*]*?)\b(coda_\w+)\s*\(([^)]*)\)\s*;", text):
        ret, name, params = norm_type(m.group(1)), m.group(2), m.group(3).strip()
        types = []
        if params and params != "void":
            for p in params.split(","):
                p = " ".join(p.split())
                pm = re.match(r"(.*?[\s\*])(\w+)$", p)  # drop the parameter name
                types.append(norm_type(pm.group(1) if pm else p))
        decls.append((ret, name, types))
    return decls


def norm_type(t):
    t = " ".join(t.replace("*", " * ").split())
    return t.replace(" *", "*")


def bf16_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0] >> 16  # exact for the small integers used


def host_tensor(buf, dtype, rows, cols):
    """A dense row-major [rows, cols] descriptor over a ctypes buffer or an address."""
    t = Tensor()
    t.data = buf if isinstance(buf, int) else ctypes.addressof(buf)
    t.rank, t.dtype = 2, dtype
    t.sizes[0], t.sizes[1], t.strides[0], t.strides[1] = rows, cols, cols, 1
    return t


class Checker:
    def __init__(self, lib, decls):
        self.lib, self.decls, self.failures, self.calls = lib, decls, [], 0
        self.last_error = lib.coda_last_error
        self.last_error.restype, self.last_error.argtypes = ctypes.c_char_p, []
        for ret, name, params in list(decls):
            for t in [ret] + params:
                if t not in TYPES and t != "void":
                    sys.exit("abi: coda.h's %s uses the type '%s', which tests/abi/load_in_host.py "
                             "does not know: add it to TYPES" % (name, t))
            if not hasattr(lib, name):
                self.fail("coda.h declares %s, the library does not export it" % name)
                decls.remove((ret, name, params))
                continue
            fn = getattr(lib, name)
            fn.restype = None if ret == "void" else TYPES[ret][0]
            fn.argtypes = [TYPES[p][0] for p in params]

    def fail(self, what):
        self.failures.append(what)
        print("FAIL: " + what)

    def call(self, name, *args):
        """Call `name`; check a status result (a coda_status_t, a message on failure)."""
        rets = [r for r, n, _ in self.decls if n == name]
        if not rets:
            self.fail("%s: not callable (not exported)" % name)
            return None
        ret = rets[0]
        result = getattr(self.lib, name)(*args)
        self.calls += 1
        if ret == "coda_status_t":
            if result not in STATUS:
                self.fail("%s returned %r, not a coda_status_t" % (name, result))
            elif result != 0 and not self.last_error():
                self.fail("%s failed (%s) with no message from coda_last_error()" % (name, STATUS[result]))
        return result

    def sweep(self, tensor_arg, label):
        """Every entry point once, each tensor argument = tensor_arg (None: NULL)."""
        counts = {}
        for ret, name, params in self.decls:
            args = []
            for p in params:
                kind = TYPES[p][1]
                args.append({"int": 0, "float": 0.0, "ptr": None, "heads": Heads(),
                             "struct": Tensor(), "tensor": tensor_arg}[kind])
            r = self.call(name, *args)
            if ret == "coda_status_t":
                counts[STATUS.get(r, r)] = counts.get(STATUS.get(r, r), 0) + 1
        print("sweep (%s): %d entry points called; statuses %s" % (label, len(self.decls), counts))


def describe_error_path(ck, keep):
    """coda_gemm with b's K disagreeing with a's: the message carries TensorView::describe()."""
    a_buf, b_buf, d_buf = (ctypes.c_uint16 * 64)(), (ctypes.c_uint16 * 64)(), (ctypes.c_float * 16)()
    keep += [a_buf, b_buf, d_buf]
    a = host_tensor(a_buf, BF16, 4, 8)
    b = host_tensor(b_buf, BF16, 4, 16)
    d = host_tensor(d_buf, FP32, 4, 4)
    s = ck.call("coda_gemm", ctypes.byref(a), ctypes.byref(b), ctypes.byref(d), None)
    msg = ck.last_error().decode()
    print("describe path: coda_gemm -> %s: %s" % (STATUS.get(s, s), msg))
    if s != 1 or "[4, 16] bf16, strides (16, 1)" not in msg:
        ck.fail("coda_gemm with mismatched K: expected CODA_ERROR_INVALID_ARGUMENT naming b as "
                "'[4, 16] bf16, strides (16, 1)', got %s: %r" % (STATUS.get(s, s), msg))


def host_gemm(ck, keep):
    """d[2, 4] = a[2, 8] b[4, 8]^T on host memory, small integers (exact in bf16 and fp32)."""
    m, n, k = 2, 4, 8
    av = [[(i + 2 * kk) % 5 - 2 for kk in range(k)] for i in range(m)]
    bv = [[(3 * j + kk) % 7 - 3 for kk in range(k)] for j in range(n)]
    a_buf = (ctypes.c_uint16 * (m * k))(*[bf16_bits(x) for row in av for x in row])
    b_buf = (ctypes.c_uint16 * (n * k))(*[bf16_bits(x) for row in bv for x in row])
    d_buf = (ctypes.c_float * (m * n))(*([float("nan")] * (m * n)))
    keep += [a_buf, b_buf, d_buf]
    a, b, d = host_tensor(a_buf, BF16, m, k), host_tensor(b_buf, BF16, n, k), host_tensor(d_buf, FP32, m, n)
    s = ck.call("coda_gemm", ctypes.byref(a), ctypes.byref(b), ctypes.byref(d), None)
    if s == 0:
        want = [sum(av[i][kk] * bv[j][kk] for kk in range(k)) for i in range(m) for j in range(n)]
        if list(d_buf) != want:
            ck.fail("host coda_gemm: got %s, want %s" % (list(d_buf), want))
        else:
            print("host gemm: coda_gemm on host memory ran and matches")
    elif s == 2:
        print("host gemm: not supported by this build: %s" % ck.last_error().decode())
    else:
        ck.fail("host coda_gemm: %s: %s" % (STATUS.get(s, s), ck.last_error().decode()))


def gpu_gemm(ck, torch):
    """A GEMM on torch's CUDA tensors and current stream, compared with torch."""
    m, n, k = 200, 136, 264
    g = torch.Generator(device="cuda").manual_seed(10)
    x = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    w = torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16)
    y = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float32)
    ts = [host_tensor(t.data_ptr(), dt, *t.shape) for t, dt in ((x, BF16), (w, BF16), (y, FP32))]
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    s = ck.call("coda_gemm", *[ctypes.byref(t) for t in ts], stream)
    if s != 0:
        ck.fail("GPU coda_gemm: %s: %s" % (STATUS.get(s, s), ck.last_error().decode()))
        return
    torch.cuda.synchronize()
    ref = x.float() @ w.float().t()
    err = ((y - ref).norm() / ref.norm()).item()
    print("GPU gemm: coda_gemm on torch CUDA tensors, relative error %.2e" % err)
    if not err < 1e-5:
        ck.fail("GPU coda_gemm: relative error %.3e against torch" % err)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("library")
    ap.add_argument("header")
    ap.add_argument("--host", choices=("torch", "plain"), required=True)
    args = ap.parse_args()

    torch = None
    if args.host == "torch":
        try:
            import torch  # noqa: F401  (first: its C++ and CUDA runtimes are in the process before coda)
        except ImportError as e:
            print("abi.torch: skipped: PyTorch is not installed (%s)" % e)
            return SKIP
        # Use torch's own C++ runtime before coda's first call (formatting, allocation, threads).
        print("host: torch %s, %s" % (torch.__version__, str(torch.arange(3) * 2)))
    else:
        runtime = ctypes.util.find_library("stdc++")
        if not runtime:
            print("abi.ctypes: skipped: no shared libstdc++ found to preload")
            return SKIP
        ctypes.CDLL(runtime, mode=ctypes.RTLD_GLOBAL)
        print("host: plain python3 with %s loaded globally" % runtime)

    lib = ctypes.CDLL(os.path.abspath(args.library))  # a bare name would be searched for
    decls = parse_header(args.header)
    ck = Checker(lib, decls)
    print("coda.h declares %d functions; library %s" % (len(decls), args.library))

    keep = []  # host buffers that must outlive the calls
    ck.sweep(None, "null arguments")
    t_buf = ctypes.create_string_buffer(4096)  # larger than the descriptor claims: no stray write can escape
    keep.append(t_buf)
    t = host_tensor(t_buf, FP32, 1, 1)
    ck.sweep(ctypes.pointer(t), "one 1x1 fp32 host tensor")
    describe_error_path(ck, keep)
    host_gemm(ck, keep)

    dev = ck.call("coda_device_check", 0)
    print("coda_device_check(0): %s %s" % (STATUS.get(dev, dev), ck.last_error().decode() if dev else ""))
    if dev == 0:
        if torch is not None and torch.cuda.is_available():
            gpu_gemm(ck, torch)
        else:
            print("GPU gemm: skipped (a Hopper GPU, but no PyTorch with CUDA here to hold the tensors)")

    print("%d calls; %s" % (ck.calls, "%d failures" % len(ck.failures) if ck.failures else "ok"))
    return 1 if ck.failures else 0


if __name__ == "__main__":
    sys.exit(main())
