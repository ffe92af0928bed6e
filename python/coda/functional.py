"""coda's fused operators with autograd: torch.autograd.Functions behind plain functions.

    x1, h1, r1 = coda.residual_rmsnorm(y0, w_o, norm_w, residual=x0)      # x1 = y0 Wo^T + x0
    o = coda.rmsnorm_swiglu(h1, w_gate_up, r1)                           # SwiGLU(RMSNorm(x1) Wgu^T)
    loss = coda.lm_head_cross_entropy(h, w_vocab, targets, rstd=r)        # no [M, V] tensor kept but one

The RMSNorm is split as in coda-math.md 5.1: the GEMM that produces x returns (x, h = x * w,
rstd), and the consuming GEMM takes (h, rstd) and scales its rows by rstd in its epilogue, so
RMSNorm(x) is never written. Gradients flow into every tensor input that requires them: activations,
weights, norm weights and the residual; rstd is a differentiable output like any other.

Backward passes of llama3_block and rmsnorm_qkv_rope are *fused* by default: they run on coda's
backward operators. llama3_block runs the schedule of the C++ llama3_backward
(include/coda/block/llama3.hpp, coda-math.md 6) step for step: rope_backward (dz2, ZdZ2),
gemm_rmsnorm_backward (dx over dx2, n2, dnorm1 partials) and col_sum_finish, gemm_swiglu_backward
(dz1, y1, ZdZ1 partials) and row_sum_finish, gemm_rmsnorm_backward (dx0 over dx, n1, dnorm0
partials) and col_sum_finish; every weight gradient and dy0 through coda.gemm. rmsnorm_qkv_rope
un-rotates its gradient with rope_backward. Measured on an H200 (e2b5eba, examples/train_llama.py,
1B-shaped model, 8 layers, seq 2048, batch 8, 50 steps): 100.5 K tokens/s fused against 78.5 K
composed (+28%), 103.6 K against 100.7 K under torch.compile (coda_compile); final losses within
bf16 noise of each other. The fused path takes every input the forward takes (the operands its
operators need as row-major tiles, incoming gradients and weights, are copied into 16-byte rows
where they are not; float64 runs each fused operator's float64 reference), so no input needs the
composed path. It saves qkv (the output, which the caller's attention keeps anyway): modifying the
returned qkv in place before the backward makes autograd refuse the backward (in-place error);
CODA_FUSED_BACKWARD=0 does not save it.

The other Functions, and these two with CODA_FUSED_BACKWARD=0 in the environment (exactly "0"; any
other value, or none, is the fused default), run the *composed* backward: the GEMMs (dX = dZ W,
dW = dZ^T Y) through coda.gemm (coda's GEMM on CUDA, its emulator on CPU, transposes through
strides), the elementwise math (SwiGLU', inverse RoPE, the RMSNorm backward of coda-math.md 5.2 with
its ZdZ row dot) in torch. It stays as the cross-check of the fused path and its fallback. The other
Functions have no fused backward: their fusable pieces span two Functions (the dgrad GEMM of one,
the norm or SwiGLU backward of the other). The variable is read at every forward (the backward
follows the forward's choice); under torch.compile it is read when the graph is traced (dynamo does
not guard on it: torch._dynamo.reset() after changing it).

Dtypes: activations and weights bfloat16 or float16 (one of them per call), norm weights bf16/fp16/
fp32, rstd fp32. Under torch.autocast, float32 activations and weights are cast to the autocast
dtype. float64 tensors run the *reference path*: the same Functions and the same backward code with
the forward math and the GEMMs in torch float64 instead of coda's kernels; it exists so that
torch.autograd.gradcheck can check the backward formulas (tests/python/test_functional.py).
Tensors are 2-D [tokens, features]: flatten batch and sequence first.
"""

import math
import os

import torch

from . import ops
from ._lib import IGNORE_INDEX

__all__ = [
    "residual_rmsnorm",
    "rmsnorm_swiglu",
    "rmsnorm_qkv_rope",
    "lm_head_cross_entropy",
    "llama3_block",
    "rmsnorm_split",
]

_GEMM_DTYPES = (torch.bfloat16, torch.float16)
F64 = torch.float64
FUSED_BACKWARD_ENV = "CODA_FUSED_BACKWARD"


def _fused_backward():
    """The default (CODA_FUSED_BACKWARD unset or anything but "0"): the calling Function's backward
    runs on coda's fused backward operators; CODA_FUSED_BACKWARD=0 (exactly "0"): the composed
    backward. Read at every forward."""
    return os.environ.get(FUSED_BACKWARD_ENV) != "0"


# ---- arguments ----------------------------------------------------------------------------------------------

