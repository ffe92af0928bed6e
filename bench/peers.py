#!/usr/bin/env python3
"""The peer column: coda's fused cases, unfused, in PyTorch eager and torch.compile.

Times the same cases as `coda bench` (tools/coda/bench_fused.cpp: same shapes, dtypes, data ranges)
written the unfused way in PyTorch, on the same GPU and by the same method (CUDA events, L2 flushed
before every rep by a 256 MiB write, eager / torch.compile / plain GEMM interleaved rep by rep,
medians), and writes JSON records

    peer.eager.<case>, peer.compile.<case>    {"name", "m", "n", "k", "time_us", "gemm_us",
                                               "vs_cublas", "engine", "torch", ...}

where <case> is the coda record's name without its `op.` prefix (residual_rmsnorm.1b.oproj,
rmsnorm_lse.lmhead, lmhead.loss_fwd, block.1b.fwd, block.1b.fwdbwd, lmhead.fwdbwd, ...).
`vs_cublas` = time / the plain GEMM(s) of the case through torch.matmul (PyTorch's cuBLAS) timed in
the same loop: one GEMM for an operator or the LM head's forward, the block's four GEMMs for a block
forward. bench/compare.py puts these next to coda's.

The fwdbwd cases time a training step's share: the unfused forward, then its backward through
autograd (torch.autograd.backward from fixed random upstream gradients; torch.compile compiles the
forward and AOTAutograd the backward with it). block.<m>.fwdbwd runs the block forward with x0, y0,
the four weights and the two norm weights requiring gradients, and the backward from dx2 (the
residual stream out) and dqkv (the rotated q/k and v); lmhead.fwdbwd runs the mean cross-entropy of
the bf16 logits h W^T (in fp32) and its backward to h and W. The gradients are set to None before
every call, outside the timed window. Their denominators are the forward's GEMMs plus, for each,
its dgrad dX = dY W and its wgrad dW = dY^T X (12 GEMMs for a block, 3 for the LM head). Their
records add "peak_extra_gib": on a GPU, max_memory_allocated() over one untimed step (peak stats
reset before it) minus memory_allocated() before it, i.e. the memory the step needs beyond its
inputs and weights, the gradients it writes included (null on the CPU); the compiled vs eager check
compares the gradients.

    python3 bench/peers.py [--json FILE] [--reps N] [--small] [--device cuda|cpu] [filters...]

Filters are substrings matched against the coda record name (op.<case>, block.<m>.fwd, ...) and
the peer names, like `coda bench`'s (`fwdbwd` selects the fwdbwd cases). Without PyTorch or without
a CUDA device it prints one line saying so and exits 0 (a device run goes on); `--device cpu` (only
with --small) tests the script itself on a machine without a GPU. docs/peers.md says what each case
computes.
"""

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback

EPS = 1e-5
IGNORE_INDEX = -100  # CODA_IGNORE_INDEX
FLUSH_BYTES = 256 << 20  # the L2 flush, as coda bench's Timer (a 256 MiB write before each rep)

# tools/coda/bench_fused.cpp: kModels
MODELS = [
    dict(name="1b", m=16384, d=2048, f=8192, hq=32, hkv=8, hd=64),
    dict(name="8b", m=8192, d=4096, f=14336, hq=32, hkv=8, hd=128),
]
LMHEAD = dict(m=16384, v=128256, k=2048)
# --small: a smoke test of the script (every shape, head and pair structure kept, tiny sizes).
SMALL_MODELS = [
    dict(name="1b", m=256, d=128, f=256, hq=4, hkv=2, hd=32),
    dict(name="8b", m=128, d=256, f=512, hq=4, hkv=2, hd=64),
]
SMALL_LMHEAD = dict(m=256, v=1000, k=128)

# RoPE: Llama-3.1 frequencies as coda bench uses them (base 500000; factor 8, low 1, high 4,
# original max position 8192), positions = arange(M) % 8192.
ROPE_BASE = 500000.0
ROPE_SCALING = dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position=8192.0)
POSITION_PERIOD = 8192


