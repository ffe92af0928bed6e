"""coda.functional: the autograd Functions of the fused operators, checked two ways.

1. torch.autograd.gradcheck in float64 checks the *backward formulas and code*. coda's kernels
   take bf16/fp16/fp32 only, so float64 inputs run the Functions' reference path: the same
   Function classes and the same backward code (the helpers every backward is composed of), with
   the forward math and the backward GEMMs in torch float64 where the coda path calls its
   kernels and coda.gemm. gradcheck then compares that backward with finite differences of the
   float64 forward. It does not check coda's kernels; (2) does.
2. bf16, and float32 under torch.autocast, through coda's kernels (the CPU emulator here): every
   output and every input's gradient against float64 autograd of an unfused eager graph written
   below in plain torch (independent of coda.functional), under design.md's rule: the error is
   at most 2x that of the same eager graph run in bf16 (the unfused PyTorch pipeline), plus 1e-4.
Fresh random inputs and cotangents every run (the seed is printed).

The Functions with a fused backward (llama3_block, rmsnorm_qkv_rope; the fused one is the default,
CODA_FUSED_BACKWARD=0 selects the composed one) run every check of their backward on both paths,
the fused one with the variable unset (so that the default is what is tested) and the composed one
with it set to "0", and each such test also checks which path ran (the calls of coda's backward
operators, or of the fused path's float64 reference helpers); test_fused_backward_agrees_with_composed
compares the two paths, test_backward_path_switch the variable's values.
"""

import math

import pytest
import torch
from torch.nn import functional as F

import coda
from common import BF16, F64, assert_rule, positive, randn, rel_error

FP32 = torch.float32
EPS = 1e-5


# ---- the unfused eager graphs (plain torch; run in float64 for the truth, in bf16 for the baseline) --------

def rmsnorm(x, w, eps=EPS):
    """transformers' LlamaRMSNorm: statistics in fp32 (float64 for float64)."""
    xf = x.to(torch.promote_types(x.dtype, FP32))
    return w * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rstd(x, eps=EPS):
    xf = x.to(torch.promote_types(x.dtype, FP32))
    return torch.rsqrt(xf.pow(2).mean(-1) + eps)


def swiglu(z):
    return F.silu(z[:, 0::2]) * z[:, 1::2]