def _prepare(fn, tensors, gemm_names, matrix_names=()):
    """Validate a call's tensors (a dict name -> tensor or None, in argument order) and apply
    autocast: the GEMM operands (gemm_names) must share one dtype, bf16/fp16 (float32 is cast to
    the autocast dtype inside torch.autocast), or all be float64 (the reference path). Returns the
    tensors in order."""
    first = next(t for t in tensors.values() if t is not None)
    device = first.device.type
    cast = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
    out = {}
    for name, t in tensors.items():
        if t is not None and (name in gemm_names or name in matrix_names) and t.dim() != 2:
            raise ValueError(f"coda.{fn}: argument '{name}' must be 2-D [rows, columns], got shape "
                             f"{tuple(t.shape)} (flatten batch and sequence first)")
        if t is not None and name in gemm_names and t.dtype == torch.float32 and cast is not None:
            t = t.to(cast)
        out[name] = t
    dtypes = {out[n].dtype for n in gemm_names if out[n] is not None}
    if len(dtypes) > 1 or not (dtypes <= set(_GEMM_DTYPES) or dtypes == {F64}):
        got = ", ".join(f"'{n}' {out[n].dtype}" for n in gemm_names if out[n] is not None)
        raise ValueError(f"coda.{fn}: arguments {got}: coda's GEMMs take bfloat16 or float16 operands of one "
                         f"dtype (float32 ones inside torch.autocast; float64 runs the torch reference path)")
    return tuple(out.values())


def _check_k(fn, a_name, a, w_name, w):
    if a.shape[1] != w.shape[1]:
        raise ValueError(f"coda.{fn}: argument '{w_name}' must be [N, K] with K = {a.shape[1]} (the columns of "
                         f"'{a_name}'), got {tuple(w.shape)}")


def _check_vec(fn, name, t, n):
    if t is not None and tuple(t.shape) != (n,):
        raise ValueError(f"coda.{fn}: argument '{name}' must have shape ({n},), got {tuple(t.shape)}")


