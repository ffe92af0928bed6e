"""The Python package over libcoda.so: every op on CPU tensors (the CPU emulator behind the C ABI)
against a float64 torch computation of the same math under design.md's rule, opcheck per op,
torch.compile(fullgraph=True) of a small block, errors as Python exceptions with coda's message.
On a Hopper GPU the same ops also run on CUDA tensors against the CPU results.

Run: python tests/python/run.py (what CTest runs), or pytest tests/python with python/ on the path.
"""

import math
import os

import pytest
import torch

import coda

from common import BF16, F64, assert_rule, hopper, positive, randn, rel_error, rounded

# ---- helpers ----------------------------------------------------------------------------------------------

def padded(t):
    """A copy of a 2-D tensor whose rows start on 16-byte boundaries (what coda asks of tile
    operands), as a view of the first columns of a wider buffer."""
    per16 = 16 // t.element_size()
    ld = -(-t.shape[1] // per16) * per16
    out = torch.zeros(t.shape[0], ld, dtype=t.dtype)[:, :t.shape[1]]
    out.copy_(t)
    return out


def swiglu64(z):
    g, u = z[:, 0::2], z[:, 1::2]
    return g * torch.sigmoid(g) * u


def rope64(x, pos, freqs, heads):
    """RoPE on interleaved pairs of the q and k heads (coda-math.md 5.4), float64."""
    hq, hkv, hd = heads
    rc = (hq + hkv) * hd
    f = freqs.to(F64)[(torch.arange(0, rc, 2) % hd) // 2]
    turns = pos.to(F64)[:, None] * f[None, :]
    theta = 2 * math.pi * (turns - torch.floor(turns))
    c, s = torch.cos(theta), torch.sin(theta)
    out = x.clone()
    xe, xo = x[:, 0:rc:2], x[:, 1:rc:2]
    out[:, 0:rc:2] = xe * c - xo * s
    out[:, 1:rc:2] = xe * s + xo * c
    return out


def qknorm64(x, gq, gk, heads, eps):
    hq, hkv, hd = heads
    out = x.clone()
    for h in range(hq + hkv):
        seg = x[:, h * hd:(h + 1) * hd]
        r = torch.rsqrt(seg.pow(2).mean(dim=1, keepdim=True) + eps)
        out[:, h * hd:(h + 1) * hd] = seg * r * (gq if h < hq else gk).to(F64)
    return out


def cross_entropy64(logits, targets, ignore_index=coda.IGNORE_INDEX):
    """Per-row loss, lse, the mean loss and dlogits of the mean (0 for ignored rows), float64."""
    keep = targets != ignore_index
    lse = torch.logsumexp(logits, dim=1)
    safe = torch.where(keep, targets, 0).long()
    target_logit = logits.gather(1, safe[:, None])[:, 0]
    row = torch.where(keep, lse - target_logit, torch.zeros_like(lse))
    count = int(keep.sum())
    dl = torch.softmax(logits, dim=1)
    dl[torch.arange(len(safe)), safe] -= 1
    dl = torch.where(keep[:, None], dl / max(count, 1), torch.zeros_like(dl))
    return row, lse, (row.sum() / count if count else row.sum() * 0), dl


# ---- the operators on CPU against float64 ---------------------------------------------------------------

@pytest.mark.parametrize("form", ["forward", "dgrad", "wgrad"])
@pytest.mark.parametrize("out_dtype", [None, torch.float32])
def test_gemm(gen, form, out_dtype):
    m, n, k = (37 if form != "wgrad" else 40), 72, 40  # wgrad's a is M-major: 16-byte rows of M
    if form == "forward":
        a, b = randn(gen, m, k), randn(gen, n, k)
    elif form == "dgrad":  # b = W [K, N] viewed as [N, K]
        a, b = randn(gen, m, k), randn(gen, k, n).t()
    else:  # a = dY^T, b = X^T, both transposed views
        a, b = randn(gen, k, m).t(), randn(gen, k, n).t()
    d = coda.gemm(a, b, out_dtype=out_dtype)
    assert d.shape == (m, n) and d.dtype == (out_dtype or BF16)
    want = a.to(F64) @ b.to(F64).t()
    assert_rule("d", d, want, rounded(want, out_dtype or BF16))


def test_gemm_ex_and_padded_rows(gen):
    m, n, k = 9, 21, 16  # 21 bf16 columns: rows padded to 24 in the output's storage
    a, b, c = randn(gen, m, k), randn(gen, n, k), padded(randn(gen, m, n))
    d = coda.gemm(a, b, c=c, alpha=0.5, beta=-2.0)
    assert d.shape == (m, n) and d.stride() == (24, 1)
    want = 0.5 * (a.to(F64) @ b.to(F64).t()) - 2.0 * c.to(F64)
    assert_rule("d", d, want, rounded(0.5 * rounded(a.to(F64) @ b.to(F64).t()) - 2.0 * c.to(F64)))


def test_gemm_empty(gen):
    a, b = torch.empty(0, 16, dtype=BF16), randn(gen, 8, 16)
    assert coda.gemm(a, b).shape == (0, 8)


def test_residual_rmsnorm_partial_and_finish(gen):
    m, n, k = 33, 296, 48  # three column granules of 128, the last partial
    a, w, res = randn(gen, m, k), randn(gen, n, k, sd=0.3), randn(gen, m, n)
    g = (1 + 0.2 * torch.randn(n, generator=gen)).to(BF16)
    x, h, p = coda.gemm_residual_rmsnorm_partial(a, w, g, residual=res)
    r = coda.rms_finish(p, n, 1e-5)
    g_cols = coda.PARTIAL_COLS
    assert p.shape == (m, -(-n // g_cols)) and r.shape == (m,) and r.dtype == torch.float32
    ab = a.to(F64) @ w.to(F64).t()
    x64, xu = ab + res.to(F64), rounded(rounded(ab) + res.to(F64))
    assert_rule("x", x, x64, xu)
    assert_rule("h", h, x64 * g.to(F64), rounded(xu * g.to(F64)))
    def granules(t):
        return torch.stack([c.pow(2).sum(1) for c in t.split(g_cols, dim=1)], dim=1)

    assert_rule("partials", p, granules(x64), granules(xu))
    assert_rule("rstd", r, torch.rsqrt(x64.pow(2).mean(1) + 1e-5), torch.rsqrt(xu.pow(2).mean(1) + 1e-5))

    # In place of the residual: the same bits.
    res2 = res.clone()
    h2, p2 = coda.gemm_residual_rmsnorm_partial_(a, w, res2, g)
    assert torch.equal(res2, x) and torch.equal(h2, h) and torch.equal(p2, p)


@pytest.mark.parametrize("with_rstd", [True, False])
def test_swiglu(gen, with_rstd):
    m, f, k = 29, 68, 56
    a, w = randn(gen, m, k), randn(gen, 2 * f, k, sd=0.4)
    r = positive(gen, m)
    if with_rstd:
        z, o = coda.gemm_rmsnorm_swiglu(a, w, r, save_z=True)
        assert torch.equal(coda.gemm_rmsnorm_swiglu(a, w, r), o)
    else:
        z, o = coda.gemm_swiglu(a, w, save_z=True)
        r = torch.ones(m)
    ab = a.to(F64) @ w.to(F64).t()
    z64, zu = r.to(F64)[:, None] * ab, rounded(r.to(F64)[:, None] * rounded(ab))
    assert_rule("z", z, z64, zu)
    assert_rule("o", o, swiglu64(z64), rounded(swiglu64(zu)))


@pytest.mark.parametrize("with_rstd", [True, False])
def test_rope(gen, with_rstd):
    heads = (4, 2, 16)
    m, k, n3 = 23, 32, (4 + 2 * 2) * 16
    a, w = randn(gen, m, k), randn(gen, n3, k, sd=0.4)
    r = positive(gen, m) if with_rstd else torch.ones(m)
    pos = torch.randint(0, 4096, (m,), generator=gen, dtype=torch.int32)
    freqs = coda.rope_frequencies(16, 500000.0, factor=8.0)
    out = (coda.gemm_rmsnorm_rope(a, w, r, pos, freqs, heads) if with_rstd
           else coda.gemm_rope(a, w, pos, freqs, heads))
    ab = a.to(F64) @ w.to(F64).t()
    pre64, preu = r.to(F64)[:, None] * ab, rounded(r.to(F64)[:, None] * rounded(ab))
    assert_rule("out", out, rope64(pre64, pos, freqs, heads), rounded(rope64(preu, pos, freqs, heads)))


@pytest.mark.parametrize("head_dim", [16, 64, 512])
def test_qkv_sqsum_and_qknorm_rope(gen, head_dim):
    heads = (4, 2, head_dim)
    m, k, n3 = 19, 24, (4 + 2 * 2) * head_dim
    a, w = randn(gen, m, k), randn(gen, n3, k, sd=0.4)
    r = positive(gen, m)
    qkv, ss = coda.gemm_qkv_sqsum(a, w, heads, rstd=r)
    assert ss.shape == (m, 6 * coda.qk_segments(head_dim))
    gq = (1 + 0.2 * torch.randn(head_dim, generator=gen)).to(BF16)
    gk = (1 + 0.2 * torch.randn(head_dim, generator=gen)).to(BF16)
    pos = torch.randint(0, 4096, (m,), generator=gen, dtype=torch.int32)
    freqs = coda.rope_frequencies(head_dim, 10000.0)
    out = coda.qknorm_rope(qkv, ss, gq, gk, pos, freqs, heads, 1e-6)
    ab = a.to(F64) @ w.to(F64).t()
    pre64, preu = r.to(F64)[:, None] * ab, rounded(r.to(F64)[:, None] * rounded(ab))
    assert_rule("qkv", qkv, pre64, preu)
    want = rope64(qknorm64(pre64, gq, gk, heads, 1e-6), pos, freqs, heads)
    assert_rule("out", out, want, rounded(rope64(qknorm64(preu, gq, gk, heads, 1e-6), pos, freqs, heads)))


def lm_case(gen, m=37, v=517, k=32):
    a, w = randn(gen, m, k), randn(gen, v, k, sd=0.5)
    r = positive(gen, m)
    t = torch.randint(0, v, (m,), generator=gen, dtype=torch.int32)
    t[::3] = coda.IGNORE_INDEX
    l64 = r.to(F64)[:, None] * (a.to(F64) @ w.to(F64).t())
    lu = rounded(rounded(r.to(F64)[:, None] * a.to(F64)) @ w.to(F64).t())
    return a, w, r, t, l64, lu


def test_lm_head_training_path(gen):
    """gemm_rmsnorm_lse with logits (V = 517: padded rows), lse_finish, cross_entropy_grad_."""
    a, w, r, t, l64, lu = lm_case(gen)
    logits, partials, target_logit = coda.gemm_rmsnorm_lse(a, w, r, t, save_logits=True)
    assert logits.shape == (37, 517) and logits.stride() == (520, 1)
    assert partials.shape == (37, -(-517 // coda.PARTIAL_COLS))
    lse = coda.lse_finish(partials)
    loss, row = coda.cross_entropy_grad_(lse, target_logit, t, logits)  # logits become dlogits
    row64, lse64, loss64, dl64 = cross_entropy64(l64, t)
    rowu, lseu, _, dlu = cross_entropy64(lu, t)
    assert_rule("lse", lse, lse64, lseu)
    assert_rule("row loss", row, row64, rowu)
    assert loss.shape == () and math.isclose(loss.item(), row.double().sum().item() / int((t >= 0).sum()),
                                             rel_tol=1e-5)
    assert_rule("dlogits", logits, dl64, rounded(dlu))


def test_lm_head_logits_free(gen):
    """gemm_lse + lse_finish + cross_entropy (no logits) equals lm_head_loss bit for bit."""
    a, w, r, t, l64, lu = lm_case(gen)
    partials, target_logit = coda.gemm_rmsnorm_lse(a, w, r, t)
    lse = coda.lse_finish(partials)
    loss, row = coda.cross_entropy(lse, target_logit, t, reduction="sum")
    loss2, row2, lse2 = coda.lm_head_loss(a, w, t, rstd=r, reduction="sum")
    assert torch.equal(loss, loss2) and torch.equal(row, row2) and torch.equal(lse, lse2)
    row64, _, _, _ = cross_entropy64(l64, t)
    rowu, _, _, _ = cross_entropy64(lu, t)
    assert_rule("row loss", row2, row64, rowu)
    assert math.isclose(loss2.item(), row2.double().sum().item(), rel_tol=1e-5)
    # Without rstd (gemm_lse): the plain logits.
    partials, target_logit = coda.gemm_lse(a, w, t)
    row64, _, _, _ = cross_entropy64(a.to(F64) @ w.to(F64).t(), t)
    _, row = coda.cross_entropy(coda.lse_finish(partials), target_logit, t)
    assert rel_error(row, row64) < 1e-3


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_lm_head_train_and_backward(gen, reduction):
    """lm_head_train (V = 517: grad has padded rows): the loss, lse and dlogits = grad_scale * grad
    against float64 under the rule; lm_head_backward's da, db against float64 and against the same
    GEMMs composed in torch from grad and grad_scale; dloss as a float or a tensor: the same bits."""
    a, w, r, t, l64, lu = lm_case(gen)
    loss, grad, u, lse = coda.lm_head_train(a, w, t, rstd=r, reduction=reduction)
    assert loss.shape == () and loss.dtype == torch.float32
    assert grad.shape == (37, 517) and grad.stride() == (520, 1) and grad.dtype == BF16
    assert u.shape == (37,) and u.dtype == torch.float32 and lse.shape == (37,)
    keep = t != coda.IGNORE_INDEX
    assert not u[~keep].any(), "ignored rows have grad_scale 0"
    row64, lse64, _, dl64 = cross_entropy64(l64, t)
    rowu, lseu, _, dlu = cross_entropy64(lu, t)
    count = int(keep.sum()) if reduction == "mean" else 1
    assert_rule("lse", lse, lse64, lseu)
    assert math.isclose(loss.item(), row64.sum().item() / count, rel_tol=1e-3)
    # dlogits of the mean from the forward's two outputs (the sum's is count times larger)
    assert_rule("dlogits", u.double()[:, None] * grad.double() / (1 if reduction == "mean" else int(keep.sum())),
                dl64, rounded(dlu))
    # lm_head_loss's loss and lse up to rounding (lm_head_train sums the stored, rounded E)
    loss2, _, lse2 = coda.lm_head_loss(a, w, t, rstd=r, reduction=reduction)
    assert math.isclose(loss.item(), loss2.item(), rel_tol=1e-3) and rel_error(lse, lse2) < 1e-3

    dloss = 0.75
    da, db = coda.lm_head_backward(a, w, grad, u, rstd=r, dloss=dloss, db_dtype=torch.float32)
    assert da.shape == (37, 32) and da.dtype == BF16 and db.shape == (517, 32) and db.dtype == torch.float32
    scale = dloss * (1 if reduction == "mean" else int(keep.sum()))  # dl64 is the mean's
    r64, a64, w64 = r.to(F64)[:, None], a.to(F64), w.to(F64)
    da64, db64 = scale * r64 * (dl64 @ w64), scale * dl64.t() @ (r64 * a64)
    au = rounded(r64 * a64)
    dlu = rounded(scale * dlu)
    assert_rule("da", da, da64, rounded(r64 * rounded(dlu @ w64)))
    assert_rule("db", db, db64, dlu.t() @ au)
    # The same GEMMs composed in torch from grad and s = dloss u rstd.
    s = (dloss * u.double() * r.double())[:, None]
    assert rel_error(da, s * (grad.double() @ w64)) < 1e-2
    assert rel_error(db, grad.double().t() @ (s * a64)) < 1e-2
    # dloss read from a tensor; one output only.
    da2, db2 = coda.lm_head_backward(a, w, grad, u, rstd=r, dloss=torch.tensor(dloss), db_dtype=torch.float32)
    assert torch.equal(da, da2) and torch.equal(db, db2)
    none, db3 = coda.lm_head_backward(a, w, grad, u, rstd=r, dloss=dloss, need_da=False)
    assert none is None and db3.dtype == BF16 and rel_error(db3, db) < 1e-2
    with pytest.raises(ValueError, match="argument 'dloss' as a tensor must be one float32 element"):
        coda.lm_head_backward(a, w, grad, u, rstd=r, dloss=torch.ones(2))
    with pytest.raises(ValueError, match=r"lm_head_backward: argument 'grad'"):
        coda.lm_head_backward(a, w, grad[:, :516], u, rstd=r)
    with pytest.raises(ValueError, match=r"lm_head_train: argument 'a' must be bf16"):
        coda.lm_head_train(a.half(), w.half(), t)


def test_lm_head_train_exact_rows(gen):
    """A row whose largest logit lies far above the first 128 classes' (its shifted sum overflows
    fp32) takes lm_head_train's exact path: still dlogits = grad_scale * grad to float64 under the rule."""
    m, v, k = 9, 300, 32
    a, w = randn(gen, m, k), randn(gen, v, k, sd=0.5)
    w[v - 1] = torch.where(a[1] >= 0, 32.0, -32.0).to(BF16)  # class v - 1 aligned with row 1
    t = torch.randint(0, v, (m,), generator=gen, dtype=torch.int32)
    l64 = a.to(F64) @ w.to(F64).t()
    assert (l64[1, 128:].max() - l64[1, :128].max()).item() > 130
    loss, grad, u, lse = coda.lm_head_train(a, w, t)
    row64, lse64, _, dl64 = cross_entropy64(l64, t)
    _, lseu, _, dlu = cross_entropy64(rounded(l64), t)
    assert_rule("lse", lse, lse64, lseu)
    assert_rule("dlogits", u.double()[:, None] * grad.double(), dl64, rounded(dlu))
    assert math.isclose(loss.item(), row64.mean().item(), rel_tol=1e-3)


# ---- the backward operators on CPU against float64 -------------------------------------------------------

def granule_sums(t, dim, size):
    """Sums of t over consecutive granules of `size` along `dim` (the partial-reduction layout)."""
    return torch.stack([c.sum(dim) for c in t.split(size, dim=dim)], dim=dim)


@pytest.mark.parametrize("m", [37, 150])  # one row granule, or two with the last one partial
@pytest.mark.parametrize("with_dres", [True, False])
@pytest.mark.parametrize("save_y", [True, False])
def test_gemm_rmsnorm_backward_and_col_sum_finish(gen, m, with_dres, save_y):
    d, k = 72, 40  # the consuming GEMM: z = RMSNorm(x) W^T, W [k, d]; dz [m, k]
    dz, w = randn(gen, m, k), randn(gen, k, d, sd=0.3)
    x = randn(gen, m, d)
    r = torch.rsqrt(x.float().pow(2).mean(1) + 1e-5)
    c = 0.1 * torch.randn(m, generator=gen)  # zdz: (1/d) sum_k z dz of the consuming GEMM
    nw = (1 + 0.2 * torch.randn(d, generator=gen)).to(BF16)
    dres = randn(gen, m, d) if with_dres else None
    out = coda.gemm_rmsnorm_backward(dz, w.t(), x, r, c, nw, dres=dres, save_y=save_y)  # b: the dgrad form
    assert len(out) == (3 if save_y else 2)
    dx, q = out[0], out[-1]
    assert dx.shape == (m, d) and dx.dtype == BF16
    assert q.shape == (-(-m // coda.PARTIAL_ROWS), d) and q.dtype == torch.float32
    r64, c64, nw64, x64 = r.to(F64)[:, None], c.to(F64)[:, None], nw.to(F64), x.to(F64)
    dres64 = 0 if dres is None else dres.to(F64)
    dy, xh = dz.to(F64) @ w.to(F64), x64 * r64
    dyu, xhu = rounded(dy), rounded(xh)  # an unfused graph stores dy and the normalized x
    assert_rule("dx", dx, r64 * (dy * nw64 - xh * c64) + dres64, rounded(r64 * (dyu * nw64 - xhu * c64) + dres64))
    if save_y:
        assert out[1].shape == (m, d) and out[1].dtype == BF16
        assert_rule("y", out[1], xh * nw64, rounded(xhu * nw64))
    q64, qu = granule_sums(dy * xh, 0, coda.PARTIAL_ROWS), granule_sums(dyu * xhu, 0, coda.PARTIAL_ROWS)
    assert_rule("dw_partials", q, q64, qu)
    for dtype in (None, torch.float32, BF16):
        dnw = coda.col_sum_finish(q, out_dtype=dtype)
        assert dnw.shape == (d,) and dnw.dtype == (dtype or torch.float32)
        assert_rule("dnorm_weight", dnw, q64.sum(0), rounded(qu.sum(0), dtype or torch.float32))


@pytest.mark.parametrize("f", [40, 136])  # one column granule of o, or two with the last one partial
@pytest.mark.parametrize("save_o", [True, False])
def test_gemm_swiglu_backward_and_row_sum_finish(gen, f, save_o):
    m, d = 37, 72  # do = dY Wdown^T... in the dgrad form: dY [m, d], Wdown [d, f]
    dy, wd = randn(gen, m, d), randn(gen, d, f, sd=0.3)
    z = randn(gen, m, 2 * f, sd=2.0)
    out = coda.gemm_swiglu_backward(dy, wd.t(), z, save_o=save_o, save_zdz=True)
    assert len(out) == (3 if save_o else 2)
    dz, p = out[0], out[-1]
    assert dz.shape == (m, 2 * f) and dz.dtype == BF16
    assert p.shape == (m, -(-f // coda.PARTIAL_COLS)) and p.dtype == torch.float32
    assert torch.equal(coda.gemm_swiglu_backward(dy, wd.t(), z), dz)  # dz alone
    g, u = z.to(F64)[:, 0::2], z.to(F64)[:, 1::2]
    s = torch.sigmoid(g)

    def grad(do):  # dg = do u s (1 + g (1 - s)), du = do silu(g), interleaved like z
        return torch.stack((do * u * s * (1 + g * (1 - s)), do * g * s), dim=2).flatten(1)

    do64 = dy.to(F64) @ wd.to(F64)
    dz64, dzu = grad(do64), rounded(grad(rounded(do64)))
    assert_rule("dz", dz, dz64, dzu)
    if save_o:
        assert out[1].shape == (m, f) and out[1].dtype == BF16
        assert_rule("o", out[1], swiglu64(z.to(F64)), rounded(swiglu64(z.to(F64))))
    pairs = lambda t: (z.to(F64) * t).unflatten(1, (f, 2)).sum(2)  # noqa: E731  g dg + u du per o column
    p64, pu = granule_sums(pairs(dz64), 1, coda.PARTIAL_COLS), granule_sums(pairs(dzu), 1, coda.PARTIAL_COLS)
    assert_rule("zdz_partials", p, p64, pu)
    zdz = coda.row_sum_finish(p, 1.0 / d)
    assert zdz.shape == (m,) and zdz.dtype == torch.float32
    assert_rule("zdz", zdz, p64.sum(1) / d, pu.sum(1) / d)


def test_rope_backward(gen):
    heads = (5, 2, 12)  # 5 q heads over 2 kv heads; N3 = 108: rows of 216 bytes, padded to 16
    m, n3 = 37, (5 + 2 * 2) * 12
    qkv, dqkv = padded(randn(gen, m, n3)), padded(randn(gen, m, n3))
    pos = torch.randint(0, 1 << 17, (m,), generator=gen, dtype=torch.int32)
    freqs = coda.rope_frequencies(12, 500000.0, factor=8.0)
    dz, zdz = coda.rope_backward(qkv, dqkv, pos, freqs, heads, save_zdz=True, zdz_scale=0.25)
    assert dz.shape == (m, n3) and dz.dtype == BF16 and dz.stride() == (112, 1)
    assert zdz.shape == (m,) and zdz.dtype == torch.float32
    dz64 = rope64(dqkv.to(F64), -pos.to(F64), freqs, heads)  # R(-theta): q and k heads; v as it is
    assert torch.equal(dz[:, (5 + 2) * 12:], dqkv[:, (5 + 2) * 12:])
    assert_rule("dz", dz, dz64, rounded(dz64))
    zdz64 = 0.25 * (qkv.to(F64) * dqkv.to(F64)).sum(1)
    assert_rule("zdz", zdz, zdz64, zdz64.float())
    assert torch.equal(coda.rope_backward(qkv, dqkv, pos, freqs, heads), dz)  # without zdz


def test_backward_operator_errors(gen):
    dz, w, x = randn(gen, 8, 16), randn(gen, 16, 24), randn(gen, 8, 24)
    r, c, nw = positive(gen, 8), torch.zeros(8), torch.ones(24, dtype=BF16)
    with pytest.raises(ValueError, match=r"^gemm_rmsnorm_backward: argument 'zdz' must have shape \[8\], got \[5\]"):
        coda.gemm_rmsnorm_backward(dz, w.t(), x, r, c[:5], nw)
    with pytest.raises(ValueError, match=r"^gemm_rmsnorm_backward: argument 'x' must be 2-D, got shape \(192,\)"):
        coda.gemm_rmsnorm_backward(dz, w.t(), x.flatten(), r, c, nw)
    with pytest.raises(ValueError, match=r"^gemm_swiglu_backward: argument 'z' must have shape \[8, 48\]"):
        coda.gemm_swiglu_backward(x, randn(gen, 24, 24).t(), randn(gen, 8, 40))
    pos, freqs = torch.arange(8, dtype=torch.int32), coda.rope_frequencies(8, 10000.0)
    with pytest.raises(ValueError, match=r"^rope_backward: argument 'dqkv' must be 2-D"):
        coda.rope_backward(randn(gen, 8, 32), randn(gen, 256), pos, freqs, (2, 1, 8))
    with pytest.raises(ValueError, match=r"^rope_backward: argument 'positions' holds a negative value"):
        coda.rope_backward(randn(gen, 8, 32), randn(gen, 8, 32), -pos, freqs, (2, 1, 8))
    with pytest.raises(ValueError, match=r"^col_sum_finish: argument 'out_dtype' must be torch.bfloat16"):
        coda.col_sum_finish(torch.rand(2, 5), out_dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^row_sum_finish: argument 'partials' must have dtype fp32, got bf16"):
        coda.row_sum_finish(torch.rand(2, 5).to(BF16))


def test_weight_layout_helpers(gen):
    gate, up = randn(gen, 12, 8), randn(gen, 12, 8)
    gu = coda.interleave_gate_up(gate, up)
    assert torch.equal(gu[0::2], gate) and torch.equal(gu[1::2], up)
    heads = (2, 1, 8)
    w = randn(gen, 32, 8)
    wp = coda.permute_rotate_half_to_interleaved(w, heads)
    for h in range(3):  # q, q, k heads: rows (i, i + 4) -> (2i, 2i + 1)
        blk, blkp = w[h * 8:(h + 1) * 8], wp[h * 8:(h + 1) * 8]
        assert torch.equal(blkp[0::2], blk[:4]) and torch.equal(blkp[1::2], blk[4:])
    assert torch.equal(wp[24:], w[24:])  # v copied


def test_rope_frequencies():
    f = coda.rope_frequencies(64, 10000.0)
    want = torch.tensor([10000.0 ** (-2 * i / 64) / (2 * math.pi) for i in range(32)], dtype=F64)
    assert f.dtype == torch.float32 and rel_error(f, want) < 1e-6


# ---- errors -----------------------------------------------------------------------------------------------

def test_bad_shape_raises_value_error_with_codas_message(gen):
    a, b = randn(gen, 8, 16), randn(gen, 24, 24)  # K differs
    with pytest.raises(ValueError, match=r"^gemm: argument 'b' must be \[N, K\] with K = 16"):
        coda.gemm(a, b)
    z_w = randn(gen, 7, 16)  # odd N: SwiGLU pairs
    with pytest.raises(ValueError, match=r"gemm_swiglu: argument 'b' must have an even number of rows"):
        coda.gemm_swiglu(a, z_w)
    t = torch.full((8,), 3, dtype=torch.int32)
    t[5] = 99  # outside [0, V): the emulator reads host targets and says so
    with pytest.raises(ValueError, match=r"argument 'targets' holds 99 at row 5"):
        coda.lm_head_loss(a, randn(gen, 24, 16), t)


def test_other_errors():
    with pytest.raises(ValueError, match=r"coda: argument 'a' has dtype torch.float64"):
        coda.gemm(torch.zeros(8, 16, dtype=F64), torch.zeros(8, 16, dtype=F64))
    with pytest.raises(ValueError, match=r"'reduction' must be 'mean' or 'sum'"):
        coda.cross_entropy(torch.zeros(2), torch.zeros(2), torch.zeros(2, dtype=torch.int32), reduction="max")
    with pytest.raises(ValueError, match=r"coda_rope_frequencies: argument 'head_dim' must be even"):
        coda.rope_frequencies(63)
    # A status other than invalid-argument is a RuntimeError carrying coda's message.
    from coda import _lib
    assert _lib.lib.coda_device_check(-1) != 0
    with pytest.raises(RuntimeError, match="coda_device_check"):
        _lib.check(_lib.ERROR_NOT_SUPPORTED)


def test_library_found():
    assert os.path.isfile(coda.library_path)
    if os.environ.get("CODA_LIBRARY"):
        assert os.path.samefile(coda.library_path, os.environ["CODA_LIBRARY"])
    assert coda.__version__ == coda.version() == "0.1.0"


# ---- opcheck: schema, fake implementation, autograd registration, AOT dispatch -----------------------------

def opcheck_cases():
    g = torch.Generator().manual_seed(7)
    m, k, n = 12, 16, 40
    a, w, res = randn(g, m, k), randn(g, n, k), randn(g, m, n)
    norm = torch.ones(n, dtype=BF16)
    r = positive(g, m)
    heads = (2, 1, 8)
    wq = randn(g, 32, k)
    pos = torch.arange(m, dtype=torch.int32)
    freqs = coda.rope_frequencies(8, 10000.0)
    qkv, ss = coda.gemm_qkv_sqsum(a, wq, heads)
    v = 24  # opcheck clones the mutated logits densely: rows must be 16-byte multiples as they are
    wv = randn(g, v, k)
    t = torch.randint(0, v, (m,), generator=g, dtype=torch.int32)
    t[2] = coda.IGNORE_INDEX
    logits, lp, tl = coda.gemm_lse(a, wv, t, save_logits=True)
    lse = coda.lse_finish(lp)
    _, lm_grad, lm_u, _ = coda.lm_head_train(a, wv, t, rstd=r)
    ops = torch.ops.coda
    return {
        "gemm": (ops.gemm, (a, w, None, 1.0, 1.0, None)),
        "gemm_ex": (ops.gemm, (a, w, res, 0.5, 2.0, torch.float32)),
        "gemm_residual_rmsnorm_partial": (ops.gemm_residual_rmsnorm_partial, (a, w, res, norm, 1.0)),
        "gemm_residual_rmsnorm_partial_": (ops.gemm_residual_rmsnorm_partial_, (a, w, res.clone(), norm, 1.0)),
        "rms_finish": (ops.rms_finish, (torch.rand(m, 2), n, 1e-5)),
        "gemm_swiglu": (ops.gemm_swiglu, (a, w, None, True)),
        "gemm_rmsnorm_swiglu": (ops.gemm_rmsnorm_swiglu, (a, w, r, False)),
        "gemm_rope": (ops.gemm_rope, (a, wq, None, pos, freqs, *heads)),
        "gemm_rmsnorm_rope": (ops.gemm_rmsnorm_rope, (a, wq, r, pos, freqs, *heads)),
        "gemm_qkv_sqsum": (ops.gemm_qkv_sqsum, (a, wq, r, *heads)),
        "qknorm_rope": (ops.qknorm_rope, (qkv, ss, norm[:8], norm[:8], pos, freqs, *heads, 1e-6)),
        "gemm_lse": (ops.gemm_lse, (a, wv, None, t, coda.IGNORE_INDEX, True)),
        "gemm_rmsnorm_lse": (ops.gemm_rmsnorm_lse, (a, wv, r, t, coda.IGNORE_INDEX, False)),
        "lse_finish": (ops.lse_finish, (lp,)),
        "cross_entropy": (ops.cross_entropy, (lse, tl, t, coda.IGNORE_INDEX, "mean")),
        "cross_entropy_grad_": (ops.cross_entropy_grad_, (lse, tl, t, logits.clone(), coda.IGNORE_INDEX, "sum", 2.0)),
        "lm_head_loss": (ops.lm_head_loss, (a, wv, r, t, coda.IGNORE_INDEX, "mean")),
        "lm_head_train": (ops.lm_head_train, (a, wv, r, t, coda.IGNORE_INDEX, "sum")),
        "lm_head_backward": (ops.lm_head_backward, (a, wv, r, lm_grad, lm_u, 0.5, None, True, True, torch.float32)),
        "lm_head_backward_dloss_tensor": (ops.lm_head_backward, (a, wv, None, lm_grad, lm_u, 1.0, torch.tensor(2.0),
                                                                 False, True, None)),
        "gemm_rmsnorm_backward": (ops.gemm_rmsnorm_backward, (a, randn(g, k, n).t(), res, r, positive(g, m), norm,
                                                              res.clone(), True)),
        "gemm_swiglu_backward": (ops.gemm_swiglu_backward, (a, randn(g, k, 24).t(), randn(g, m, 48), True, True)),
        "row_sum_finish": (ops.row_sum_finish, (torch.rand(m, 2), 0.5)),
        "col_sum_finish": (ops.col_sum_finish, (torch.rand(2, n), BF16)),
        "rope_backward": (ops.rope_backward, (coda.gemm_rope(a, wq, pos, freqs, heads), randn(g, m, 32), pos, freqs,
                                              *heads, True, 0.25)),
        "interleave_gate_up": (ops.interleave_gate_up, (a, randn(g, m, k))),
        "permute_rotate_half_to_interleaved": (ops.permute_rotate_half_to_interleaved, (wq, *heads)),
    }


@pytest.mark.parametrize("name", list(opcheck_cases().keys()))
def test_opcheck(name):
    op, args = opcheck_cases()[name]
    torch.library.opcheck(op, args)


# ---- torch.compile --------------------------------------------------------------------------------------

def mlp_block(x0, y0, wo, norm_w, wgu, wd):
    """x1 = y0 Wo^T + x0; RMSNorm(x1) -> SwiGLU MLP; x2 = o Wd^T + x1 (coda-math.md 6)."""
    x1, h1, p = coda.gemm_residual_rmsnorm_partial(y0, wo, norm_w, residual=x0)
    r1 = coda.rms_finish(p, wo.shape[0])
    o = coda.gemm_rmsnorm_swiglu(h1, wgu, r1)
    return coda.gemm(o, wd, c=x1)


def test_torch_compile_fullgraph(gen):
    m, d, f = 24, 64, 96
    args = (randn(gen, m, d), randn(gen, m, d), randn(gen, d, d, sd=0.2), torch.ones(d, dtype=BF16),
            randn(gen, 2 * f, d, sd=0.2), randn(gen, d, f, sd=0.2))
    torch._dynamo.reset()
    compiled = torch.compile(mlp_block, fullgraph=True)
    assert torch.equal(compiled(*args), mlp_block(*args))  # the same emulator calls: the same bits
    # A new batch size reuses or recompiles the graph without breaking it.
    args2 = (randn(gen, 40, d), randn(gen, 40, d), *args[2:])
    assert torch.equal(compiled(*args2), mlp_block(*args2))


# ---- CUDA tensors (Hopper only) ---------------------------------------------------------------------------

@pytest.mark.skipif(not hopper(), reason="needs torch with CUDA and an sm_90 GPU")
def test_cuda_matches_the_emulator(gen):
    m, f, k, v = 300, 520, 256, 1003
    a, w, r = randn(gen, m, k), randn(gen, 2 * f, k, sd=0.1), positive(gen, m)
    t = torch.randint(0, v, (m,), generator=gen, dtype=torch.int32)
    wv = randn(gen, v, k, sd=0.1)
    cpu = [coda.gemm_rmsnorm_swiglu(a, w, r), coda.lm_head_loss(a, wv, t, rstd=r)[1]]
    dev = torch.device("cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # the ops launch on the current stream
        cuda = [coda.gemm_rmsnorm_swiglu(a.to(dev), w.to(dev), r.to(dev)),
                coda.lm_head_loss(a.to(dev), wv.to(dev), t.to(dev), rstd=r.to(dev))[1]]
    stream.synchronize()
    for x, y in zip(cpu, cuda):
        assert y.is_cuda and rel_error(y.cpu(), x) < 1e-2
    # A host tensor among device ones: coda names it.
    with pytest.raises(ValueError, match="points to host memory but argument 'a' to device memory"):
        torch.ops.coda.gemm_rmsnorm_swiglu(a.to(dev), w.to(dev), r, False)