def rope(t, positions, freqs, heads):
    """RoPE on interleaved pairs as complex multiplication (torchtitan's form), v unrotated."""
    hq, hkv, hd = heads
    rc = (hq + hkv) * hd
    wide = torch.promote_types(t.dtype, FP32)
    theta = 2 * math.pi * positions.to(F64)[:, None] * freqs.to(F64)[None, :]
    rot = torch.polar(torch.ones_like(theta), theta).to(torch.complex128 if wide == F64 else torch.complex64)
    qk = torch.view_as_complex(t[:, :rc].to(wide).reshape(t.shape[0], hq + hkv, hd // 2, 2).contiguous())
    out = torch.view_as_real(qk * rot[:, None, :]).reshape(t.shape[0], rc).to(t.dtype)
    return torch.cat((out, t[:, rc:]), dim=1)


def eager_residual_rmsnorm(a, w, nw, res):
    x = F.linear(a, w) + res
    return x, x * nw, rstd(x)


def normed(h, r):
    """RMSNorm(x) from the split (h = x * w, r): materialized in h's dtype, as an unfused graph does."""
    return (h.to(torch.promote_types(h.dtype, FP32)) * r[:, None]).to(h.dtype)


def eager_swiglu(h, w, r):
    return (swiglu(F.linear(normed(h, r), w)),)


def eager_qkv_rope(h, w, r, positions, freqs, heads):
    return (rope(F.linear(normed(h, r), w), positions, freqs, heads),)


def eager_lm_head(h, w, r, targets, reduction="mean"):
    logits = F.linear(normed(h, r), w)
    return (F.cross_entropy(logits.to(torch.promote_types(h.dtype, FP32)), targets.long(),
                            ignore_index=coda.IGNORE_INDEX, reduction=reduction),)


def eager_block(y0, x0, w0, w1, w2, w3, n0, n1, positions, freqs, heads):
    x1 = x0 + F.linear(y0, w0)
    x2 = x1 + F.linear(swiglu(F.linear(rmsnorm(x1, n0), w1)), w2)
    return x2, rope(F.linear(rmsnorm(x2, n1), w3), positions, freqs, heads)


# ---- cases: (fused function, eager graph, inputs) --------------------------------------------------------------

HEADS = (4, 2, 16)


def qkv_args(gen, m, heads=HEADS):
    return (torch.randint(0, 1 << 16, (m,), generator=gen, dtype=torch.int32),
            coda.rope_frequencies(heads[2], 500000.0, factor=8.0))


def lm_targets(gen, m, v):
    t = torch.randint(0, v, (m,), generator=gen)
    t[::4] = coda.IGNORE_INDEX
    return t


def case(name, gen, m=37, k=40, d=64, f=48, v=517, heads=HEADS):
    """(fused fn, eager fn, {input name: fp32 value}): y0 [m, k], hidden d, FFN f, vocabulary v."""
    n3 = (heads[0] + 2 * heads[1]) * heads[2]
    gain = lambda n: 1 + 0.2 * torch.randn(n, generator=gen)  # noqa: E731
    if name == "residual_rmsnorm":
        ins = dict(a=randn(gen, m, k, dtype=FP32), w=randn(gen, d, k, sd=0.3, dtype=FP32), nw=gain(d),
                   res=randn(gen, m, d, dtype=FP32))
        return (lambda a, w, nw, res: coda.residual_rmsnorm(a, w, nw, residual=res, eps=EPS),
                eager_residual_rmsnorm, ins)
    if name == "rmsnorm_swiglu":
        ins = dict(h=randn(gen, m, d, dtype=FP32), w=randn(gen, 2 * f, d, sd=0.3, dtype=FP32), r=positive(gen, m))
        return coda.rmsnorm_swiglu, eager_swiglu, ins
    if name == "rmsnorm_qkv_rope":
        pos, freqs = qkv_args(gen, m, heads)
        ins = dict(h=randn(gen, m, d, dtype=FP32), w=randn(gen, n3, d, sd=0.3, dtype=FP32), r=positive(gen, m))
        return (lambda h, w, r: coda.rmsnorm_qkv_rope(h, w, r, pos, freqs, heads),
                lambda h, w, r: eager_qkv_rope(h, w, r, pos, freqs, heads), ins)
    if name == "lm_head_cross_entropy":  # V = 517: the stored logits have padded rows (stride 520)
        t = lm_targets(gen, m, v)
        ins = dict(h=randn(gen, m, d, dtype=FP32), w=randn(gen, v, d, sd=0.3, dtype=FP32), r=positive(gen, m))
        return (lambda h, w, r: (coda.lm_head_cross_entropy(h, w, t, rstd=r),),
                lambda h, w, r: eager_lm_head(h, w, r, t), ins)
    if name in ("llama3_block", "llama3_block_keep_y1"):
        keep = name == "llama3_block_keep_y1"  # y1 saved by the forward instead of recomputed
        pos, freqs = qkv_args(gen, m, heads)
        ins = dict(y0=randn(gen, m, k, dtype=FP32), x0=randn(gen, m, d, dtype=FP32),
                   w0=randn(gen, d, k, sd=0.3, dtype=FP32), w1=randn(gen, 2 * f, d, sd=0.3, dtype=FP32),
                   w2=randn(gen, d, f, sd=0.3, dtype=FP32), w3=randn(gen, n3, d, sd=0.3, dtype=FP32),
                   n0=gain(d), n1=gain(d))
        return (lambda *a: coda.llama3_block(*a, pos, freqs, heads, eps=EPS, keep_y1=keep),
                lambda *a: eager_block(*a, pos, freqs, heads), ins)
    raise KeyError(name)


NAMES = ["residual_rmsnorm", "rmsnorm_swiglu", "rmsnorm_qkv_rope", "lm_head_cross_entropy", "llama3_block",
         "llama3_block_keep_y1"]
UNROUNDED = ("nw", "n0", "n1", "r")  # norm weights and rstd: fp32 in the float32 case, never cast


# ---- the two backward paths -----------------------------------------------------------------------------------

# The Functions with a fused backward, and the calls one backward makes to coda's operators on that path
# (coda.functional mirrors the C++ llama3_backward: two RMSNorm backwards, each with its norm-weight finish).
FUSED_OPS = {
    "rmsnorm_qkv_rope": {"rope_backward": 1},
    "llama3_block": {"rope_backward": 1, "gemm_rmsnorm_backward": 2, "col_sum_finish": 2, "gemm_swiglu_backward": 1,
                     "row_sum_finish": 1},
}
FUSED_OPS["llama3_block_keep_y1"] = FUSED_OPS["llama3_block"]
BACKWARD_OPS = ("rope_backward", "gemm_rmsnorm_backward", "col_sum_finish", "gemm_swiglu_backward", "row_sum_finish")
# The float64 reference path runs the fused schedule through these helpers instead of coda's kernels.
FUSED_HELPERS = {
    "rmsnorm_qkv_rope": ("_rope_backward_fused",),
    "llama3_block": ("_rope_backward_fused", "_rmsnorm_backward_fused", "_swiglu_backward_fused"),
}
FUSED_HELPERS["llama3_block_keep_y1"] = FUSED_HELPERS["llama3_block"]
ALL_HELPERS = ("_rope_backward_fused", "_rmsnorm_backward_fused", "_swiglu_backward_fused")


def with_paths(names):
    """(name, backward path) pairs: both paths for the Functions that have a fused backward."""
    return [(n, p) for n in names for p in (("composed", "fused") if n in FUSED_OPS else ("composed",))]


def select_backward(monkeypatch, path, module=coda.ops, names=BACKWARD_OPS):
    """CODA_FUSED_BACKWARD unset for the fused path (the default), "0" for the composed one; every
    function in `names` of `module` wrapped to count its calls. Returns {name: calls} (filled as the
    test runs)."""
    if path == "fused":
        monkeypatch.delenv("CODA_FUSED_BACKWARD", raising=False)
    else:
        monkeypatch.setenv("CODA_FUSED_BACKWARD", "0")
    calls = dict.fromkeys(names, 0)
    for op in names:
        def spy(*args, _real=getattr(module, op), _op=op, **kwargs):
            calls[_op] += 1
            return _real(*args, **kwargs)
        monkeypatch.setattr(module, op, spy)
    return calls


def assert_ops_called(calls, name, path):
    """The backward of one call ran on the path asked for: exactly the fused path's operator calls,
    or none of them on the composed path."""
    want = FUSED_OPS.get(name, {}) if path == "fused" else {}
    assert calls == {op: want.get(op, 0) for op in calls}, f"{name} ({path} backward): operator calls {calls}"


def run(fn, tensors, cotangents):
    """Outputs of fn and the gradients of sum(out * cotangent) with respect to every input."""
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    out = fn(*leaves)
    out = (out,) if isinstance(out, torch.Tensor) else out
    cotangents = cotangents or [torch.randn(o.shape, dtype=F64) for o in out]
    sum((o.to(F64) * c).sum() for o, c in zip(out, cotangents)).backward()
    return out, [t.grad for t in leaves], cotangents


# ---- 1. the backward formulas: gradcheck in float64 -------------------------------------------------------

@pytest.mark.parametrize("name,path", with_paths(NAMES))
def test_gradcheck_float64(gen, name, path, monkeypatch):
    """Reference path (see the module docstring): the Functions' backward code against finite
    differences, for every differentiable input; the fused path's schedule through its float64
    reference of each fused operator."""
    calls = select_backward(monkeypatch, path, coda.functional, ALL_HELPERS)
    fused, _, ins = case(name, gen, m=6, k=8, d=16, f=12, v=11, heads=(2, 1, 4))  # 2F, F != d
    inputs = [t.to(F64).requires_grad_() for t in ins.values()]
    assert torch.autograd.gradcheck(lambda *a: fused(*a), inputs)
    used = FUSED_HELPERS.get(name, ()) if path == "fused" else ()
    assert all((calls[h] > 0) == (h in used) for h in ALL_HELPERS), calls


@pytest.mark.parametrize("path", ["composed", "fused"])
def test_gradcheck_float64_variants(gen, path, monkeypatch):
    """No rstd (the plain GEMM), the summed loss with dloss != 1, qkv_rope without norm."""
    calls = select_backward(monkeypatch, path, coda.functional, ALL_HELPERS)
    h, r = torch.randn(6, 16, dtype=F64, requires_grad=True), (torch.rand(6, dtype=F64) + 0.5).requires_grad_()
    w = torch.randn(12, 16, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda h, w: coda.rmsnorm_swiglu(h, w), (h, w))
    t = lm_targets(gen, 6, 12)
    assert torch.autograd.gradcheck(lambda h, w, r: 3 * coda.lm_head_cross_entropy(h, w, t, r, reduction="sum"),
                                    (h, w, r))
    pos, freqs = qkv_args(gen, 6)
    wq = torch.randn(128, 16, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda h, w: coda.rmsnorm_qkv_rope(h, w, None, pos, freqs, HEADS), (h, wq))
    assert (calls["_rope_backward_fused"] > 0) == (path == "fused"), calls


# ---- 2. through coda's kernels: every output and gradient against float64 -----------------------------------

@pytest.mark.parametrize("dtype", ["bf16", "fp32-autocast"])
@pytest.mark.parametrize("name,path", with_paths(NAMES))
def test_gradients_against_float64(gen, name, path, dtype, monkeypatch):
    calls = select_backward(monkeypatch, path)
    fused, eager, ins = case(name, gen)
    names, values = list(ins), list(ins.values())
    want, want_grads, cot = run(eager, [t.to(F64) for t in values], None)
    # The unfused bf16 PyTorch pipeline: the same graph on the inputs as bf16 (rstd stays fp32).
    base, base_grads, _ = run(eager, [t if n == "r" else t.to(BF16) for n, t in ins.items()], cot)
    if dtype == "bf16":
        got, got_grads, _ = run(fused, [t if n == "r" else t.to(BF16) for n, t in ins.items()], cot)
    else:  # fp32 leaves, norm weights fp32: autocast casts the GEMM operands to bf16; grads come back fp32
        with torch.autocast("cpu", dtype=BF16):
            got, got_grads, _ = run(fused, values, cot)
        assert all(g.dtype == FP32 for g in got_grads)
    for i, (g, w, b) in enumerate(zip(got, want, base)):
        # A 0-dim output (the loss) is a single draw of rounding noise: eps 1e-3, a quarter of
        # bf16's unit roundoff, instead of 1e-4.
        assert_rule(f"{name} output {i}", g, w, b, eps=1e-3 if w.dim() == 0 else 1e-4)
    for n, g, w, b in zip(names, got_grads, want_grads, base_grads):
        assert g is not None and g.shape == w.shape, f"{name}: no gradient for '{n}'"
        assert_rule(f"{name} d{n}", g, w, b)
    assert_ops_called(calls, name, path)


@pytest.mark.parametrize("name,path", with_paths(["llama3_block", "lm_head_cross_entropy"]))
def test_torch_compile_fullgraph_with_backward(gen, name, path, monkeypatch):
    """torch.compile(fullgraph=True) traces the Functions, their composed backward included (a
    graph break there is an error under fullgraph), and the compiled gradients keep the rule. The
    block's backward uses every helper of the other Functions'; the LM head's scales the saved grad
    per row (dloss * grad_scale). The block's fused backward (the default; CODA_FUSED_BACKWARD
    is read when the graph is traced) calls the same emulator operators as eagerly: the same bits,
    which the composed backward would not give."""
    select_backward(monkeypatch, path, names=())  # no spies: a counter is a side effect dynamo refuses
    fused, eager, ins = case(name, gen)
    want, want_grads, cot = run(eager, [t.to(F64) for t in ins.values()], None)
    base, base_grads, _ = run(eager, [t if n == "r" else t.to(BF16) for n, t in ins.items()], cot)
    torch._dynamo.reset()
    compiled = torch.compile(fused, fullgraph=True)
    got, got_grads, _ = run(compiled, [t if n == "r" else t.to(BF16) for n, t in ins.items()], cot)
    for i, (g, w, b) in enumerate(zip(got, want, base)):
        assert_rule(f"compiled {name} output {i}", g, w, b, eps=1e-3 if w.dim() == 0 else 1e-4)
    for n, g, w, b in zip(ins, got_grads, want_grads, base_grads):
        assert g is not None and g.shape == w.shape, f"compiled {name}: no gradient for '{n}'"
        assert_rule(f"compiled {name} d{n}", g, w, b)
    if path == "fused":
        _, eager_grads, _ = run(fused, [t if n == "r" else t.to(BF16) for n, t in ins.items()], cot)
        for n, g, e in zip(ins, got_grads, eager_grads):
            assert torch.equal(g, e), f"compiled {name} d{n}: not the eager fused backward's bits"


@pytest.mark.parametrize("path", ["composed", "fused"])
def test_block_is_the_chain_of_operators(gen, path, monkeypatch):
    """llama3_block's forward runs the same kernels as residual_rmsnorm -> rmsnorm_swiglu ->
    residual_rmsnorm -> rmsnorm_qkv_rope (bit for bit); its backward recomputes h1, h2, y1 instead
    of saving them, so the gradients agree to bf16 rounding. On the fused path the block runs the
    fused schedule, the chain its Functions' backwards (rmsnorm_qkv_rope's on rope_backward)."""
    calls = select_backward(monkeypatch, path)
    _, _, ins = case("llama3_block", gen)
    pos, freqs = qkv_args(gen, 37)
    values = [t if n in UNROUNDED else t.to(BF16) for n, t in ins.items()]

    def chain(y0, x0, w0, w1, w2, w3, n0, n1):
        x1, h1, r1 = coda.residual_rmsnorm(y0, w0, n0, residual=x0, eps=EPS)
        x2, h2, r2 = coda.residual_rmsnorm(coda.rmsnorm_swiglu(h1, w1, r1), w2, n1, residual=x1, eps=EPS)
        return x2, coda.rmsnorm_qkv_rope(h2, w3, r2, pos, freqs, HEADS)

    block = lambda *a: coda.llama3_block(*a, pos, freqs, HEADS, eps=EPS)  # noqa: E731
    out, grads, cot = run(block, values, None)
    assert_ops_called(calls, "llama3_block", path)
    out2, grads2, _ = run(chain, values, cot)
    assert all(torch.equal(a, b) for a, b in zip(out, out2))
    for n, a, b in zip(ins, grads, grads2):
        assert ((a.double() - b.double()).norm() / b.double().norm()).item() < 2e-2, n


# ---- the fused backward against the composed one ---------------------------------------------------------------

AGREE = 1.5e-2  # the paths round differently (fused: fp32 epilogues on x; composed: torch on h): about 5e-3 apart


@pytest.mark.parametrize("grads", ["all", "x2 only", "qkv only", "activations only", "expanded"])
def test_fused_backward_agrees_with_composed(gen, grads, monkeypatch):
    """The fused backward (the default) against the composed one (CODA_FUSED_BACKWARD=0) on the same
    inputs and cotangents: llama3_block at awkward sizes (M 37, d 72, F 40; heads 5 / 2 of 12:
    N3 = 108, qkv rows padded to 16 bytes, dqkv copied to such rows), every gradient against float64
    under the rule and the two paths within AGREE of each other; then rmsnorm_qkv_rope alone. The
    cotangent reaching only x2 (dqkv None), only qkv (dx2 None: no residual gradient to add) or
    frozen weights and norm weights (no y / o recomputed) exercise the fused schedule's branches;
    sums of the outputs give expanded cotangents (stride 0), which the fused path copies into tile
    rows."""
    heads = (5, 2, 12)
    fused, eager, ins = case("llama3_block", gen, m=37, k=72, d=72, f=40, heads=heads)
    values = [t.to(BF16) for t in ins.values()]
    train = [n in ("y0", "x0") or grads != "activations only" for n in ins]
    used = {"all": (1, 1), "x2 only": (1, 0), "qkv only": (0, 1), "activations only": (1, 1), "expanded": (1, 1)}[grads]

    def run_masked(fn, tensors, cot):
        leaves = [t.detach().clone().requires_grad_(r) for t, r in zip(tensors, train)]
        out = fn(*leaves)
        if grads == "expanded":  # d(sum o)/do: ones expanded from a scalar, in o's dtype
            sum(o.sum().to(F64) for o in out).backward()
        else:
            sum(u * (o.to(F64) * c).sum() for u, o, c in zip(used, out, cot) if u).backward()
        return out, [t.grad for t in leaves]

    cot = [torch.randn(o.shape, dtype=F64) for o in eager(*[t.to(F64) for t in ins.values()])]
    want = run_masked(eager, [t.to(F64) for t in ins.values()], cot)[1]
    base = run_masked(eager, values, cot)[1]  # the unfused bf16 pipeline
    got = {}
    for path in ("composed", "fused"):
        calls = select_backward(monkeypatch, path)
        got[path] = run_masked(fused, values, cot)
        want_calls = dict(FUSED_OPS["llama3_block"]) if path == "fused" else {}
        if path == "fused" and not used[1]:  # no dqkv: no RoPE backward, no RMSNorm backward of x2
            want_calls.update(rope_backward=0, gemm_rmsnorm_backward=1, col_sum_finish=1)
        if path == "fused" and grads == "activations only":  # no norm-weight gradients to finish
            want_calls.update(col_sum_finish=0)
        assert calls == {op: want_calls.get(op, 0) for op in calls}, f"{path}: {calls}"
    assert all(torch.equal(a, b) for a, b in zip(got["fused"][0], got["composed"][0]))  # one forward
    for n, w, b, c, f in zip(ins, want, base, got["composed"][1], got["fused"][1]):
        if w is None:
            assert c is None and f is None, n
            continue
        assert_rule(f"fused d{n}", f, w, b)
        assert rel_error(f, c) < AGREE, f"d{n}: fused and composed backward {rel_error(f, c)} apart"

    # rmsnorm_qkv_rope on its own: rope_backward against the torch inverse rotation.
    h, w, r = randn(gen, 37, 72), randn(gen, 108, 72, sd=0.3), positive(gen, 37)
    pos, freqs = qkv_args(gen, 37, heads)
    qkv_cot = torch.randn(37, 108, dtype=F64)
    grads_by_path = {}
    for path in ("composed", "fused"):
        select_backward(monkeypatch, path)
        leaves = [t.clone().requires_grad_() for t in (h, w, r)]
        (coda.rmsnorm_qkv_rope(*leaves, pos, freqs, heads).to(F64) * qkv_cot).sum().backward()
        grads_by_path[path] = [t.grad for t in leaves]
    for n, c, f in zip("hwr", grads_by_path["composed"], grads_by_path["fused"]):
        assert rel_error(f, c) < AGREE, f"rmsnorm_qkv_rope d{n}: {rel_error(f, c)} apart"


@pytest.mark.parametrize("value,path", [(None, "fused"), ("1", "fused"), ("", "fused"), ("0", "composed")])
def test_backward_path_switch(gen, value, path, monkeypatch):
    """CODA_FUSED_BACKWARD unset (the default), "1" or any other value but "0": llama3_block and
    rmsnorm_qkv_rope run the fused backward (their calls of coda's backward operators); exactly "0":
    the composed one (none of those calls). The variable is read at the forward: the backward follows
    the forward's choice, whatever the variable says when it runs."""
    calls = select_backward(monkeypatch, path)  # the spies; the variable is set below
    for name in ("llama3_block", "rmsnorm_qkv_rope"):
        if value is None:
            monkeypatch.delenv("CODA_FUSED_BACKWARD", raising=False)
        else:
            monkeypatch.setenv("CODA_FUSED_BACKWARD", value)
        assert coda.functional._fused_backward() == (path == "fused")
        fn, _, ins = case(name, gen)
        leaves = [(t if n in UNROUNDED else t.to(BF16)).requires_grad_() for n, t in ins.items()]
        out = fn(*leaves)
        out = (out,) if isinstance(out, torch.Tensor) else out
        monkeypatch.setenv("CODA_FUSED_BACKWARD", "0" if path == "fused" else "1")  # too late to matter
        sum(o.float().sum() for o in out).backward()
        assert all(t.grad is not None for t in leaves), name
        assert_ops_called(calls, name, path)
        calls.update(dict.fromkeys(calls, 0))


# ---- the LM head in training mode -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [BF16, torch.float16])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_lm_head_backward_twice(gen, reduction, dtype, monkeypatch):
    """The forward is one lm_head_train (bf16: no logits, no gemm_lse; fp16, which lm_head_train does
    not take: gemm_lse and the in-place dlogits pass of cross_entropy_grad_, both in the forward);
    the backward only reads the saved grad, so a second backward through the same forward
    (retain_graph=True) gives the same gradients, bit for bit, with a different dloss scaling them
    exactly."""
    calls = select_backward(monkeypatch, "fused", names=("lm_head_train", "gemm_lse", "cross_entropy_grad_"))
    h, w, r = randn(gen, 8, 16, dtype=dtype), randn(gen, 24, 16, dtype=dtype), positive(gen, 8)
    for x in (h, w, r):
        x.requires_grad_()
    t = torch.randint(0, 24, (8,), generator=gen)
    t[3] = coda.IGNORE_INDEX
    loss = coda.lm_head_cross_entropy(h, w, t, rstd=r, reduction=reduction)
    fp16 = dtype == torch.float16
    want = {"lm_head_train": int(not fp16), "gemm_lse": int(fp16), "cross_entropy_grad_": int(fp16)}
    assert calls == want, calls
    first = torch.autograd.grad(loss, (h, w, r), retain_graph=True)
    second = torch.autograd.grad(loss, (h, w, r), retain_graph=True)
    for n, a, b in zip("hwr", first, second):
        assert torch.equal(a, b), f"d{n}: the second backward differs from the first"
    (2 * loss).backward()  # dloss = 2: a power of two scales every gradient exactly (but fp16's subnormals)
    for n, a, b in zip("hwr", first, (h.grad, w.grad, r.grad)):
        assert (rel_error(b, 2 * a) < 1e-3) if fp16 else torch.equal(2 * a, b), f"d{n}: dloss 2 is not twice dloss 1"
    assert calls == want, calls  # the backward runs no pass over an [M, V] tensor


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_lm_head_fp16_against_float64(gen, reduction):
    """fp16 (the stored-logits forward): the loss and every gradient against float64 autograd of the
    eager graph under the rule, the baseline the eager graph in fp16."""
    _, _, ins = case("lm_head_cross_entropy", gen)
    t = lm_targets(gen, 37, 517)

    def fused(h, w, r):
        return (coda.lm_head_cross_entropy(h, w, t, rstd=r, reduction=reduction),)

    def eager(h, w, r):
        return eager_lm_head(h, w, r, t, reduction=reduction)

    want, want_grads, cot = run(eager, [x.to(F64) for x in ins.values()], None)
    low = [x if n == "r" else x.to(torch.float16) for n, x in ins.items()]
    base, base_grads, _ = run(eager, low, cot)
    got, got_grads, _ = run(fused, low, cot)
    assert_rule("fp16 loss", got[0], want[0], base[0], eps=1e-3)
    for n, g, w, b in zip(ins, got_grads, want_grads, base_grads):
        assert g.dtype == (FP32 if n == "r" else torch.float16), f"d{n}: {g.dtype}"
        assert_rule(f"fp16 d{n}", g, w, b)


def test_lm_head_all_ignored_and_int64_targets(gen):
    h, w = randn(gen, 8, 16).requires_grad_(), randn(gen, 24, 16).requires_grad_()
    loss = coda.lm_head_cross_entropy(h, w, torch.full((8,), coda.IGNORE_INDEX, dtype=torch.int64))
    loss.backward()
    assert loss.item() == 0 and not h.grad.any() and not w.grad.any()


# ---- errors ---------------------------------------------------------------------------------------------------

def test_errors(gen):
    h, w, r = randn(gen, 8, 16), randn(gen, 12, 16), positive(gen, 8)
    with pytest.raises(ValueError, match=r"rmsnorm_swiglu: arguments 'h' torch.float32, 'gate_up_weight' "
                                         r"torch.bfloat16: coda's GEMMs take bfloat16 or float16"):
        coda.rmsnorm_swiglu(h.float(), w, r)
    with pytest.raises(ValueError, match=r"argument 'gate_up_weight' must be \[N, K\] with K = 16"):
        coda.rmsnorm_swiglu(h, randn(gen, 12, 24), r)
    with pytest.raises(ValueError, match=r"'gate_up_weight' must have an even number of rows"):
        coda.rmsnorm_swiglu(h, randn(gen, 7, 16), r)
    with pytest.raises(ValueError, match=r"argument 'rstd' must have shape \(8,\)"):
        coda.rmsnorm_swiglu(h, w, r[:4])
    with pytest.raises(ValueError, match=r"argument 'h' must be 2-D"):
        coda.rmsnorm_swiglu(h.view(2, 4, 16), w, r)
    pos, freqs = qkv_args(gen, 8)
    with pytest.raises(ValueError, match=r"'qkv_weight' must have \(heads_q \+ 2 heads_kv\) head_dim = 128 rows"):
        coda.rmsnorm_qkv_rope(h, w, r, pos, freqs, HEADS)
    with pytest.raises(ValueError, match=r"'reduction' must be 'mean' or 'sum'"):
        coda.lm_head_cross_entropy(h, w, torch.zeros(8, dtype=torch.int64), reduction="none")
    with pytest.raises(ValueError, match=r"residual_rmsnorm: argument 'residual' must have shape \(8, 12\)"):
        coda.residual_rmsnorm(h, w, torch.ones(12), residual=randn(gen, 8, 16))