def _check_heads(fn, w, heads, freqs):
    hq, hkv, hd = heads
    if hd <= 0 or hd % 2 or hq <= 0 or hkv <= 0:
        raise ValueError(f"coda.{fn}: argument 'heads' must be (heads_q > 0, heads_kv > 0, even head_dim), "
                         f"got {tuple(heads)}")
    if w.shape[0] != (hq + 2 * hkv) * hd:
        raise ValueError(f"coda.{fn}: argument 'qkv_weight' must have (heads_q + 2 heads_kv) head_dim = "
                         f"{(hq + 2 * hkv) * hd} rows for heads {tuple(heads)}, got {w.shape[0]}")
    _check_vec(fn, "freqs", freqs, hd // 2)


# ---- composed building blocks (shared by every backward) -----------------------------------------------------

def _acc(dtype):
    """The dtype elementwise math runs in: fp32 for the coda path, float64 for the reference path."""
    return F64 if dtype == F64 else torch.float32


def _aligned16(t):
    """t's first element lies on a 16-byte boundary. Under torch.compile neither the address nor
    the storage offset can be traced (an autograd.Function's backward is traced as one graph), so
    there it is assumed: the tensors reaching a GEMM are fresh allocations or views at offset 0
    (PyTorch aligns storages to at least 64 bytes), and coda rejects a misaligned operand with its
    own error, never a wrong result."""
    return torch.compiler.is_compiling() or t.data_ptr() % 16 == 0


def _operand(t, row_major=False):
    """t as a coda GEMM operand: one unit stride (row_major: along the rows, as a fused operator's
    tile operand needs) and a 16-byte-multiple leading stride (a padded row-major copy otherwise)."""
    per16 = 16 // t.element_size()
    for unit, lead in ((1, 0),) if row_major else ((1, 0), (0, 1)):
        if (t.stride(unit) == 1 or t.shape[unit] == 1) and t.stride(lead) % per16 == 0 and _aligned16(t):
            return t
    out = ops._rows(t.shape[0], t.shape[1], t.dtype, t.device)
    return out.copy_(t)


def _mm(a, b, out_dtype=None):
    """a b^T with fp32 accumulation: coda.gemm (the forward, dgrad and wgrad forms through strides;
    an M-major a needs an N-major b), torch.matmul on the float64 reference path."""
    if a.dtype == F64:
        return a @ b.t()
    a, b = _operand(a), _operand(b)
    if a.stride(1) != 1 and a.shape[1] != 1 and b.stride(1) == 1:  # (M-major a, K-major b): not compiled
        a = _operand(a.contiguous())
    return ops.gemm(a, b, out_dtype=out_dtype)


def _scaled_backward(dz, h, r, w, need_w, scale=None):
    """Backward of z = diag(r) (h w^T) (r optional) given its gradient scale * dz: `scale` (None:
    1) is a 0-dim tensor (one factor for every row) or an [M, 1] column (one per row: the LM head's
    dloss * grad_scale), in the accumulation dtype; dz itself is never scaled (no [M, N] pass).
    With G = scale (dz w): dh = r G, dr = rowsum(G h) (the ZdZ row dot of coda-math.md 5.2,
    divided by r), dw = dz^T (scale r h), with r h = RMSNorm(x) recomputed from h. Returns
    (dh, dw, dr): the order of the consumers' arguments (h, weight, rstd)."""
    dt, acc = h.dtype, _acc(h.dtype)
    g = _mm(dz, w.t(), out_dtype=acc)
    if scale is not None:
        g = g * scale
    rs = None if r is None else r.to(acc)[:, None]
    dh = (g if rs is None else g * rs).to(dt)
    if scale is not None:
        rs = scale if rs is None else rs * scale
    dr = None if r is None else (g * h.to(acc)).sum(1).to(r.dtype)
    y = h if rs is None else (h.to(acc) * rs).to(dt)
    dw = _mm(dz.t(), y.t(), out_dtype=w.dtype) if need_w else None
    return dh, dw, dr


def _norm_backward(x, norm_weight, r, dx, dh, dr):
    """Backward of (x, h = x * w, r = rsqrt(mean(x^2) + eps)) to x and w, in the accumulation dtype:
    dx_total = dx + dh w - x r^3 dr / d (coda-math.md 5.2 once dh = r G and dr = rowsum(G h));
    dw = sum over rows of dh x. Returns (dx_total, dw)."""
    acc = _acc(x.dtype)
    xa = x.to(acc)
    g = torch.zeros_like(xa) if dx is None else dx.to(acc)
    dw = None
    if dh is not None:
        dha = dh.to(acc)
        g = g + dha * norm_weight.to(acc)
        dw = (dha * xa).sum(0).to(norm_weight.dtype)
    if dr is not None:
        g = g - xa * (dr.to(acc) * r.to(acc).pow(3) / x.shape[1])[:, None]
    return g, dw


def _linear_backward(g, a, w, need_a, need_w):
    """Backward of x = a w^T (+ residual) given dx = g: (da = g w, dw = g^T a, g for the residual)."""
    gx = g.to(a.dtype)
    da = _mm(gx, w.t(), out_dtype=a.dtype) if need_a else None
    dw = _mm(gx.t(), a.t(), out_dtype=w.dtype) if need_w else None
    return da, dw, gx


def _swiglu(z):
    acc = _acc(z.dtype)
    g, u = z[:, 0::2].to(acc), z[:, 1::2].to(acc)
    return g, u, torch.sigmoid(g)


def _gate_up(z):
    """Views of the gate and up columns of an interleaved z [M, 2F] (any row stride)."""
    zz = z.unflatten(1, (-1, 2))
    return zz[..., 0], zz[..., 1]


def _swiglu_value(z):
    """o = silu(g) u recomputed from the saved z: fp32 math rounded once, as the forward's epilogue
    computed it; float64 on the reference path."""
    if z.dtype == F64:
        g, u, s = _swiglu(z)
        return g * s * u
    g, u = _gate_up(z)
    o = torch.empty(g.shape, dtype=z.dtype, device=z.device)
    return torch.mul(torch.nn.functional.silu(g.float()), u, out=o)


def _swiglu_backward(do, z):
    """dg = do u s (1 + g (1 - s)), du = do silu(g) (coda-math.md 5.3), interleaved like z.

    In z's storage dtype with PyTorch's silu kernels, rounding where the unfused (eager) graph
    does: do u and silu(g) are rounded once each (NOTES: the same math in fp32 temporaries made
    about a dozen passes over fp32 tensors the size of z; this is four passes in bf16). float64 on
    the reference path."""
    if z.dtype == F64:
        g, u, s = _swiglu(z)
        dz = torch.stack((do * u * s * (1 + g * (1 - s)), do * g * s), dim=2)
        return dz.reshape(z.shape)
    g, u = _gate_up(z)
    do = do.to(z.dtype)
    if torch.compiler.is_compiling():  # no out= into strided views there; inductor fuses the stack
        dg = torch.ops.aten.silu_backward(do * u, g)
        return torch.stack((dg, do * torch.nn.functional.silu(g)), dim=2).flatten(1)
    dz = torch.empty((*g.shape, 2), dtype=z.dtype, device=z.device)
    torch.mul(do, torch.nn.functional.silu(g), out=dz[..., 1])
    torch.ops.aten.silu_backward.grad_input(do * u, g, grad_input=dz[..., 0])
    return dz.flatten(1)


def _rope(t, positions, freqs, heads, inverse=False):
    """RoPE by +theta (or -theta) on the interleaved pairs of the q and k heads of t [M, N3]; v
    columns unchanged (coda-math.md 5.4). theta = 2 pi frac(pos * freq) with the product in float64."""
    hq, hkv, hd = heads
    m, rc, acc = t.shape[0], (hq + hkv) * hd, _acc(t.dtype)
    turns = positions.to(F64)[:, None] * freqs.to(F64)[None, :]
    theta = 2 * math.pi * (turns - torch.floor(turns))
    c, s = torch.cos(theta).to(acc)[:, None, :], torch.sin(theta).to(acc)[:, None, :]
    if inverse:
        s = -s
    pairs = t[:, :rc].to(acc).reshape(m, hq + hkv, hd // 2, 2)
    xe, xo = pairs[..., 0], pairs[..., 1]
    rotated = torch.stack((xe * c - xo * s, xe * s + xo * c), dim=3).reshape(m, rc)
    return torch.cat((rotated, t[:, rc:].to(acc)), dim=1).to(t.dtype)


# ---- fused backward building blocks (the default; CODA_FUSED_BACKWARD=0 turns them off) ----------------------

def _tile(t, dtype):
    """t in `dtype` as a tile operand of a fused operator (or the a operand of its dgrad GEMM):
    row-major with 16-byte-aligned rows and base, a copy otherwise (an incoming gradient may be an
    expanded or strided view). float64 (the reference path): t as it is."""
    t = t.to(dtype)
    return t if dtype == F64 else _operand(t, row_major=True)


def _dgrad_weight(w):
    """The consuming GEMM's weight w [K, N] as the b operand of a backward operator's dgrad form:
    w.t() [N, K] with unit stride along N (what the GPU kernels take), from a row-major w with
    16-byte rows (a copy otherwise)."""
    return _tile(w, w.dtype).t()


def _rope_backward_fused(qkv, dqkv, positions, freqs, heads, zdz_scale=None):
    """dz = R(-theta) dqkv (coda-math.md 5.4) and, with zdz_scale, ZdZ = zdz_scale * rowsum(qkv dqkv):
    coda's rope_backward; torch float64 on the reference path. Returns dz, or (dz, zdz)."""
    if qkv.dtype == F64:
        dz = _rope(dqkv, positions, freqs, heads, inverse=True)
        return dz if zdz_scale is None else (dz, zdz_scale * (qkv * dqkv).sum(1))
    save = zdz_scale is not None
    return ops.rope_backward(qkv, _tile(dqkv, qkv.dtype), positions, freqs, heads, save_zdz=save,
                             zdz_scale=zdz_scale if save else 1.0)


def _rmsnorm_backward_fused(dz, w, x, r, c, norm_weight, dres, need_y, need_dnw):
    """The RMSNorm backward of coda-math.md 5.2 in the epilogue of dy = dz w (w [K, d] the consuming
    GEMM's weight): with xh = x r, dx = r (dy nw - xh c) (+ dres), y = xh nw recomputed (need_y),
    dnw = sum over rows of dy xh (need_dnw); c = ZdZ. coda's gemm_rmsnorm_backward, then
    col_sum_finish of its row-granule partials; torch float64 on the reference path. Returns
    (dx, y, dnw), None for what was not asked for."""
    if x.dtype == F64:
        dy, xh, nw = dz @ w, x * r[:, None], norm_weight.to(F64)
        dx = r[:, None] * (dy * nw - xh * c[:, None]) + (0 if dres is None else dres)
        return dx, xh * nw if need_y else None, (dy * xh).sum(0).to(norm_weight.dtype) if need_dnw else None
    res = ops.gemm_rmsnorm_backward(dz, _dgrad_weight(w), x, r, c, norm_weight.contiguous(),
                                    dres=None if dres is None else _tile(dres, x.dtype), save_y=need_y)
    dx, y, q = res if need_y else (res[0], None, res[1])
    return dx, y, ops.col_sum_finish(q, norm_weight.dtype) if need_dnw else None


def _swiglu_backward_fused(dx, w, z, need_o, zdz_scale):
    """The SwiGLU backward of coda-math.md 5.3 in the epilogue of do = dx w (w = Wdown [d, F]): dz
    interleaved, o = silu(g) u recomputed (need_o), ZdZ = zdz_scale * rowsum(g dg + u du). coda's
    gemm_swiglu_backward, then row_sum_finish of its column-granule partials; torch float64 on the
    reference path. Returns (dz, o, zdz), o None when not asked for."""
    if z.dtype == F64:
        dz = _swiglu_backward(dx @ w, z)
        return dz, _swiglu_value(z) if need_o else None, zdz_scale * (z * dz).sum(1)
    res = ops.gemm_swiglu_backward(dx, _dgrad_weight(w), z, save_o=need_o, save_zdz=True)
    dz, o, p = res if need_o else (res[0], None, res[1])
    return dz, o, ops.row_sum_finish(p, zdz_scale)


# ---- forward kernels (coda) and their float64 reference ----------------------------------------------------

def _residual_rmsnorm_fwd(a, w, norm_weight, residual, eps):
    if a.dtype == F64:
        x = a @ w.t() + (0 if residual is None else residual)
        return x, x * norm_weight.to(F64), torch.rsqrt(x.pow(2).mean(1) + eps)
    x, h, p = ops.gemm_residual_rmsnorm_partial(a, w, norm_weight, residual=residual)
    return x, h, ops.rms_finish(p, w.shape[0], eps)


def _scaled(h, w, r):
    z = h @ w.t()
    return z if r is None else z * r[:, None]


def _swiglu_fwd(h, w, r):
    if h.dtype == F64:
        z = _scaled(h, w, r)
        g, u, s = _swiglu(z)
        return z, g * s * u
    return ops.gemm_swiglu(h, w, rstd=r, save_z=True)


def _qkv_rope_fwd(h, w, r, positions, freqs, heads):
    if h.dtype == F64:
        return _rope(_scaled(h, w, r), positions, freqs, heads)
    return ops.gemm_rope(h, w, positions, freqs, heads, rstd=r)


def _ce_mask(targets, ignore_index, reduction):
    keep = targets != ignore_index
    count = keep.sum().clamp_min(1) if reduction == "mean" else torch.ones((), device=targets.device)
    return keep, count


def _lm_head_train(h, w, r, targets, ignore_index, reduction):
    """(loss, grad, grad_scale) with dlogits = dloss * grad_scale[:, None] * grad, grad [M, V] in
    h's dtype the only [M, V] tensor: bf16, coda's lm_head_train (grad_scale fp32 [M]); fp16, which
    lm_head_train does not take (fp16's range cannot hold its shifted exponentials), the logits
    stored by gemm_lse and overwritten in place by the dlogits of dloss 1 (cross_entropy_grad_,
    the dlogits pass run in the forward), grad_scale 1; the float64 reference path in torch,
    grad = softmax - onehot and grad_scale = 1 / count for the mean, 1 for the sum, 0 for ignored
    rows."""
    if h.dtype == F64:
        logits = _scaled(h, w, r)
        keep, count = _ce_mask(targets, ignore_index, reduction)
        lse = torch.logsumexp(logits, dim=1)
        idx = torch.where(keep, targets, 0).long()
        tl = logits.gather(1, idx[:, None])[:, 0]
        grad = torch.softmax(logits, dim=1)
        grad[torch.arange(len(targets)), idx] -= keep.to(F64)
        return torch.where(keep, lse - tl, 0).sum() / count, grad, keep.to(F64) / count
    if h.dtype == torch.float16:
        grad, partials, tl = ops.gemm_lse(h, w, targets, rstd=r, ignore_index=ignore_index, save_logits=True)
        loss, _ = ops.cross_entropy_grad_(ops.lse_finish(partials), tl, targets, grad, ignore_index=ignore_index,
                                          reduction=reduction, dloss=1.0)
        return loss, grad, torch.ones(h.shape[0], dtype=torch.float32, device=h.device)
    loss, grad, grad_scale, _ = ops.lm_head_train(h, w, targets, rstd=r, ignore_index=ignore_index,
                                                  reduction=reduction)
    return loss, grad, grad_scale


# ---- the Functions ------------------------------------------------------------------------------------------

class _ResidualRMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, w, norm_weight, residual, eps):
        x, h, r = _residual_rmsnorm_fwd(a, w, norm_weight, residual, eps)
        ctx.save_for_backward(a, w, norm_weight, x, r)
        ctx.set_materialize_grads(False)
        return x, h, r

    @staticmethod
    def backward(ctx, dx, dh, dr):
        a, w, norm_weight, x, r = ctx.saved_tensors
        need = ctx.needs_input_grad
        g, dnw = _norm_backward(x, norm_weight, r, dx, dh, dr)
        da, dw, dres = _linear_backward(g, a, w, need[0], need[1])
        return da, dw, dnw if need[2] else None, dres if need[3] else None, None


class _RMSNormSwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w, r):
        z, o = _swiglu_fwd(h, w, r)
        ctx.save_for_backward(h, w, r, z)
        return o

    @staticmethod
    def backward(ctx, do):
        h, w, r, z = ctx.saved_tensors
        return _scaled_backward(_swiglu_backward(do, z), h, r, w, ctx.needs_input_grad[1])


