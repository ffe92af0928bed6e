"""coda.functional on a CUDA device: llama3_block and rmsnorm_qkv_rope, forward and backward on both
backward paths (fused, the default; composed with CODA_FUSED_BACKWARD=0), and lm_head_cross_entropy
(lm_head_train, then the backward's GEMMs, twice through one forward), through coda's sm_90a kernels.

The checks of test_functional.py (test_gradients_against_float64, test_fused_backward_agrees_with_
composed) at GPU-sized shapes, with its eager graphs and path helpers: every output and every
input's gradient (activations, weights, norm weights, rstd) against float64 autograd of the unfused
eager graph (on the CPU) under design.md's rule (assert_rule: at most 2x the error of the same
eager graph run in bf16 on the device, i.e. the unfused PyTorch pipeline on cuBLAS, plus 1e-4);
the fused path's gradients within AGREE of the composed path's; the forward bit-identical on both
paths; coda's operators called on the fused path only; every result finite and on the device.
Before each coda run the CUDA caching allocator's free blocks are filled with 0xFF bytes (NaN in
bf16, fp16 and fp32), so an output element no kernel writes reads as NaN instead of a stale, correct
value left by the previous run in the same block.

Skipped without CUDA and a Hopper (sm_90) GPU. CODA_TEST_DEVICE overrides the device (default
"cuda"): CODA_TEST_DEVICE=cpu runs the same checks on the CPU emulator (no skip, no allocator
poisoning), which checks the test itself on a machine without a GPU:

    CODA_TEST_DEVICE=cpu CODA_LIBRARY=build/lib/libcoda.so python3 tests/python/run.py -k gpu

Inputs are built on the CPU with the `gen` fixture (fresh seed every run, printed; CODA_TEST_SEED
replays it, cotangents included), then moved to the device.
"""

import os

import pytest
import torch

import coda
from common import BF16, F64, assert_rule, hopper, positive, randn, rel_error
from test_functional import (AGREE, EPS, assert_ops_called, eager_block, eager_lm_head, eager_qkv_rope, lm_targets,
                             qkv_args, select_backward)

DEVICE = torch.device(os.environ.get("CODA_TEST_DEVICE") or "cuda")
FP32 = torch.float32

pytestmark = pytest.mark.skipif(DEVICE.type == "cuda" and not hopper(),
                                reason="needs torch with CUDA and an sm_90 GPU (CODA_TEST_DEVICE=cpu runs these "
                                       "checks on the emulator)")

# name -> (function, shape): M tokens, d hidden, F FFN width, heads (hq, hkv, hd); y0 has hq hd columns.
CASES = {
    # LLaMA-like: 2 x 128 tokens, GQA 4 / 2 heads of 64 (N3 = 512), F = 704 (5.5 tiles of 128).
    "block-llama": ("llama3_block", dict(m=256, d=256, f=704, heads=(4, 2, 64))),
    # Ragged everywhere: M = 200 (one full and one partial 128-row granule), d = 200 (a partial
    # 128-column granule), F = 360 (2F = 720), head_dim 48 (no power of two; N3 = 336, y0 240 wide).
    "block-awkward": ("llama3_block", dict(m=200, d=200, f=360, heads=(5, 1, 48))),
    "qkv_rope-ragged": ("rmsnorm_qkv_rope", dict(m=200, d=256, heads=(4, 2, 64))),
    # The awkward block with y1 saved by the forward (keep_y1): the SwiGLU backward without its o.
    "block-awkward-keep-y1": ("llama3_block", dict(m=200, d=200, f=360, heads=(5, 1, 48))),
}
KEEP_Y1 = {"block-awkward-keep-y1"}


def poison_free_memory():
    """Fill the CUDA caching allocator's free memory with 0xFF bytes. empty_cache() first returns the
    unused segments to the driver; then 256 MiB for the large pool (requests over 1 MiB are split
    from it), 64 MiB of 512 KiB blocks for the small pool (2 MiB segments), and halving sizes down to
    512 B for the free tails of segments that hold live tensors. All freed again, still cached."""
    if DEVICE.type != "cuda":
        return
    torch.cuda.empty_cache()
    sizes = [256 << 20, *[1 << 19] * 128, *[1 << s for s in range(18, 8, -1) for _ in range(4)]]
    blocks = [torch.empty(n, dtype=torch.uint8, device=DEVICE) for n in sizes]
    for b in blocks:
        b.fill_(0xFF)  # on the current stream, the one coda's ops and the blocks' next users run on