def rope_frequencies(head_dim, base=ROPE_BASE, factor=0.0, low_freq_factor=1.0, high_freq_factor=4.0,
                     original_max_position=8192.0):
    """Per-pair frequencies in turns per position, float64 (src/ref/reference.cpp rope_frequencies).

    freq_i = base^(-2i/hd) / (2 pi), the angular frequency first scaled the Llama-3.1 way: wavelengths
    above original_max_position / low_freq_factor divided by factor, those between that and
    original_max_position / high_freq_factor blended, the short ones kept."""
    two_pi = 2.0 * math.pi
    out = []
    for i in range(head_dim // 2):
        inv = base ** (-2.0 * i / head_dim)
        if factor > 0:
            low_wavelen = original_max_position / low_freq_factor
            high_wavelen = original_max_position / high_freq_factor
            wavelen = two_pi / inv
            if wavelen > low_wavelen:
                inv = inv / factor
            elif wavelen >= high_wavelen:
                smooth = (original_max_position / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
                inv = (1.0 - smooth) * inv / factor + smooth * inv
        out.append(inv / two_pi)
    return out


def repo_commit():
    """The commit as coda bench records it (cmake/commit.cmake): CODA_COMMIT when set (a copy of the
    tree whose .git is not the commit run, like the device machine's copy of a session's checkout),
    else the checkout's commit (12 hex digits) when this tree is coda's own checkout (not a copy
    inside another repository), else unknown."""
    env = os.environ.get("CODA_COMMIT", "")
    if env:
        return env
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        top = subprocess.run(["git", "-C", root, "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                             timeout=10)
        if top.returncode != 0 or os.path.realpath(top.stdout.strip()) != os.path.realpath(root):
            return "unknown"
        r = subprocess.run(["git", "-C", root, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                           timeout=10)
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


# ---- the unfused forms (plain PyTorch; eager runs them as written, torch.compile compiles them) ------------
#
# Where a case scales the GEMM's rows by rstd (acc * r[m], coda-math.md 5.1), two placements compute
# the same thing: "out" multiplies the GEMM output (coda's formula as written: z = r * (h W^T)) and
# "in" multiplies the GEMM input first (z = (r * h) W^T: the RMSNorm before the GEMM, as unfused code
# has it). Which one is cheaper for PyTorch depends on the case (an extra pass over the small input,
# or over the wide output), so both are timed and each engine's record takes its faster one
# ("form"; "forms" keeps both times).


def make_forms(torch):
    F = torch.nn.functional
    bf16 = torch.bfloat16

    def rmsnorm(x, w):
        """h = RMSNorm(x) * w in fp32, rounded once; rstd [M] fp32."""
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)
        return (xf * rstd * w.float()).to(bf16), rstd.squeeze(-1)

    def scale_rows(h, rstd):
        """bf16(rstd * h): the row scale applied to the GEMM input (the "in" form)."""
        return (h.float() * rstd[:, None]).to(bf16)

    def rope(y, cos, sin, hq, hkv, hd):
        """RoPE (+theta) on the q and k heads of y [M, N3] (fp32) with interleaved pairs (2i, 2i+1):
        (a, b) -> (a cos - b sin, a sin + b cos), in fp32, cos/sin [M, hd/2] per position and pair;
        the v columns unchanged. Returns the bf16 [M, N3] tensor."""
        m = y.shape[0]
        rc = (hq + hkv) * hd
        c, s = cos[:, None, :], sin[:, None, :]
        qk = y[:, :rc].reshape(m, hq + hkv, hd // 2, 2)
        a, b = qk[..., 0], qk[..., 1]
        rot = torch.stack((a * c - b * s, a * s + b * c), dim=-1).reshape(m, rc)
        return torch.cat((rot, y[:, rc:]), dim=1).to(bf16)

    def residual_rmsnorm(a, w, res, nw):
        """x = a W^T + res; h = RMSNorm(x) * nw. Outputs x, h, rstd."""
        x = torch.matmul(a, w.t()) + res
        h, rstd = rmsnorm(x, nw)
        return x, h, rstd

    def swiglu_out(h, wgu, rstd):
        """z = rstd * (h Wgu^T) (interleaved gate/up columns), o = silu(g) * u from fp32. Outputs z, o."""
        zf = torch.matmul(h, wgu.t()).float() * rstd[:, None]
        return zf.to(bf16), (F.silu(zf[:, 0::2]) * zf[:, 1::2]).to(bf16)

    def swiglu_in(h, wgu, rstd):
        z = torch.matmul(scale_rows(h, rstd), wgu.t())
        return z, F.silu(z[:, 0::2]) * z[:, 1::2]

    def make_rope(hq, hkv, hd):
        def rope_out(h, wqkv, rstd, cos, sin):
            """qkv = rope(rstd * (h Wqkv^T)) on the q and k columns."""
            return rope(torch.matmul(h, wqkv.t()).float() * rstd[:, None], cos, sin, hq, hkv, hd)

        def rope_in(h, wqkv, rstd, cos, sin):
            return rope(torch.matmul(scale_rows(h, rstd), wqkv.t()).float(), cos, sin, hq, hkv, hd)
        return {"out": rope_out, "in": rope_in}

    def make_sqsum(hq, hkv, hd):
        def sqsum(qkv_f, m):
            return qkv_f[:, :(hq + hkv) * hd].reshape(m, hq + hkv, hd).pow(2).sum(-1)

        def sqsum_out(h, wqkv, rstd):
            """qkv = rstd * (h Wqkv^T) stored; per-head sums of squares of the q and k heads (fp32)."""
            y = torch.matmul(h, wqkv.t()).float() * rstd[:, None]
            return y.to(bf16), sqsum(y, y.shape[0])

        def sqsum_in(h, wqkv, rstd):
            qkv = torch.matmul(scale_rows(h, rstd), wqkv.t())
            return qkv, sqsum(qkv.float(), qkv.shape[0])
        return {"out": sqsum_out, "in": sqsum_in}

    def lse_of(logits, targets):
        lf = logits.float()
        return torch.logsumexp(lf, dim=-1), lf.gather(1, targets.clamp(min=0)[:, None]).squeeze(1)

    def lse_out(h, w, rstd, targets):
        """logits = rstd * (h W^T) stored bf16; lse = logsumexp(logits) and the target logit (fp32)."""
        logits = (torch.matmul(h, w.t()).float() * rstd[:, None]).to(bf16)
        return (logits,) + lse_of(logits, targets)

    def lse_in(h, w, rstd, targets):
        logits = torch.matmul(scale_rows(h, rstd), w.t())
        return (logits,) + lse_of(logits, targets)

    def loss_out(h, w, rstd, targets):
        """Mean cross-entropy of rstd * (h W^T) over the rows whose target is not ignored."""
        logits = torch.matmul(h, w.t()).float() * rstd[:, None]
        return F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX)

    def loss_in(h, w, rstd, targets):
        logits = torch.matmul(scale_rows(h, rstd), w.t())
        return F.cross_entropy(logits.float(), targets, ignore_index=IGNORE_INDEX)

    def lmhead_loss(h, w, targets):
        """The LM head and its loss as users write them (lmhead.fwdbwd): the mean cross-entropy of the
        bf16 logits h W^T, taken in fp32, over the rows whose target is not ignored."""
        return F.cross_entropy(torch.matmul(h, w.t()).float(), targets, ignore_index=IGNORE_INDEX)

    def make_block(hq, hkv, hd, fwdbwd=False):
        def block_fwd(x0, y0, wo, wgu, wdown, wqkv, n0, n1, cos, sin):
            """The non-attention LLaMA-3 block forward (include/coda/block/llama3.hpp, unfused).
            Outputs what coda's block writes: x1, x2, z1, qkv, r1, r2."""
            x1 = torch.matmul(y0, wo.t()) + x0
            h1, r1 = rmsnorm(x1, n0)
            z1 = torch.matmul(h1, wgu.t())
            y1 = F.silu(z1[:, 0::2]) * z1[:, 1::2]
            x2 = torch.matmul(y1, wdown.t()) + x1
            h2, r2 = rmsnorm(x2, n1)
            qkv = rope(torch.matmul(h2, wqkv.t()).float(), cos, sin, hq, hkv, hd)
            return x1, x2, z1, qkv, r1, r2

        def block_fwd_continuing(*args):
            """block_fwd returning only the outputs that continue the network, x2 (the residual stream)
            and qkv (what attention reads): the fwdbwd case's backward starts from them, and
            torch.compile is free to keep or recompute the rest for its backward."""
            _, x2, _, qkv, _, _ = block_fwd(*args)
            return x2, qkv
        return {"block": block_fwd_continuing if fwdbwd else block_fwd}

    return dict(residual_rmsnorm={"form": residual_rmsnorm}, swiglu={"out": swiglu_out, "in": swiglu_in},
                make_rope=make_rope, make_sqsum=make_sqsum, lse={"out": lse_out, "in": lse_in},
                loss={"out": loss_out, "in": loss_in}, lmhead_loss={"form": lmhead_loss}, make_block=make_block)


# ---- the cases --------------------------------------------------------------------------------------------


class Case:
    """One coda case: its unfused form(s), its inputs and the plain GEMM(s) that make its denominator.

    A forward case's build returns ({form: fn}, args, gemm_fn): fn(*args) is timed. A fwdbwd case's
    build returns ({form: fn}, args, gemm_fn, (leaves, upstream)): fn(*args) is the forward, returning
    the outputs that continue the network, and the timed step is that forward followed by
    torch.autograd.backward(outputs, upstream), which writes the gradients into .grad of the tensors
    in leaves (cleared before every step, outside the timed window)."""

    def __init__(self, case, m, n, k, build, note=None):
        self.case = case  # the coda record name without "op."
        self.m, self.n, self.k = m, n, k
        self.build = build
        self.note = note  # the records' "note": what gemm_us is, where it is more than one GEMM

    def coda_name(self):
        return self.case if self.case.startswith(("block.", "lmhead.")) else "op." + self.case


def make_cases(torch, device, small):
    forms = make_forms(torch)
    bf16 = torch.bfloat16
    gen = torch.Generator(device="cpu")
    gen.manual_seed(20261130)

    def uniform(shape, scale, dtype=bf16):
        """uniform in [-scale, scale), as dev::fill_uniform (drand in bench_fused.cpp)."""
        t = (torch.rand(shape, generator=gen, dtype=torch.float32) * 2.0 - 1.0) * scale
        return t.to(device=device, dtype=dtype)

    def positive(n, lo=0.5, hi=1.5):
        """an fp32 vector in [lo, hi) (dpositive: the rstd operand)."""
        return (lo + (hi - lo) * torch.rand((n,), generator=gen, dtype=torch.float32)).to(device)

    def rope_tables(m, hd):
        """cos, sin [M, hd/2] fp32 of theta = 2 pi frac(pos * freq) for positions arange(M) % 8192 and
        coda's fp32 frequencies (turns), computed in float64 once outside the timed function, as a model
        computes its rotary tables once per step for all layers (coda computes them in its epilogue)."""
        f = torch.tensor(rope_frequencies(hd, ROPE_BASE, **ROPE_SCALING), dtype=torch.float32).double()
        pos = (torch.arange(m, dtype=torch.int64) % POSITION_PERIOD).double()
        t = pos[:, None] * f[None, :]
        theta = (t - torch.floor(t)) * (2.0 * math.pi)
        return torch.cos(theta).float().to(device), torch.sin(theta).float().to(device)

    def mm(a, w):
        return torch.matmul(a, w.t())

    models = SMALL_MODELS if small else MODELS
    lm = SMALL_LMHEAD if small else LMHEAD
    cases = []
    for ms in models:
        m, d, f, hq, hkv, hd = ms["m"], ms["d"], ms["f"], ms["hq"], ms["hkv"], ms["hd"]
        n3 = (hq + 2 * hkv) * hd
        p = "." + ms["name"] + "."
        for gemm, k in (("oproj", d), ("down", f)):
            def build(m=m, d=d, k=k):
                a, w = uniform((m, k), 1.0), uniform((d, k), 0.03)
                res, nw = uniform((m, d), 1.0), uniform((d,), 1.0)
                return forms["residual_rmsnorm"], (a, w, res, nw), lambda: mm(a, w)
            cases.append(Case("residual_rmsnorm" + p + gemm, m, d, k, build))

        def build_swiglu(m=m, d=d, f=f):
            h, w, r = uniform((m, d), 1.0), uniform((2 * f, d), 0.03), positive(m)
            return forms["swiglu"], (h, w, r), lambda: mm(h, w)
        cases.append(Case("rmsnorm_swiglu" + p + "gateup", m, 2 * f, d, build_swiglu))

        def build_rope(m=m, d=d, n3=n3, hq=hq, hkv=hkv, hd=hd):
            h, w, r = uniform((m, d), 1.0), uniform((n3, d), 0.03), positive(m)
            return forms["make_rope"](hq, hkv, hd), (h, w, r) + rope_tables(m, hd), lambda: mm(h, w)
        cases.append(Case("rmsnorm_rope" + p + "qkv", m, n3, d, build_rope))

        def build_sqsum(m=m, d=d, n3=n3, hq=hq, hkv=hkv, hd=hd):
            h, w, r = uniform((m, d), 1.0), uniform((n3, d), 0.03), positive(m)
            return forms["make_sqsum"](hq, hkv, hd), (h, w, r), lambda: mm(h, w)
        cases.append(Case("qkv_sqsum" + p + "qkv", m, n3, d, build_sqsum))

    def lm_inputs():
        m, v, k = lm["m"], lm["v"], lm["k"]
        h, w, r = uniform((m, k), 1.0), uniform((v, k), 0.1), positive(m)
        t = torch.randint(0, v, (m,), generator=gen, dtype=torch.int64)
        t[::16] = IGNORE_INDEX
        return h, w, r, t.to(device)

    def build_lse():
        h, w, r, t = lm_inputs()
        return forms["lse"], (h, w, r, t), lambda: mm(h, w)

    def build_loss():
        h, w, r, t = lm_inputs()
        return forms["loss"], (h, w, r, t), lambda: mm(h, w)
    cases.append(Case("rmsnorm_lse.lmhead", lm["m"], lm["v"], lm["k"], build_lse))
    cases.append(Case("lmhead.loss_fwd", lm["m"], lm["v"], lm["k"], build_loss))

    def block_inputs(m, d, f, n3):
        """The block's inputs and weights: x0, y0, Wo, Wgu, Wdown, Wqkv, n0, n1."""
        wo, wgu = uniform((d, d), 0.03), uniform((2 * f, d), 0.03)
        wdown, wqkv = uniform((d, f), 0.02), uniform((n3, d), 0.03)
        n0, n1 = uniform((d,), 1.0), uniform((d,), 1.0)
        x0, y0 = uniform((m, d), 1.0), uniform((m, d), 1.0)
        return x0, y0, wo, wgu, wdown, wqkv, n0, n1

    for ms in models:
        m, d, f, hq, hkv, hd = ms["m"], ms["d"], ms["f"], ms["hq"], ms["hkv"], ms["hd"]
        n3 = (hq + 2 * hkv) * hd

        def build_block(m=m, d=d, f=f, n3=n3, hq=hq, hkv=hkv, hd=hd):
            x0, y0, wo, wgu, wdown, wqkv, n0, n1 = block_inputs(m, d, f, n3)
            h, y1 = uniform((m, d), 1.0), uniform((m, f), 1.0)  # operands of the GEMMs-alone denominator

            def gemms():
                mm(y0, wo)
                mm(h, wgu)
                mm(y1, wdown)
                mm(h, wqkv)
            args = (x0, y0, wo, wgu, wdown, wqkv, n0, n1) + rope_tables(m, hd)
            return forms["make_block"](hq, hkv, hd), args, gemms
        cases.append(Case("block." + ms["name"] + ".fwd", m, d, f, build_block,
                          note="gemm_us: the block's 4 GEMMs alone (torch.matmul)"))

    # fwdbwd: the forward, then its backward through autograd, as a training step runs them.
    for ms in models:
        m, d, f, hq, hkv, hd = ms["m"], ms["d"], ms["f"], ms["hq"], ms["hkv"], ms["hd"]
        n3 = (hq + 2 * hkv) * hd

        def build_block_fwdbwd(m=m, d=d, f=f, n3=n3, hq=hq, hkv=hkv, hd=hd):
            leaves = block_inputs(m, d, f, n3)
            x0, y0, wo, wgu, wdown, wqkv, n0, n1 = leaves
            for t in leaves:
                t.requires_grad_()
            # the upstream gradients: of x2 (the residual stream out) and of qkv (attention's input)
            dx2, dqkv = uniform((m, d), 1.0), uniform((m, n3), 1.0)
            # operands of the GEMMs-alone denominator: h for h1 and h2, y1, and dz for the gate/up
            # output's gradient; dx2 stands for the gradient of x1 and x2, dqkv for that of the QKV GEMM
            h, y1, dz = uniform((m, d), 1.0), uniform((m, f), 1.0), uniform((m, 2 * f), 1.0)

            def gemms():
                """the forward's four GEMMs Y = X W^T (o-proj, gate/up, down, QKV), then for each in
                reverse, as the backward runs them, its dgrad dX = dY W and its wgrad dW = dY^T X (the
                order of coda bench's cuBLAS column)."""
                with torch.no_grad():
                    mm(y0, wo)
                    mm(h, wgu)
                    mm(y1, wdown)
                    mm(h, wqkv)
                    for dy, x, w in ((dqkv, h, wqkv), (dx2, y1, wdown), (dz, h, wgu), (dx2, y0, wo)):
                        torch.matmul(dy, w)
                        torch.matmul(dy.t(), x)
            args = leaves + rope_tables(m, hd)
            return forms["make_block"](hq, hkv, hd, fwdbwd=True), args, gemms, (leaves, (dx2, dqkv))
        cases.append(Case("block." + ms["name"] + ".fwdbwd", m, d, f, build_block_fwdbwd,
                          note="gemm_us: the block's 12 GEMMs alone (4 forward, 4 dgrad, 4 wgrad; torch.matmul)"))

    def build_lmhead_fwdbwd():
        h, w, _, t = lm_inputs()
        h.requires_grad_()
        w.requires_grad_()
        with torch.no_grad():
            # the denominator's [M, V] operand for the logits' gradient: the logits themselves, random
            # values made on the device (drawing M x V numbers on the host would take long)
            dl = mm(h, w)

        def gemms():
            """logits = h W^T, dgrad dH = dlogits W, wgrad dW = dlogits^T h."""
            with torch.no_grad():
                mm(h, w)
                torch.matmul(dl, w)
                torch.matmul(dl.t(), h)
        return forms["lmhead_loss"], (h, w, t), gemms, ((h, w), None)
    cases.append(Case("lmhead.fwdbwd", lm["m"], lm["v"], lm["k"], build_lmhead_fwdbwd,
                      note="gemm_us: the 3 GEMMs alone (logits, dgrad, wgrad; torch.matmul)"))
    return cases


# ---- timing -----------------------------------------------------------------------------------------------


class Timer:
    """coda bench's method: before every rep an L2 flush (a 256 MiB write), then the function between
    two CUDA events; the functions timed round-robin so drift hits them alike; medians.

    One addition: after the flush the stream spins for about 2 ms (torch.cuda._sleep) before the
    first event, so that the host has queued the whole function before the GPU reaches it. Eager's
    and torch.compile's per-call Python work (dispatch, guards, Triton launches: 0.1-0.5 ms for
    these cases) then overlaps GPU work, as it does in a training step, instead of leaving the GPU
    idle inside the timed window; the times are GPU times. --expose-launch turns this off."""

    SPIN_CYCLES = 4_000_000  # ~2 ms at H200 clocks

    def __init__(self, torch, device, hide_launch=True):
        self.torch = torch
        self.cuda = device == "cuda"
        self.spin = hide_launch and self.cuda and hasattr(torch.cuda, "_sleep")
        if self.cuda:
            self.flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=device)
            self.e0 = torch.cuda.Event(enable_timing=True)
            self.e1 = torch.cuda.Event(enable_timing=True)

    def once_us(self, fn, salt):
        if not self.cuda:
            t0 = time.perf_counter()
            fn()
            return 1e6 * (time.perf_counter() - t0)
        self.flush.fill_(salt & 0xFF)
        if self.spin:
            self.torch.cuda._sleep(self.SPIN_CYCLES)
        self.e0.record()
        fn()
        self.e1.record()
        self.e1.synchronize()
        return 1000.0 * self.e0.elapsed_time(self.e1)

    def medians_interleaved(self, fns, reps, warmup=3, before=None):
        """before (if given) runs before every call, warm-ups included, outside the timed window."""
        before = before or (lambda: None)
        for fn in fns:
            for _ in range(warmup):
                before()
                fn()
        if self.cuda:
            self.torch.cuda.synchronize()
        t = [[] for _ in fns]
        for r in range(reps):
            for i, fn in enumerate(fns):
                before()
                t[i].append(self.once_us(fn, r))
        return [statistics.median(v) for v in t]


def rel_err(torch, got, want):
    """max over the outputs of ||got - want|| / ||want|| (a check that compile computes what eager does),
    summed in float64 over chunks so that the LM head's logits need no float64 copy."""
    if isinstance(want, torch.Tensor):
        got, want = (got,), (want,)
    worst = 0.0
    for g, w in zip(got, want):
        g, w = g.reshape(-1), w.reshape(-1)
        num = den = 0.0
        for i in range(0, w.numel(), 1 << 26):
            gc, wc = g[i:i + (1 << 26)].double(), w[i:i + (1 << 26)].double()
            num += torch.sum((gc - wc) ** 2).item()
            den += torch.sum(wc * wc).item()
        worst = max(worst, math.sqrt(num / den) if den > 0 else math.sqrt(num))
    return worst


# ---- main -------------------------------------------------------------------------------------------------


def wanted(case, filters):
    if not filters:
        return True
    names = (case.coda_name(), case.case, "peer.eager." + case.case, "peer.compile." + case.case)
    return any(f in n for f in filters for n in names)


def short(e):
    s = "%s: %s" % (type(e).__name__, str(e).strip().splitlines()[0] if str(e).strip() else "")
    return s[:300]


def peak_extra_gib(torch, step, clear):
    """The memory one untimed call of step needs beyond what is allocated before it (the inputs and
    weights, the upstream gradients, the other functions' operands, the flush buffer), in GiB:
    max_memory_allocated() over the call minus memory_allocated() before it, from cleared gradients.
    The gradients the step writes are part of it."""
    clear()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - before
    clear()
    return extra / float(1 << 30)


def run_case(torch, c, args, timer, device):
    """Times one case; returns (records, line, failures)."""
    forms, fargs, gemm, *fwdbwd = c.build()
    if fwdbwd:
        leaves, upstream = fwdbwd[0]

        def call(fn):
            def step():
                """fn's forward, then its backward from the upstream gradients; returns the gradients."""
                torch.autograd.backward(fn(*fargs), upstream)
                return [t.grad for t in leaves]
            return step

        def clear():
            for t in leaves:
                t.grad = None
    else:
        def call(fn):
            return lambda: fn(*fargs)

        def clear():
            pass

    def once(step):
        """one untimed call from cleared gradients; its outputs (a forward case) or gradients (fwdbwd)"""
        clear()
        return step()
    multi = len(forms) > 1
    fns = [("gemm", None, gemm)]
    errors, compile_s, checks = {}, {}, {}
    ref = {}
    for form, fn in forms.items():
        fns.append(("eager", form, call(fn)))
    if multi:  # the forms compute the same thing: a check of the forms themselves
        names = list(forms)
        ref = {f: once(call(forms[f])) for f in names}
        checks["forms_rel_err"] = max(rel_err(torch, ref[f], ref[names[0]]) for f in names[1:])
        ref = {}
    if not args.no_compile:
        for form, fn in forms.items():
            torch._dynamo.reset()  # a fresh compile per form: no recompiles, no dynamic shapes
            try:
                # a fwdbwd case compiles its forward; AOTAutograd compiles the backward graph with it
                cstep = call(torch.compile(fn, fullgraph=True, dynamic=False))
                t0 = time.perf_counter()
                got = once(cstep)
                if device == "cuda":
                    torch.cuda.synchronize()
                compile_s[form] = time.perf_counter() - t0
                try:
                    checks.setdefault("vs_eager_rel_err", {})[form] = rel_err(torch, got, once(call(fn)))
                except Exception as e:
                    print("  %s: compiled vs eager check failed: %s" % (c.case, short(e)))
                del got
                clear()
                fns.append(("compile", form, cstep))
            except Exception as e:
                errors.setdefault("compile", []).append(("%s: " % form if multi else "") + short(e))
                if os.environ.get("PEERS_TRACEBACK"):
                    traceback.print_exc()
    med = timer.medians_interleaved([f for _, _, f in fns], args.reps, before=clear)
    peak = {}  # (engine, form) -> GiB, for a fwdbwd case on a GPU
    if fwdbwd and device == "cuda":
        for eng, form, fn in fns[1:]:
            peak[(eng, form)] = peak_extra_gib(torch, fn, clear)
    gemm_us = med[0]
    best = {}  # engine -> (us, form)
    times = {}  # engine -> {form: us}
    for (eng, form, _), us in zip(fns[1:], med[1:]):
        times.setdefault(eng, {})[form] = us
        if eng not in best or us < best[eng][0]:
            best[eng] = (us, form)
    records, failures = [], 0
    for eng in ("eager", "compile"):
        if args.no_compile and eng == "compile":
            continue
        us, form = best.get(eng, (None, None))
        rec = {"name": "peer.%s.%s" % (eng, c.case), "m": c.m, "n": c.n, "k": c.k,
               "time_us": round(us, 3) if us is not None else None, "gemm_us": round(gemm_us, 3),
               "vs_cublas": round(us / gemm_us, 5) if us is not None else None,
               "engine": "torch.compile" if eng == "compile" else "eager", "torch": torch.__version__}
        if multi:
            rec["form"] = form
            rec["forms"] = {f: round(t, 3) for f, t in times.get(eng, {}).items()}
            if eng == "eager":
                rec["forms_rel_err"] = checks.get("forms_rel_err")
        if eng == "compile":
            rec["compile_s"] = {f: round(t, 2) for f, t in compile_s.items()} if multi else \
                (round(compile_s[form], 2) if form in compile_s else None)
            errs = checks.get("vs_eager_rel_err", {})
            rec["vs_eager_rel_err"] = errs if multi else errs.get(form)
        if eng in errors:
            rec["error"] = "; ".join(errors[eng])
            failures += 1
        if fwdbwd:  # null on the CPU, or where the engine has no time
            rec["peak_extra_gib"] = round(peak[(eng, form)], 3) if (eng, form) in peak else None
        if c.note:
            rec["note"] = c.note
        records.append(rec)

    def col(eng, fmt):
        if eng not in best:
            return "-"
        us, form = best[eng]
        return fmt(us) + (" " + form if multi else "")

    def gib(eng):
        return "%.2f" % peak[(eng, best[eng][1])] if eng in best and (eng, best[eng][1]) in peak else "-"
    line = "%-30s %6d %6d %6d %9.1f %14s %14s %9s %9s %9s %11s %8s%s" % (
        c.case, c.m, c.n, c.k, gemm_us, col("eager", lambda u: "%.1f" % u), col("compile", lambda u: "%.1f" % u),
        col("eager", lambda u: "%.3f" % (u / gemm_us)).split()[0], col("compile", lambda u: "%.3f" % (u / gemm_us)).split()[0],
        gib("eager"), gib("compile"), "%.1f" % sum(compile_s.values()) if compile_s else "-",
        "  compile failed: " + "; ".join(errors["compile"]) if "compile" in errors else "")
    return records, line, failures


def main(argv=None):
    ap = argparse.ArgumentParser(description="PyTorch eager and torch.compile on coda bench's fused cases "
                                             "(the peer column); see docs/peers.md")
    ap.add_argument("filters", nargs="*", help="substrings of case names (e.g. 1b.oproj block lmhead)")
    ap.add_argument("--json", metavar="FILE", help="write the records as JSON (rewritten after every case)")
    ap.add_argument("--reps", type=int, default=25, help="timed reps per function (median; default 25)")
    ap.add_argument("--small", action="store_true", help="tiny shapes: a smoke test of the script")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cuda (default); cpu only with --small, to test the script itself")
    ap.add_argument("--no-compile", action="store_true", help="eager only (no torch.compile)")
    ap.add_argument("--expose-launch", action="store_true",
                    help="no spin before the timed window: host-side launch overhead shows in the times")
    args = ap.parse_args(argv)
    if args.device == "cpu" and not args.small:
        ap.error("--device cpu is only for testing the script: add --small")
    if args.reps < 1:
        ap.error("--reps must be >= 1")

    try:
        import torch
    except ImportError:
        print("peers: PyTorch is not installed here; skipping the peer column")
        return 1 if args.device == "cpu" else 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print("peers: PyTorch %s sees no CUDA device here; skipping the peer column" % torch.__version__)
        return 0

    device = args.device
    gpu = torch.cuda.get_device_name() if device == "cuda" else ("cpu " + (platform.processor() or platform.machine()))
    tv = torch.__version__
    timer = Timer(torch, device, hide_launch=not args.expose_launch)
    if device == "cuda":
        method = "CUDA events around each call; L2 flushed (256 MiB write) before every rep" + \
                 ("; then a ~2 ms spin so host-side launch work overlaps (GPU time)" if timer.spin else
                  "; host launch overhead exposed")
    else:
        method = "wall clock around each call (CPU smoke test, no flush)"
    method += ("; eager, torch.compile (default mode, fullgraph=True, dynamic=False) and the plain torch.matmul "
               "GEMM(s) interleaved rep by rep; medians; compile time excluded; fwdbwd cases: gradients "
               "set to None before every call, outside the timed window")
    out = {"gpu": gpu, "commit": repo_commit(),
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "torch": tv, "reps": args.reps, "small": args.small, "device": device, "method": method,
           "forms": {"in": "rstd applied to the GEMM input, bf16(rstd * h) W^T (RMSNorm before the GEMM)",
                     "out": "rstd applied to the GEMM output, rstd * (h W^T) in fp32 (coda's formula)"},
           "records": []}
    if device == "cuda":
        out["cuda"] = torch.version.cuda
        try:
            import triton
            out["triton"] = triton.__version__
        except ImportError:
            pass
    cases = [c for c in make_cases(torch, device, args.small) if wanted(c, args.filters)]
    if not cases:
        print("peers: no case matches %s" % " ".join(args.filters))
        return 1

    def write():
        if args.json:
            tmp = args.json + ".tmp"
            with open(tmp, "w") as fh:
                json.dump(out, fh, indent=1)
                fh.write("\n")
            os.replace(tmp, args.json)

    print("peers: PyTorch %s on %s (%s), median of %d reps%s%s%s" %
          (tv, gpu, device, args.reps, ", L2 flushed before each" if device == "cuda" else "",
           ", launch overhead hidden" if timer.spin else "", ", small shapes" if args.small else ""))
    print("%-30s %6s %6s %6s %9s %14s %14s %9s %9s %9s %11s %8s" % (
        "case", "M", "N", "K", "GEMM us", "eager us", "compile us", "eager x", "compile x", "eager GiB",
        "compile GiB", "compile s"))
    failures = 0
    for c in cases:
        sys.stdout.flush()
        try:
            records, line, fails = run_case(torch, c, args, timer, device)
        except Exception as e:  # out of memory, typically: the case is left out, the others go on
            print("%-30s failed: %s" % (c.case, short(e)))
            if os.environ.get("PEERS_TRACEBACK"):
                traceback.print_exc()
            failures += 1
        else:
            out["records"].extend(records)
            failures += fails
            print(line)
            write()
        torch._dynamo.reset()
        if device == "cuda":
            torch.cuda.empty_cache()
    write()
    if args.json:
        print("wrote %s" % args.json)
    if failures:
        print("peers: %d failure(s) (see above)" % failures)
    print("forms: in = rstd on the GEMM input (RMSNorm before the GEMM), out = rstd on the GEMM output")
    if any(c.case.endswith(".fwdbwd") for c in cases):
        print("GiB: peak_extra_gib of a fwdbwd case, the memory its forward + backward allocates beyond "
              "what exists before it (CUDA only)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