class _RMSNormQKVRoPE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w, r, positions, freqs, heads):
        qkv = _qkv_rope_fwd(h, w, r, positions, freqs, heads)
        ctx.fused = _fused_backward()  # rope_backward reads qkv (the caller's attention keeps it anyway)
        ctx.save_for_backward(h, w, r, positions, freqs, *((qkv,) if ctx.fused else ()))
        ctx.heads = heads
        return qkv

    @staticmethod
    def backward(ctx, dqkv):
        h, w, r, positions, freqs, *qkv = ctx.saved_tensors
        if ctx.fused:
            dz = _rope_backward_fused(qkv[0], dqkv, positions, freqs, ctx.heads)
        else:
            dz = _rope(dqkv, positions, freqs, ctx.heads, inverse=True)
        return (*_scaled_backward(dz, h, r, w, ctx.needs_input_grad[1]), None, None, None)


class _LMHeadCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w, r, targets, ignore_index, reduction):
        loss, grad, grad_scale = _lm_head_train(h, w, r, targets, ignore_index, reduction)
        ctx.save_for_backward(h, w, r, grad, grad_scale)
        return loss

    @staticmethod
    def backward(ctx, dloss):
        # dlogits = s grad with s = dloss * grad_scale per row: folded into the [M, K] side of both
        # GEMMs, so grad is only read (a second backward, retain_graph=True, sees it unchanged).
        h, w, r, grad, grad_scale = ctx.saved_tensors
        acc = _acc(h.dtype)
        s = dloss.to(acc) * grad_scale.to(acc)
        return (*_scaled_backward(grad, h, r, w, ctx.needs_input_grad[1], scale=s[:, None]), None, None, None)