def inputs(name, gen, m, d, heads, f=None):
    """({input name: fp32 CPU tensor}, positions, freqs); weights with sd 1/sqrt(fan-in)."""
    hq, hkv, hd = heads
    n3, k = (hq + 2 * hkv) * hd, hq * hd
    w = lambda n, fan_in: randn(gen, n, fan_in, sd=fan_in ** -0.5, dtype=FP32)  # noqa: E731
    gain = lambda n: 1 + 0.2 * torch.randn(n, generator=gen)  # noqa: E731
    pos, freqs = qkv_args(gen, m, heads)
    if name == "llama3_block":
        ins = dict(y0=randn(gen, m, k, dtype=FP32), x0=randn(gen, m, d, dtype=FP32), w0=w(d, k), w1=w(2 * f, d),
                   w2=w(d, f), w3=w(n3, d), n0=gain(d), n1=gain(d))
    else:
        ins = dict(h=randn(gen, m, d, dtype=FP32), w=w(n3, d), r=positive(gen, m))
    return ins, pos, freqs


def functions(name, pos, freqs, heads, device, keep_y1=False):
    """(coda's function, the unfused eager graph) with positions and freqs on `device`."""
    pos, freqs = pos.to(device), freqs.to(device)
    if name == "llama3_block":
        return (lambda *a: coda.llama3_block(*a, pos, freqs, heads, eps=EPS, keep_y1=keep_y1),
                lambda *a: eager_block(*a, pos, freqs, heads))
    return (lambda h, w, r: (coda.rmsnorm_qkv_rope(h, w, r, pos, freqs, heads),),
            lambda h, w, r: eager_qkv_rope(h, w, r, pos, freqs, heads))


def run(fn, tensors, cotangents, device, gen=None):
    """Outputs of fn on `device`, the gradients of sum(out * cotangent) with respect to every input,
    and the cotangents (float64 on the CPU; drawn from gen when None)."""
    leaves = [t.to(device).detach().clone().requires_grad_() for t in tensors]
    out = fn(*leaves)
    cotangents = cotangents or [torch.randn(o.shape, generator=gen, dtype=F64) for o in out]
    sum((o.to(F64) * c.to(o.device)).sum() for o, c in zip(out, cotangents)).backward()
    return out, [t.grad for t in leaves], cotangents