class _Llama3Block(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y0, x0, w0, w1, w2, w3, wn0, wn1, positions, freqs, heads, eps, keep_y1):
        x1, h1, r1 = _residual_rmsnorm_fwd(y0, w0, wn0, x0, eps)
        z1, y1 = _swiglu_fwd(h1, w1, r1)
        x2, h2, r2 = _residual_rmsnorm_fwd(y1, w2, wn1, x1, eps)
        qkv = _qkv_rope_fwd(h2, w3, r2, positions, freqs, heads)
        # coda-math.md 6: y0, x1, x2, r1, r2, z1, qkv (qkv: the caller's attention keeps it anyway;
        # only the fused backward reads it, so only it saves it), weights, positions. Not h1, h2;
        # y1 only with keep_y1 (else the backward recomputes it from z1).
        ctx.fused = _fused_backward()
        ctx.save_for_backward(y0, x1, x2, r1, r2, z1, w0, w1, w2, w3, wn0, wn1, positions, freqs,
                              *((qkv,) if ctx.fused else ()), *((y1,) if keep_y1 else ()))
        ctx.heads = heads
        ctx.set_materialize_grads(False)
        return x2, qkv

    @staticmethod
    def backward(ctx, dx2, dqkv):
        if ctx.fused:
            return _llama3_backward_fused(ctx, dx2, dqkv)
        y0, x1, x2, r1, r2, z1, w0, w1, w2, w3, wn0, wn1, positions, freqs, *kept = ctx.saved_tensors
        y1 = kept[0] if kept else _swiglu_value(z1)
        need = ctx.needs_input_grad
        dt = y0.dtype
        dw3 = dwn1 = None
        g2 = dx2
        if dqkv is not None:  # 1-3: RoPE backward, the rmsnorm-backward epilogue of dz2 w3, dw3 = dz2^T n2
            dz2 = _rope(dqkv, positions, freqs, ctx.heads, inverse=True)
            h2 = (x2.to(_acc(dt)) * wn1.to(_acc(dt))).to(dt)
            dh2, dw3, dr2 = _scaled_backward(dz2, h2, r2, w3, need[5])
            g2, dwn1 = _norm_backward(x2, wn1, r2, dx2, dh2, dr2)
        if g2 is None:
            return (None,) * 13
        # 4-5: the SwiGLU backward of dy1 = dx w2, dw2 = dx^T y1 (y1 kept or recomputed from z1)
        dy1, dw2, g2 = _linear_backward(g2, y1, w2, True, need[4])
        dz1 = _swiglu_backward(dy1, z1)
        # 6-7: the rmsnorm-backward epilogue of dz1 w1 (+= the residual grad), dw1, dy0, dw0
        h1 = (x1.to(_acc(dt)) * wn0.to(_acc(dt))).to(dt)
        dh1, dw1, dr1 = _scaled_backward(dz1, h1, r1, w1, need[3])
        g1, dwn0 = _norm_backward(x1, wn0, r1, g2, dh1, dr1)
        dy0, dw0, dx0 = _linear_backward(g1, y0, w0, need[0], need[2])
        return dy0, dx0, dw0, dw1, dw2, dw3, dwn0, dwn1, None, None, None, None, None


def _llama3_backward_fused(ctx, dx2, dqkv):
    """The default backward (CODA_FUSED_BACKWARD not "0"): the C++ llama3_backward
    (include/coda/block/llama3.hpp) step for step on coda's backward operators; the weight gradients
    through coda.gemm."""
    y0, x1, x2, r1, r2, z1, w0, w1, w2, w3, wn0, wn1, positions, freqs, qkv, *kept = ctx.saved_tensors
    need = ctx.needs_input_grad
    dt = y0.dtype
    inv_d = 1.0 / x1.shape[1]
    dx, dw3, dwn1 = dx2, None, None
    if dqkv is not None:
        # qkv = rope(r2 * h2 Wqkv^T): un-rotate, ZdZ2 = (1/d) sum qkv dqkv
        dz2, c2 = _rope_backward_fused(qkv, dqkv, positions, freqs, ctx.heads, inv_d)
        # dx = RMSNorm-backward(dz2 Wqkv) + dx2; n2 = RMSNorm(x2) recomputed; dnorm1 partials
        dx, n2, dwn1 = _rmsnorm_backward_fused(dz2, w3, x2, r2, c2, wn1, dx2, need[5], need[7])
        dw3 = _mm(dz2.t(), n2.t(), out_dtype=w3.dtype) if need[5] else None
    if dx is None:
        return (None,) * 13
    dx = _tile(dx, dt)  # dx2 as it arrived when there is no dqkv
    # dz1 = SwiGLU-backward(dx Wdown), y1 recomputed unless kept, ZdZ1 = (1/d) sum of the partials
    dz1, o, c1 = _swiglu_backward_fused(dx, w2, z1, need[4] and not kept, inv_d)
    y1 = kept[0] if kept else o
    dw2 = _mm(dx.t(), y1.t(), out_dtype=w2.dtype) if need[4] else None
    # dx0 = RMSNorm-backward(dz1 Wgu) + dx; n1 recomputed; dnorm0 partials
    dx0, n1, dwn0 = _rmsnorm_backward_fused(dz1, w1, x1, r1, c1, wn0, dx, need[3], need[6])
    dw1 = _mm(dz1.t(), n1.t(), out_dtype=w1.dtype) if need[3] else None
    # x1 = y0 Wo^T + x0: dy0 = dx0 Wo, dWo = dx0^T y0
    dy0, dw0, dx0 = _linear_backward(dx0, y0, w0, need[0], need[2])
    return dy0, dx0, dw0, dw1, dw2, dw3, dwn0, dwn1, None, None, None, None, None