@pytest.mark.parametrize("case", list(CASES))
def test_both_backward_paths_on_device(gen, case, monkeypatch):
    name, shape = CASES[case]
    ins, pos, freqs = inputs(name, gen, **shape)
    heads = shape["heads"]
    names = list(ins)
    fused, eager = functions(name, pos, freqs, heads, DEVICE, keep_y1=case in KEEP_Y1)
    _, eager_cpu = functions(name, pos, freqs, heads, "cpu")

    # The truth: float64 autograd of the eager graph on the CPU, on the unrounded inputs.
    want, want_grads, cot = run(eager_cpu, [t.to(F64) for t in ins.values()], None, "cpu", gen)
    # The unfused bf16 PyTorch pipeline on the device, and coda's inputs: bf16 but rstd (fp32).
    low = [t if n == "r" else t.to(BF16) for n, t in ins.items()]
    base, base_grads, _ = run(eager, low, cot, DEVICE)
    base, base_grads = [t.cpu() for t in base], [t.cpu() for t in base_grads]

    got = {}
    for path in ("composed", "fused"):
        calls = select_backward(monkeypatch, path)
        poison_free_memory()
        out, grads, _ = run(fused, low, cot, DEVICE)
        if DEVICE.type == "cuda":
            torch.cuda.synchronize(DEVICE)  # a kernel fault surfaces here, in this path's test
        assert_ops_called(calls, name, path)
        for label, t, ref in [*((f"output {i}", o, w) for i, (o, w) in enumerate(zip(out, want))),
                              *((f"d{n}", g, w) for n, g, w in zip(names, grads, want_grads))]:
            where = f"{case} ({path} backward) {label}"
            assert t is not None and t.shape == ref.shape, f"{where}: {None if t is None else t.shape}"
            assert t.device.type == DEVICE.type, f"{where}: on {t.device}"
            bad = (~torch.isfinite(t)).sum().item()
            assert bad == 0, f"{where}: {bad} of {t.numel()} elements not finite (unwritten or overflowed)"
        out, grads = [t.cpu() for t in out], [t.cpu() for t in grads]
        for i, (g, w, b) in enumerate(zip(out, want, base)):
            assert_rule(f"{case} ({path}) output {i}", g, w, b)
        for n, g, w, b in zip(names, grads, want_grads, base_grads):
            assert g.dtype == (FP32 if n == "r" else BF16), f"{case} ({path}) d{n}: dtype {g.dtype}"
            assert_rule(f"{case} ({path}) d{n}", g, w, b)
        got[path] = out, grads

    # One forward (the backward path is chosen at the forward, not by it): the same bits.
    for i, (a, b) in enumerate(zip(got["composed"][0], got["fused"][0])):
        assert torch.equal(a, b), f"{case} output {i}: composed and fused runs' forwards differ"
    for n, c, f in zip(names, got["composed"][1], got["fused"][1]):
        assert rel_error(f, c) < AGREE, f"{case} d{n}: fused and composed backward {rel_error(f, c)} apart"


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_lm_head_on_device(gen, reduction):
    """lm_head_cross_entropy (M 300: a partial row granule; V 1003: grad's rows padded; rstd; every
    fourth row ignored): the loss and the gradients of h, w and rstd against float64 under the rule,
    every result finite; a second backward through the same forward (retain_graph=True) gives the
    same bits; lm_head_backward from the same forward's grad and grad_scale within rounding of the
    Function's dh and dw."""
    m, d, v = 300, 256, 1003
    t = lm_targets(gen, m, v)
    ins = dict(h=randn(gen, m, d, dtype=FP32), w=randn(gen, v, d, sd=d ** -0.5, dtype=FP32), r=positive(gen, m))

    def fused(h, w, r):
        return (coda.lm_head_cross_entropy(h, w, t.to(h.device), rstd=r, reduction=reduction),)

    def eager(h, w, r):
        return eager_lm_head(h, w, r, t.to(h.device), reduction=reduction)

    want, want_grads, cot = run(eager, [x.to(F64) for x in ins.values()], None, "cpu", gen)
    low = [x if n == "r" else x.to(BF16) for n, x in ins.items()]
    base, base_grads, _ = run(eager, low, cot, DEVICE)
    poison_free_memory()
    leaves = [x.to(DEVICE).detach().clone().requires_grad_() for x in low]
    loss = fused(*leaves)[0] * cot[0].item()
    first = torch.autograd.grad(loss, leaves, retain_graph=True)
    second = torch.autograd.grad(loss, leaves)
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)
    assert torch.isfinite(loss).item()
    assert_rule("loss", loss.detach().cpu() / cot[0].item(), want[0], base[0].cpu(), eps=1e-3)
    for n, g, g2, w, b in zip(ins, first, second, want_grads, base_grads):
        assert g.device.type == DEVICE.type and g.shape == w.shape, f"d{n}: {g.device}, {tuple(g.shape)}"
        bad = (~torch.isfinite(g)).sum().item()
        assert bad == 0, f"d{n}: {bad} of {g.numel()} elements not finite (unwritten or overflowed)"
        assert torch.equal(g, g2), f"d{n}: the second backward differs from the first"
        assert_rule(f"lm_head ({reduction}) d{n}", g.cpu(), w, b.cpu())
    # The fused backward operator on the same forward's outputs (dh = da, dw = db; no drstd).
    h, w, r = (x.to(DEVICE) for x in low)
    _, grad, grad_scale, _ = coda.lm_head_train(h, w, t.to(DEVICE).to(torch.int32), rstd=r, reduction=reduction)
    da, db = coda.lm_head_backward(h, w, grad, grad_scale, rstd=r, dloss=torch.tensor(cot[0].item(), device=DEVICE))
    assert rel_error(da.cpu(), first[0].cpu()) < 1e-2 and rel_error(db.cpu(), first[1].cpu()) < 1e-2