# ---- the functions ------------------------------------------------------------------------------------------

def residual_rmsnorm(input, weight, norm_weight, residual=None, eps=1e-5):
    """The GEMM that produces the residual stream, with the first half of the next RMSNorm
    (coda-math.md 5.1): x = input weight^T (+ residual), h = x * norm_weight, rstd = 1 / sqrt(mean
    x^2 + eps). Returns (x, h, rstd): x [M, N] for the next residual add, (h, rstd) for the
    consuming rmsnorm_* GEMM (RMSNorm(x) = rstd * h). input [M, K], weight [N, K], norm_weight [N],
    residual [M, N] (optional), rstd fp32 [M]. Differentiable in all four tensors."""
    fn = "residual_rmsnorm"
    input, weight, norm_weight, residual = _prepare(
        fn, dict(input=input, weight=weight, norm_weight=norm_weight, residual=residual),
        ("input", "weight", "residual"))
    _check_k(fn, "input", input, "weight", weight)
    _check_vec(fn, "norm_weight", norm_weight, weight.shape[0])
    if residual is not None and tuple(residual.shape) != (input.shape[0], weight.shape[0]):
        raise ValueError(f"coda.{fn}: argument 'residual' must have shape {(input.shape[0], weight.shape[0])}, "
                         f"got {tuple(residual.shape)}")
    return _ResidualRMSNorm.apply(input, weight, norm_weight, residual, float(eps))


def rmsnorm_split(x, norm_weight, eps=1e-5):
    """(h, rstd) = (x * norm_weight, 1 / sqrt(mean x^2 + eps)) in torch, for an x no coda GEMM
    produced (the embeddings ahead of the first layer): what residual_rmsnorm returns besides x."""
    acc = _acc(x.dtype)
    h = (x.to(acc) * norm_weight.to(acc)).to(x.dtype)
    return h, torch.rsqrt(x.to(acc).pow(2).mean(-1) + eps)


def rmsnorm_swiglu(h, gate_up_weight, rstd=None):
    """SwiGLU(RMSNorm(x) Wgu^T) from (h, rstd) of residual_rmsnorm: z = diag(rstd) (h Wgu^T),
    o = silu(z[:, 0::2]) z[:, 1::2] (coda-math.md 5.3). gate_up_weight [2F, K] interleaved
    (coda.interleave_gate_up); rstd None: the plain gate/up GEMM of h. Returns o [M, F]; saves z."""
    fn = "rmsnorm_swiglu"
    h, gate_up_weight, rstd = _prepare(fn, dict(h=h, gate_up_weight=gate_up_weight, rstd=rstd),
                                       ("h", "gate_up_weight"))
    _check_k(fn, "h", h, "gate_up_weight", gate_up_weight)
    _check_vec(fn, "rstd", rstd, h.shape[0])
    if gate_up_weight.shape[0] % 2:
        raise ValueError(f"coda.{fn}: argument 'gate_up_weight' must have an even number of rows (gate/up "
                         f"pairs), got {gate_up_weight.shape[0]}")
    return _RMSNormSwiGLU.apply(h, gate_up_weight, rstd)


def rmsnorm_qkv_rope(h, qkv_weight, rstd, positions, freqs, heads):
    """RoPE(RMSNorm(x) Wqkv^T) from (h, rstd): the q and k heads rotated on interleaved pairs by
    positions[m] * freqs[i] turns, v unrotated (coda-math.md 5.4). qkv_weight [(hq + 2 hkv) hd, K]
    with q/k rows in interleaved-pair order (coda.permute_rotate_half_to_interleaved for Hugging
    Face weights), positions [M] (int), freqs fp32 [hd / 2] (coda.rope_frequencies), heads (hq,
    hkv, hd); rstd None: no norm. Returns qkv [M, (hq + 2 hkv) hd]."""
    fn = "rmsnorm_qkv_rope"
    h, qkv_weight, rstd, positions, freqs = _prepare(
        fn, dict(h=h, qkv_weight=qkv_weight, rstd=rstd, positions=positions, freqs=freqs), ("h", "qkv_weight"))
    _check_k(fn, "h", h, "qkv_weight", qkv_weight)
    _check_vec(fn, "rstd", rstd, h.shape[0])
    _check_vec(fn, "positions", positions, h.shape[0])
    heads = tuple(int(v) for v in heads)
    _check_heads(fn, qkv_weight, heads, freqs)
    positions = positions if h.dtype == F64 else positions.to(torch.int32)
    return _RMSNormQKVRoPE.apply(h, qkv_weight, rstd, positions, freqs.to(torch.float32), heads)


def lm_head_cross_entropy(h, weight, targets, rstd=None, ignore_index=IGNORE_INDEX, reduction="mean"):
    """Cross-entropy of logits = diag(rstd) (h weight^T) against targets, training without a
    dlogits pass (coda-math.md 5.5, docs/ops.md): the forward (coda.lm_head_train) stores grad
    [M, V] (h's dtype) and grad_scale fp32 [M] with dlogits = dloss * grad_scale[:, None] * grad,
    never the logits; the backward folds s = dloss * grad_scale into the [M, K] side and runs
    dh = diag(s rstd) (grad W) and dW = grad^T (s RMSNorm(x)) through coda.gemm, reading grad as it
    is: no other [M, V] tensor exists and no pass over one runs between the GEMMs. (fp16, which
    lm_head_train does not take: the forward stores the logits and turns them into the dlogits of
    dloss 1 in place, grad_scale 1; the same backward.) grad is not modified by the backward, so it
    may run more than once (retain_graph=True). h [M, K], weight [V, K], targets [M] (int;
    ignore_index rows count 0), rstd fp32 [M] or None. Returns the 0-dim fp32 loss, mean over
    non-ignored rows or sum; every row ignored gives 0 (PyTorch: NaN)."""
    fn = "lm_head_cross_entropy"
    h, weight, targets, rstd = _prepare(fn, dict(h=h, weight=weight, targets=targets, rstd=rstd), ("h", "weight"))
    _check_k(fn, "h", h, "weight", weight)
    _check_vec(fn, "rstd", rstd, h.shape[0])
    _check_vec(fn, "targets", targets, h.shape[0])
    if reduction not in ("mean", "sum"):
        raise ValueError(f"coda.{fn}: argument 'reduction' must be 'mean' or 'sum', got {reduction!r}")
    targets = targets if h.dtype == F64 else targets.to(torch.int32)
    return _LMHeadCrossEntropy.apply(h, weight, rstd, targets, int(ignore_index), reduction)


def llama3_block(y0, x0, o_weight, gate_up_weight, down_weight, qkv_weight, norm_weight0, norm_weight1,
                 positions, freqs, heads, eps=1e-5, keep_y1=False):
    """The LLaMA-3 block of coda-math.md 6 (the boundary shifted so that every norm sits between two
    GEMMs): from the attention output y0 and the residual x0,
      x1 = y0 Wo^T + x0;  o = SwiGLU(RMSNorm(x1; norm_weight0) Wgu^T);  x2 = o Wdown^T + x1;
      qkv = RoPE(RMSNorm(x2; norm_weight1) Wqkv^T)  (the *next* layer's QKV and input norm).
    Returns (x2, qkv). Saves only y0, x1, x2, r1, r2, z1 (and weights, positions); the backward
    recomputes h1, h2 and y1 = SwiGLU(z1). keep_y1=True saves y1 as well ([M, F] more per block,
    what an unfused framework saves for the down projection's weight gradient) and the backward
    skips recomputing it (the fused SwiGLU backward writes one output less). Weights as in
    residual_rmsnorm, rmsnorm_swiglu and rmsnorm_qkv_rope; differentiable in every tensor but
    positions and freqs."""
    fn = "llama3_block"
    (y0, x0, o_weight, gate_up_weight, down_weight, qkv_weight, norm_weight0, norm_weight1, positions,
     freqs) = _prepare(fn, dict(y0=y0, x0=x0, o_weight=o_weight, gate_up_weight=gate_up_weight,
                                down_weight=down_weight, qkv_weight=qkv_weight, norm_weight0=norm_weight0,
                                norm_weight1=norm_weight1, positions=positions, freqs=freqs),
                       ("y0", "x0", "o_weight", "gate_up_weight", "down_weight", "qkv_weight"))
    _check_k(fn, "y0", y0, "o_weight", o_weight)
    d = o_weight.shape[0]
    if tuple(x0.shape) != (y0.shape[0], d):
        raise ValueError(f"coda.{fn}: argument 'x0' must have shape {(y0.shape[0], d)}, got {tuple(x0.shape)}")
    for name, w, rows, cols in (("gate_up_weight", gate_up_weight, None, d),
                                ("down_weight", down_weight, d, gate_up_weight.shape[0] // 2),
                                ("qkv_weight", qkv_weight, None, d)):
        if w.shape[1] != cols or (rows is not None and w.shape[0] != rows) or (name == "gate_up_weight" and w.shape[0] % 2):
            raise ValueError(f"coda.{fn}: argument '{name}' has shape {tuple(w.shape)}; with hidden size {d} "
                             f"and FFN width {gate_up_weight.shape[0] // 2} it must be "
                             f"{'[2F, d]' if name == 'gate_up_weight' else '[d, F]' if name == 'down_weight' else '[N3, d]'}")
    _check_vec(fn, "norm_weight0", norm_weight0, d)
    _check_vec(fn, "norm_weight1", norm_weight1, d)
    _check_vec(fn, "positions", positions, y0.shape[0])
    heads = tuple(int(v) for v in heads)
    _check_heads(fn, qkv_weight, heads, freqs)
    positions = positions if y0.dtype == F64 else positions.to(torch.int32)
    return _Llama3Block.apply(y0, x0, o_weight, gate_up_weight, down_weight, qkv_weight, norm_weight0, norm_weight1,
                              positions, freqs.to(torch.float32), heads, float(eps), bool(keep_y1))
