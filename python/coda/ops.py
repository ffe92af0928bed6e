"""coda's operators as torch.library custom ops (torch.ops.coda.*), and the functions users call
(coda.gemm, coda.gemm_rmsnorm_swiglu, ..., and the backward operators coda.gemm_rmsnorm_backward,
coda.gemm_swiglu_backward, coda.rope_backward with their finishes).

Every op calls one C ABI function of libcoda.so on the tensors' own memory: CUDA tensors run the
sm_90a kernels on torch.cuda.current_stream(), CPU tensors run the CPU emulator (coda.h, "Where a
call runs"). Outputs are allocated with torch.empty on the input's device (tile outputs with rows
padded to 16 bytes where needed: the padding is never read or written). Each op has a fake
implementation with the same shapes and strides, so torch.compile traces it without a graph
break. Ops ending in "_" write one of their inputs in place (declared in mutates_args).
docs/python.md lists them; docs/ops.md gives the math and the rules.
"""

import ctypes
from typing import Optional

import torch
from torch import Tensor

from . import _lib
from ._lib import IGNORE_INDEX, PARTIAL_COLS, PARTIAL_ROWS, check, lib

__all__ = [
    "gemm",
    "gemm_residual_rmsnorm_partial",
    "gemm_residual_rmsnorm_partial_",
    "rms_finish",
    "gemm_swiglu",
    "gemm_rmsnorm_swiglu",
    "gemm_rope",
    "gemm_rmsnorm_rope",
    "gemm_qkv_sqsum",
    "qknorm_rope",
    "gemm_lse",
    "gemm_rmsnorm_lse",
    "lse_finish",
    "cross_entropy",
    "cross_entropy_grad_",
    "lm_head_loss",
    "lm_head_train",
    "lm_head_backward",
    "gemm_rmsnorm_backward",
    "gemm_swiglu_backward",
    "row_sum_finish",
    "col_sum_finish",
    "rope_backward",
    "interleave_gate_up",
    "permute_rotate_half_to_interleaved",
    "rope_frequencies",
    "qk_segments",
]

# ---- tensors -> coda_tensor_t ------------------------------------------------------------------------

_DTYPES = {
    torch.bfloat16: _lib.DTYPE_BF16,
    torch.float16: _lib.DTYPE_FP16,
    torch.float32: _lib.DTYPE_FP32,
    torch.int32: _lib.DTYPE_INT32,
}
_REDUCTIONS = {"mean": _lib.REDUCTION_MEAN, "sum": _lib.REDUCTION_SUM}
_placeholders = {}


def _placeholder(device):
    """A real address on `device` for tensors with no elements (torch gives them a null pointer,
    which coda reads as an absent argument); nothing is ever read or written through it."""
    key = str(device)
    if key not in _placeholders:
        _placeholders[key] = torch.empty(256, dtype=torch.uint8, device=device)
    return _placeholders[key].data_ptr()


def _desc(t, name):
    """The coda_tensor_t of a tensor (None for an absent optional one). A 0-dim tensor is [1]."""
    if t is None:
        return None
    if t.dtype not in _DTYPES:
        raise ValueError(
            f"coda: argument '{name}' has dtype {t.dtype}; coda takes bfloat16, float16, float32 and int32 tensors"
        )
    if t.dim() > _lib.MAX_RANK:
        raise ValueError(f"coda: argument '{name}' has {t.dim()} dimensions; coda takes at most {_lib.MAX_RANK}")
    d = _lib.Tensor()
    d.data = t.data_ptr() or (_placeholder(t.device) if t.numel() == 0 else 0)
    d.dtype = _DTYPES[t.dtype]
    if t.dim() == 0:
        d.rank, d.sizes[0], d.strides[0] = 1, 1, 1
    else:
        d.rank = t.dim()
        for i, (size, stride) in enumerate(zip(t.shape, t.stride())):
            d.sizes[i] = size
            d.strides[i] = stride
    return d


def _run(fn, device, *args):
    """Call a C ABI function with the stream of `device` appended (CUDA: the current stream of that
    device, made current for the call; CPU: none, the emulator runs synchronously)."""
    if device.type == "cuda":
        with torch.cuda.device(device):
            check(fn(*args, torch.cuda.current_stream(device).cuda_stream))
    else:
        check(fn(*args, None))


def _device_of(**tensors):
    """The device the call runs on (the first tensor's); tensors on two different GPUs are an error
    here (a host/device mix is coda's to report, naming the argument)."""
    device = None
    for name, t in tensors.items():
        if t is None:
            continue
        if device is None:
            device, first = t.device, name
        elif t.device.type == "cuda" and device.type == "cuda" and t.device != device:
            raise ValueError(f"coda: argument '{name}' is on {t.device} but argument '{first}' on {device}")
    return device


def _rows(m, n, dtype, device):
    """An [m, n] tile output whose rows start on 16-byte boundaries (coda's rule for tile outputs):
    dense when n * itemsize is a multiple of 16, else a view of the first n columns of [m, n_pad]."""
    per16 = max(16 // dtype.itemsize, 1)
    ld = -(-n // per16) * per16
    if ld == n:
        return torch.empty((m, n), dtype=dtype, device=device)
    return torch.empty((m, ld), dtype=dtype, device=device)[:, :n]


def _vec(n, device):
    return torch.empty((n,), dtype=torch.float32, device=device)


def _partials(m, n, device):
    return torch.empty((m, -(-n // PARTIAL_COLS)), dtype=torch.float32, device=device)


def _col_partials(m, n, device):
    """Per-column partials of an [m, n] output: one row per PARTIAL_ROWS-row granule, fp32."""
    return torch.empty((-(-m // PARTIAL_ROWS), n), dtype=torch.float32, device=device)


def _check_2d(op, **tensors):
    """The tensors an op's output shapes are read from must be matrices: a ValueError naming the
    argument before anything is allocated (coda checks every other rule itself)."""
    for name, t in tensors.items():
        if t is not None and t.dim() != 2:
            raise ValueError(f"{op}: argument '{name}' must be 2-D, got shape {tuple(t.shape)}")


def _heads(heads_q, heads_kv, head_dim):
    return _lib.Heads(heads_q, heads_kv, head_dim)


def qk_segments(head_dim):
    """Partial sums of squares per q/k head (coda_gemm_qkv_sqsum): 1 when head_dim divides 256,
    head_dim / 256 when 256 divides it; 0 for other head dims (coda rejects them)."""
    if head_dim > 0 and PARTIAL_COLS % head_dim == 0:
        return 1
    if head_dim > 0 and head_dim % PARTIAL_COLS == 0:
        return head_dim // PARTIAL_COLS
    return 0


def _none(device, dtype):
    """The empty stand-in returned for an output that was not asked for."""
    return torch.empty((0,), dtype=dtype, device=device)


# ---- GEMM -------------------------------------------------------------------------------------------------


@torch.library.custom_op("coda::gemm", mutates_args=())
def _gemm(
    a: Tensor, b: Tensor, c: Optional[Tensor], alpha: float, beta: float, out_dtype: Optional[torch.dtype]
) -> Tensor:
    device = _device_of(a=a, b=b, c=c)
    d = _rows(a.shape[0], b.shape[0], out_dtype or a.dtype, device)
    if c is None and alpha == 1.0:
        _run(lib.coda_gemm, device, _desc(a, "a"), _desc(b, "b"), _desc(d, "d"))
    else:
        _run(lib.coda_gemm_ex, device, _desc(a, "a"), _desc(b, "b"), _desc(c, "c"), _desc(d, "d"), alpha, beta,
             None, None)
    return d


@_gemm.register_fake
def _(a, b, c, alpha, beta, out_dtype):
    return _rows(a.shape[0], b.shape[0], out_dtype or a.dtype, a.device)


def gemm(a, b, c=None, alpha=1.0, beta=1.0, out_dtype=None):
    """D = alpha a b^T (+ beta c): a [M, K], b [N, K] (any of the forward, dgrad or wgrad forms
    through strides, docs/ops.md); D [M, N] in out_dtype (default a's)."""
    return torch.ops.coda.gemm(a, b, c, alpha, beta, out_dtype)


# ---- RMSNorm split ----------------------------------------------------------------------------------------


@torch.library.custom_op("coda::gemm_residual_rmsnorm_partial", mutates_args=())
def _gemm_residual_rmsnorm_partial(
    a: Tensor, b: Tensor, residual: Optional[Tensor], norm_weight: Tensor, alpha: float
) -> tuple[Tensor, Tensor, Tensor]:
    device = _device_of(a=a, b=b, residual=residual, norm_weight=norm_weight)
    m, n = a.shape[0], b.shape[0]
    dtype = residual.dtype if residual is not None else a.dtype
    x, h, p = _rows(m, n, dtype, device), _rows(m, n, dtype, device), _partials(m, n, device)
    _run(lib.coda_gemm_residual_rmsnorm_partial, device, _desc(a, "a"), _desc(b, "b"), _desc(residual, "residual"),
         _desc(norm_weight, "norm_weight"), _desc(x, "x_out"), _desc(h, "h_out"), _desc(p, "partials"), alpha)
    return x, h, p


@_gemm_residual_rmsnorm_partial.register_fake
def _(a, b, residual, norm_weight, alpha):
    m, n = a.shape[0], b.shape[0]
    dtype = residual.dtype if residual is not None else a.dtype
    return _rows(m, n, dtype, a.device), _rows(m, n, dtype, a.device), _partials(m, n, a.device)


def gemm_residual_rmsnorm_partial(a, b, norm_weight, residual=None, alpha=1.0):
    """x = alpha a b^T (+ residual), h = x * norm_weight, and the per-128-column (PARTIAL_COLS) partial sums of x^2
    (finish with rms_finish). Returns (x, h, partials)."""
    return torch.ops.coda.gemm_residual_rmsnorm_partial(a, b, residual, norm_weight, alpha)


@torch.library.custom_op("coda::gemm_residual_rmsnorm_partial_", mutates_args=("residual",))
def _gemm_residual_rmsnorm_partial_(
    a: Tensor, b: Tensor, residual: Tensor, norm_weight: Tensor, alpha: float
) -> tuple[Tensor, Tensor]:
    device = _device_of(a=a, b=b, residual=residual, norm_weight=norm_weight)
    m, n = a.shape[0], b.shape[0]
    h, p = _rows(m, n, residual.dtype, device), _partials(m, n, device)
    r = _desc(residual, "residual")
    _run(lib.coda_gemm_residual_rmsnorm_partial, device, _desc(a, "a"), _desc(b, "b"), r,
         _desc(norm_weight, "norm_weight"), r, _desc(h, "h_out"), _desc(p, "partials"), alpha)
    return h, p


@_gemm_residual_rmsnorm_partial_.register_fake
def _(a, b, residual, norm_weight, alpha):
    m, n = a.shape[0], b.shape[0]
    return _rows(m, n, residual.dtype, a.device), _partials(m, n, a.device)


def gemm_residual_rmsnorm_partial_(a, b, residual, norm_weight, alpha=1.0):
    """The same with x written in place of the residual (residual becomes x). Returns (h, partials)."""
    return torch.ops.coda.gemm_residual_rmsnorm_partial_(a, b, residual, norm_weight, alpha)


@torch.library.custom_op("coda::rms_finish", mutates_args=())
def _rms_finish(partials: Tensor, dim: int, eps: float) -> Tensor:
    rstd = _vec(partials.shape[0], partials.device)
    _run(lib.coda_rms_finish, partials.device, _desc(partials, "partials"), _desc(rstd, "rstd_out"), dim, eps)
    return rstd


@_rms_finish.register_fake
def _(partials, dim, eps):
    return _vec(partials.shape[0], partials.device)


def rms_finish(partials, dim, eps=1e-5):
    """rstd[m] = 1 / sqrt(sum_t partials[m, t] / dim + eps), fp32 [M]."""
    return torch.ops.coda.rms_finish(partials, dim, eps)


# ---- SwiGLU -----------------------------------------------------------------------------------------------


def _swiglu(fn, a, b, rstd, save_z):
    device = _device_of(a=a, b=b, rstd=rstd)
    m, n = a.shape[0], b.shape[0]
    z = _rows(m, n, a.dtype, device) if save_z else _none(device, a.dtype)
    o = _rows(m, n // 2, a.dtype, device)
    _run(fn, device, _desc(a, "a"), _desc(b, "b"), _desc(rstd, "rstd"), _desc(z, "z_out") if save_z else None,
         _desc(o, "o_out"))
    return z, o


def _swiglu_fake(a, b, rstd, save_z):
    m, n = a.shape[0], b.shape[0]
    z = _rows(m, n, a.dtype, a.device) if save_z else _none(a.device, a.dtype)
    return z, _rows(m, n // 2, a.dtype, a.device)


@torch.library.custom_op("coda::gemm_swiglu", mutates_args=())
def _gemm_swiglu(a: Tensor, b: Tensor, rstd: Optional[Tensor], save_z: bool) -> tuple[Tensor, Tensor]:
    return _swiglu(lib.coda_gemm_swiglu, a, b, rstd, save_z)


@torch.library.custom_op("coda::gemm_rmsnorm_swiglu", mutates_args=())
def _gemm_rmsnorm_swiglu(a: Tensor, b: Tensor, rstd: Tensor, save_z: bool) -> tuple[Tensor, Tensor]:
    return _swiglu(lib.coda_gemm_rmsnorm_swiglu, a, b, rstd, save_z)


_gemm_swiglu.register_fake(_swiglu_fake)
_gemm_rmsnorm_swiglu.register_fake(_swiglu_fake)


def gemm_swiglu(a, b, rstd=None, save_z=False):
    """z = (rstd *) a b^T with b the interleaved gate/up weight [2F, K]; o = silu(z[:, 0::2]) z[:, 1::2]
    [M, F]. Returns o, or (z, o) with save_z (z is what the backward needs)."""
    z, o = torch.ops.coda.gemm_swiglu(a, b, rstd, save_z)
    return (z, o) if save_z else o


def gemm_rmsnorm_swiglu(a, b, rstd, save_z=False):
    """gemm_swiglu with rstd required: RMSNorm(x) Wgu^T = diag(rstd) ((x * w) Wgu^T), then SwiGLU."""
    z, o = torch.ops.coda.gemm_rmsnorm_swiglu(a, b, rstd, save_z)
    return (z, o) if save_z else o


# ---- RoPE -------------------------------------------------------------------------------------------------


def _rope(fn, a, b, rstd, positions, freqs, heads_q, heads_kv, head_dim):
    device = _device_of(a=a, b=b, rstd=rstd, positions=positions, freqs=freqs)
    out = _rows(a.shape[0], b.shape[0], a.dtype, device)
    _run(fn, device, _desc(a, "a"), _desc(b, "b"), _desc(rstd, "rstd"), _desc(positions, "positions"),
         _desc(freqs, "freqs"), _heads(heads_q, heads_kv, head_dim), _desc(out, "out"))
    return out


def _rope_fake(a, b, rstd, positions, freqs, heads_q, heads_kv, head_dim):
    return _rows(a.shape[0], b.shape[0], a.dtype, a.device)


@torch.library.custom_op("coda::gemm_rope", mutates_args=())
def _gemm_rope(
    a: Tensor, b: Tensor, rstd: Optional[Tensor], positions: Tensor, freqs: Tensor, heads_q: int, heads_kv: int,
    head_dim: int
) -> Tensor:
    return _rope(lib.coda_gemm_rope, a, b, rstd, positions, freqs, heads_q, heads_kv, head_dim)


@torch.library.custom_op("coda::gemm_rmsnorm_rope", mutates_args=())
def _gemm_rmsnorm_rope(
    a: Tensor, b: Tensor, rstd: Tensor, positions: Tensor, freqs: Tensor, heads_q: int, heads_kv: int, head_dim: int
) -> Tensor:
    return _rope(lib.coda_gemm_rmsnorm_rope, a, b, rstd, positions, freqs, heads_q, heads_kv, head_dim)


_gemm_rope.register_fake(_rope_fake)
_gemm_rmsnorm_rope.register_fake(_rope_fake)


def gemm_rope(a, b, positions, freqs, heads, rstd=None):
    """qkv = RoPE((rstd *) a b^T) [M, (hq + 2 hkv) hd]: q and k heads rotated on interleaved pairs
    by positions[m] * freqs[i] turns (rope_frequencies), v unrotated. heads = (hq, hkv, hd);
    positions int32 [M], freqs fp32 [hd / 2]."""
    return torch.ops.coda.gemm_rope(a, b, rstd, positions, freqs, *heads)


def gemm_rmsnorm_rope(a, b, rstd, positions, freqs, heads):
    """gemm_rope with rstd required."""
    return torch.ops.coda.gemm_rmsnorm_rope(a, b, rstd, positions, freqs, *heads)


# ---- QK-norm + RoPE ---------------------------------------------------------------------------------------


def _sumsq_cols(heads_q, heads_kv, head_dim):
    return (heads_q + heads_kv) * max(qk_segments(head_dim), 1)


@torch.library.custom_op("coda::gemm_qkv_sqsum", mutates_args=())
def _gemm_qkv_sqsum(
    a: Tensor, b: Tensor, rstd: Optional[Tensor], heads_q: int, heads_kv: int, head_dim: int
) -> tuple[Tensor, Tensor]:
    device = _device_of(a=a, b=b, rstd=rstd)
    m = a.shape[0]
    qkv = _rows(m, b.shape[0], a.dtype, device)
    sumsq = torch.empty((m, _sumsq_cols(heads_q, heads_kv, head_dim)), dtype=torch.float32, device=device)
    _run(lib.coda_gemm_qkv_sqsum, device, _desc(a, "a"), _desc(b, "b"), _desc(rstd, "rstd"),
         _heads(heads_q, heads_kv, head_dim), _desc(qkv, "qkv_out"), _desc(sumsq, "sumsq_out"))
    return qkv, sumsq


@_gemm_qkv_sqsum.register_fake
def _(a, b, rstd, heads_q, heads_kv, head_dim):
    m = a.shape[0]
    return (_rows(m, b.shape[0], a.dtype, a.device),
            torch.empty((m, _sumsq_cols(heads_q, heads_kv, head_dim)), dtype=torch.float32, device=a.device))


def gemm_qkv_sqsum(a, b, heads, rstd=None):
    """qkv = (rstd *) a b^T, stored before the norm, and the per-head sums of squares of q and k
    [M, (hq + hkv) * qk_segments(hd)]. Returns (qkv, sumsq); then qknorm_rope."""
    return torch.ops.coda.gemm_qkv_sqsum(a, b, rstd, *heads)


@torch.library.custom_op("coda::qknorm_rope", mutates_args=())
def _qknorm_rope(
    qkv: Tensor, sumsq: Tensor, gamma_q: Tensor, gamma_k: Tensor, positions: Tensor, freqs: Tensor, heads_q: int,
    heads_kv: int, head_dim: int, eps: float
) -> Tensor:
    device = _device_of(qkv=qkv, sumsq=sumsq, gamma_q=gamma_q, gamma_k=gamma_k, positions=positions, freqs=freqs)
    out = _rows(qkv.shape[0], qkv.shape[1], qkv.dtype, device)
    _run(lib.coda_qknorm_rope, device, _desc(qkv, "qkv"), _desc(sumsq, "sumsq"), _desc(gamma_q, "gamma_q"),
         _desc(gamma_k, "gamma_k"), _desc(positions, "positions"), _desc(freqs, "freqs"),
         _heads(heads_q, heads_kv, head_dim), eps, _desc(out, "out"))
    return out


@_qknorm_rope.register_fake
def _(qkv, sumsq, gamma_q, gamma_k, positions, freqs, heads_q, heads_kv, head_dim, eps):
    return _rows(qkv.shape[0], qkv.shape[1], qkv.dtype, qkv.device)


def qknorm_rope(qkv, sumsq, gamma_q, gamma_k, positions, freqs, heads, eps=1e-6):
    """Per-head RMSNorm of q and k (gamma_q, gamma_k [hd]) from gemm_qkv_sqsum's sums, then RoPE;
    v copied. Returns the new [M, N3] tensor."""
    return torch.ops.coda.qknorm_rope(qkv, sumsq, gamma_q, gamma_k, positions, freqs, *heads, eps)


# ---- LM head and cross-entropy ----------------------------------------------------------------------------


def _lse(fn, a, b, rstd, targets, ignore_index, save_logits):
    device = _device_of(a=a, b=b, rstd=rstd, targets=targets)
    m, v = a.shape[0], b.shape[0]
    logits = _rows(m, v, a.dtype, device) if save_logits else _none(device, a.dtype)
    partials, target_logit = _partials(m, v, device), _vec(m, device)
    _run(fn, device, _desc(a, "a"), _desc(b, "b"), _desc(rstd, "rstd"), _desc(targets, "targets"), ignore_index,
         _desc(logits, "logits_out") if save_logits else None, _desc(partials, "lse_partials"),
         _desc(target_logit, "target_logit_out"))
    return logits, partials, target_logit


def _lse_fake(a, b, rstd, targets, ignore_index, save_logits):
    m, v = a.shape[0], b.shape[0]
    logits = _rows(m, v, a.dtype, a.device) if save_logits else _none(a.device, a.dtype)
    return logits, _partials(m, v, a.device), _vec(m, a.device)


@torch.library.custom_op("coda::gemm_lse", mutates_args=())
def _gemm_lse(
    a: Tensor, b: Tensor, rstd: Optional[Tensor], targets: Tensor, ignore_index: int, save_logits: bool
) -> tuple[Tensor, Tensor, Tensor]:
    return _lse(lib.coda_gemm_lse, a, b, rstd, targets, ignore_index, save_logits)


@torch.library.custom_op("coda::gemm_rmsnorm_lse", mutates_args=())
def _gemm_rmsnorm_lse(
    a: Tensor, b: Tensor, rstd: Tensor, targets: Tensor, ignore_index: int, save_logits: bool
) -> tuple[Tensor, Tensor, Tensor]:
    return _lse(lib.coda_gemm_rmsnorm_lse, a, b, rstd, targets, ignore_index, save_logits)


_gemm_lse.register_fake(_lse_fake)
_gemm_rmsnorm_lse.register_fake(_lse_fake)


def gemm_lse(a, b, targets, rstd=None, ignore_index=IGNORE_INDEX, save_logits=False):
    """LM head statistics: per-128-column (PARTIAL_COLS) LSE partials [M, ceil(V / 128)] and the target logit [M]
    of logits = (rstd *) a b^T, the logits [M, V] themselves only with save_logits. Returns
    (lse_partials, target_logit), or (logits, lse_partials, target_logit) with save_logits."""
    logits, partials, target_logit = torch.ops.coda.gemm_lse(a, b, rstd, targets, ignore_index, save_logits)
    return (logits, partials, target_logit) if save_logits else (partials, target_logit)


def gemm_rmsnorm_lse(a, b, rstd, targets, ignore_index=IGNORE_INDEX, save_logits=False):
    """gemm_lse with rstd required."""
    logits, partials, target_logit = torch.ops.coda.gemm_rmsnorm_lse(a, b, rstd, targets, ignore_index, save_logits)
    return (logits, partials, target_logit) if save_logits else (partials, target_logit)


@torch.library.custom_op("coda::lse_finish", mutates_args=())
def _lse_finish(partials: Tensor) -> Tensor:
    lse = _vec(partials.shape[0], partials.device)
    _run(lib.coda_lse_finish, partials.device, _desc(partials, "partials"), _desc(lse, "lse_out"))
    return lse


@_lse_finish.register_fake
def _(partials):
    return _vec(partials.shape[0], partials.device)


def lse_finish(partials):
    """lse[m] = log sum_t exp(partials[m, t]), fp32 [M]."""
    return torch.ops.coda.lse_finish(partials)


def _reduction(reduction):
    if reduction not in _REDUCTIONS:
        raise ValueError(f"coda: argument 'reduction' must be 'mean' or 'sum', got {reduction!r}")
    return _REDUCTIONS[reduction]


def _loss_outputs(m, device):
    return torch.empty((), dtype=torch.float32, device=device), _vec(m, device)


@torch.library.custom_op("coda::cross_entropy", mutates_args=())
def _cross_entropy(
    lse: Tensor, target_logit: Tensor, targets: Tensor, ignore_index: int, reduction: str
) -> tuple[Tensor, Tensor]:
    device = _device_of(lse=lse, target_logit=target_logit, targets=targets)
    loss, row_loss = _loss_outputs(lse.shape[0], device)
    _run(lib.coda_cross_entropy, device, _desc(lse, "lse"), _desc(target_logit, "target_logit"),
         _desc(targets, "targets"), ignore_index, _reduction(reduction), _desc(loss, "loss_out"),
         _desc(row_loss, "row_loss_out"), None, None, 1.0)
    return loss, row_loss


@_cross_entropy.register_fake
def _(lse, target_logit, targets, ignore_index, reduction):
    return _loss_outputs(lse.shape[0], lse.device)


def cross_entropy(lse, target_logit, targets, ignore_index=IGNORE_INDEX, reduction="mean"):
    """loss = mean (or sum) over non-ignored rows of lse - target_logit. Returns (loss, row_loss):
    a 0-dim fp32 tensor and the per-row losses [M] (0 for ignored rows). Every row ignored: loss 0."""
    return torch.ops.coda.cross_entropy(lse, target_logit, targets, ignore_index, reduction)


@torch.library.custom_op("coda::cross_entropy_grad_", mutates_args=("logits",))
def _cross_entropy_grad_(
    lse: Tensor, target_logit: Tensor, targets: Tensor, logits: Tensor, ignore_index: int, reduction: str,
    dloss: float
) -> tuple[Tensor, Tensor]:
    device = _device_of(lse=lse, target_logit=target_logit, targets=targets, logits=logits)
    loss, row_loss = _loss_outputs(lse.shape[0], device)
    lg = _desc(logits, "logits")
    _run(lib.coda_cross_entropy, device, _desc(lse, "lse"), _desc(target_logit, "target_logit"),
         _desc(targets, "targets"), ignore_index, _reduction(reduction), _desc(loss, "loss_out"),
         _desc(row_loss, "row_loss_out"), lg, lg, dloss)
    return loss, row_loss


@_cross_entropy_grad_.register_fake
def _(lse, target_logit, targets, logits, ignore_index, reduction, dloss):
    return _loss_outputs(lse.shape[0], lse.device)


def cross_entropy_grad_(lse, target_logit, targets, logits, ignore_index=IGNORE_INDEX, reduction="mean", dloss=1.0):
    """cross_entropy, and the logits overwritten in place by dlogits = (softmax - onehot) * dloss
    (/ count for the mean). Returns (loss, row_loss)."""
    return torch.ops.coda.cross_entropy_grad_(lse, target_logit, targets, logits, ignore_index, reduction, dloss)


@torch.library.custom_op("coda::lm_head_loss", mutates_args=())
def _lm_head_loss(
    a: Tensor, b: Tensor, rstd: Optional[Tensor], targets: Tensor, ignore_index: int, reduction: str
) -> tuple[Tensor, Tensor, Tensor]:
    device = _device_of(a=a, b=b, rstd=rstd, targets=targets)
    m, v = a.shape[0], b.shape[0]
    loss, row_loss = _loss_outputs(m, device)
    lse = _vec(m, device)
    nbytes = lib.coda_lm_head_loss_workspace_bytes(m, v)
    workspace = torch.empty((max(nbytes, 1),), dtype=torch.uint8, device=device)
    _run(lib.coda_lm_head_loss, device, _desc(a, "a"), _desc(b, "b"), _desc(rstd, "rstd"), _desc(targets, "targets"),
         ignore_index, _reduction(reduction), _desc(loss, "loss_out"), _desc(row_loss, "row_loss_out"),
         _desc(lse, "lse_out"), workspace.data_ptr(), nbytes)
    return loss, row_loss, lse


@_lm_head_loss.register_fake
def _(a, b, rstd, targets, ignore_index, reduction):
    loss, row_loss = _loss_outputs(a.shape[0], a.device)
    return loss, row_loss, _vec(a.shape[0], a.device)


def lm_head_loss(a, b, targets, rstd=None, ignore_index=IGNORE_INDEX, reduction="mean"):
    """The logits-free LM-head loss forward: cross-entropy of (rstd *) a b^T against targets
    without an [M, V] tensor. Returns (loss, row_loss, lse); lse [M] is what a backward needs."""
    return torch.ops.coda.lm_head_loss(a, b, rstd, targets, ignore_index, reduction)


def _lm_head_train_outputs(a, b, device):
    m, v = a.shape[0], b.shape[0]
    loss = torch.empty((), dtype=torch.float32, device=device)
    return loss, _rows(m, v, a.dtype, device), _vec(m, device), _vec(m, device)


@torch.library.custom_op("coda::lm_head_train", mutates_args=())
def _lm_head_train(
    a: Tensor, b: Tensor, rstd: Optional[Tensor], targets: Tensor, ignore_index: int, reduction: str
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    _check_2d("lm_head_train", a=a, b=b)
    device = _device_of(a=a, b=b, rstd=rstd, targets=targets)
    loss, grad, grad_scale, lse = _lm_head_train_outputs(a, b, device)
    nbytes = lib.coda_lm_head_train_workspace_bytes(a.shape[0], b.shape[0])
    workspace = torch.empty((max(nbytes, 1),), dtype=torch.uint8, device=device)
    _run(lib.coda_lm_head_train, device, _desc(a, "a"), _desc(b, "b"), _desc(rstd, "rstd"),
         _desc(targets, "targets"), ignore_index, _reduction(reduction), _desc(loss, "loss_out"), None,
         _desc(lse, "lse_out"), _desc(grad, "grad_out"), _desc(grad_scale, "grad_scale_out"), workspace.data_ptr(),
         nbytes)
    return loss, grad, grad_scale, lse


@_lm_head_train.register_fake
def _(a, b, rstd, targets, ignore_index, reduction):
    _check_2d("lm_head_train", a=a, b=b)
    return _lm_head_train_outputs(a, b, a.device)


def lm_head_train(a, b, targets, rstd=None, ignore_index=IGNORE_INDEX, reduction="mean"):
    """The LM-head loss forward for training without a dlogits pass (docs/ops.md): cross-entropy of
    logits = (rstd *) a b^T against targets, and what the backward needs instead of the logits;
    a, b bf16 only (fp16's range cannot hold the shifted exponentials: ValueError).
    Returns (loss, grad, grad_scale, lse): the 0-dim fp32 loss (mean over non-ignored rows or sum;
    every row ignored: 0), grad [M, V] bf16 (rows padded to 16 bytes) and grad_scale fp32
    [M] with dlogits = dloss * grad_scale[:, None] * grad exactly (grad_scale 0 for ignored rows),
    lse fp32 [M]. The only [M, V] tensor is grad; lm_head_backward (or any GEMM) takes it as it is."""
    return torch.ops.coda.lm_head_train(a, b, rstd, targets, ignore_index, reduction)


def _lm_head_backward_outputs(a, b, need_da, need_db, db_dtype, device):
    m, v, k = a.shape[0], b.shape[0], a.shape[1]
    db_dtype = db_dtype or b.dtype
    da = _rows(m, k, a.dtype, device) if need_da else _none(device, a.dtype)
    db = _rows(v, k, db_dtype, device) if need_db else _none(device, db_dtype)
    return da, db


@torch.library.custom_op("coda::lm_head_backward", mutates_args=())
def _lm_head_backward(
    a: Tensor, b: Tensor, rstd: Optional[Tensor], grad: Tensor, grad_scale: Tensor, dloss: float,
    dloss_tensor: Optional[Tensor], need_da: bool, need_db: bool, db_dtype: Optional[torch.dtype]
) -> tuple[Tensor, Tensor]:
    _check_2d("lm_head_backward", a=a, b=b)
    if dloss_tensor is not None and (dloss_tensor.dtype != torch.float32 or dloss_tensor.numel() != 1):
        raise ValueError(f"lm_head_backward: argument 'dloss' as a tensor must be one float32 element, got "
                         f"{dloss_tensor.dtype} of shape {tuple(dloss_tensor.shape)}")
    device = _device_of(a=a, b=b, rstd=rstd, grad=grad, grad_scale=grad_scale, dloss=dloss_tensor)
    da, db = _lm_head_backward_outputs(a, b, need_da, need_db, db_dtype, device)
    nbytes = lib.coda_lm_head_backward_workspace_bytes(a.shape[0], a.shape[1])
    workspace = torch.empty((max(nbytes, 1),), dtype=torch.uint8, device=device)
    _run(lib.coda_lm_head_backward, device, _desc(a, "a"), _desc(b, "b"), _desc(rstd, "rstd"), _desc(grad, "grad"),
         _desc(grad_scale, "grad_scale"), dloss, None if dloss_tensor is None else dloss_tensor.data_ptr(),
         _desc(da, "da_out") if need_da else None, _desc(db, "db_out") if need_db else None, workspace.data_ptr(),
         nbytes)
    return da, db


@_lm_head_backward.register_fake
def _(a, b, rstd, grad, grad_scale, dloss, dloss_tensor, need_da, need_db, db_dtype):
    _check_2d("lm_head_backward", a=a, b=b)
    return _lm_head_backward_outputs(a, b, need_da, need_db, db_dtype, a.device)


def lm_head_backward(a, b, grad, grad_scale, rstd=None, dloss=1.0, need_da=True, need_db=True, db_dtype=None):
    """The backward of lm_head_train from its operands (a [M, K], b [V, K], rstd) and its grad,
    grad_scale: with s = dloss * grad_scale (* rstd) per row, da = diag(s) (grad b) [M, K] in a's
    dtype and db = grad^T diag(s) a [V, K] in db_dtype (default b's). dloss: a float, or a
    one-element float32 tensor on the tensors' device (read when the kernels run: no host sync).
    Not the gradient of rstd (coda.lm_head_cross_entropy computes that one). Returns (da, db), None
    for the one not asked for."""
    t = dloss if isinstance(dloss, Tensor) else None
    da, db = torch.ops.coda.lm_head_backward(a, b, rstd, grad, grad_scale, 1.0 if t is not None else float(dloss), t,
                                             need_da, need_db, db_dtype)
    return da if need_da else None, db if need_db else None


# ---- backward operators ------------------------------------------------------------------------------------
# The dgrad form (docs/ops.md): a [M, K] row-major, the gradient of the consuming GEMM's output; b the
# consuming GEMM's weight [K, N] stored row-major and viewed as [N, K] (w.t(): unit stride along N, what
# the GPU kernels take; the emulator takes any operand form).


def _rmsnorm_backward_outputs(a, b, x, save_y, device):
    m, n = a.shape[0], b.shape[0]
    y = _rows(m, n, x.dtype, device) if save_y else _none(device, x.dtype)
    return _rows(m, n, x.dtype, device), y, _col_partials(m, n, device)


@torch.library.custom_op("coda::gemm_rmsnorm_backward", mutates_args=())
def _gemm_rmsnorm_backward(
    a: Tensor, b: Tensor, x: Tensor, rstd: Tensor, zdz: Tensor, norm_weight: Tensor, dres: Optional[Tensor],
    save_y: bool
) -> tuple[Tensor, Tensor, Tensor]:
    _check_2d("gemm_rmsnorm_backward", a=a, b=b, x=x)
    device = _device_of(a=a, b=b, x=x, rstd=rstd, zdz=zdz, norm_weight=norm_weight, dres=dres)
    dx, y, q = _rmsnorm_backward_outputs(a, b, x, save_y, device)
    _run(lib.coda_gemm_rmsnorm_backward, device, _desc(a, "a"), _desc(b, "b"), _desc(x, "x"), _desc(rstd, "rstd"),
         _desc(zdz, "zdz"), _desc(norm_weight, "norm_weight"), _desc(dres, "dres"), _desc(dx, "dx_out"),
         _desc(y, "y_out") if save_y else None, _desc(q, "dw_partials"))
    return dx, y, q


@_gemm_rmsnorm_backward.register_fake
def _(a, b, x, rstd, zdz, norm_weight, dres, save_y):
    _check_2d("gemm_rmsnorm_backward", a=a, b=b, x=x)
    return _rmsnorm_backward_outputs(a, b, x, save_y, a.device)


def gemm_rmsnorm_backward(a, b, x, rstd, zdz, norm_weight, dres=None, save_y=False):
    """RMSNorm backward in the epilogue of dy = a b^T (coda-math.md 5.2): a = dz [M, K], the gradient
    of the GEMM that consumed RMSNorm(x); b = its weight [K, d] viewed as [d, K] (w.t()); x [M, d] the
    saved norm input, rstd fp32 [M], zdz fp32 [M] = c = (1/d) sum_k z dz over that GEMM's output z
    (rope_backward's or row_sum_finish's, scaled by 1/d), norm_weight [d]. With xh = x rstd:
    dx = rstd (dy norm_weight - xh c) (+ dres), y = xh norm_weight (RMSNorm(x) recomputed, for
    dW = dz^T y), dw_partials [ceil(M / 128), d] fp32 = per 128-row granule (PARTIAL_ROWS) sums of
    dy xh (col_sum_finish gives the norm-weight gradient). dx and y in x's dtype. Returns
    (dx, dw_partials), or (dx, y, dw_partials) with save_y."""
    dx, y, q = torch.ops.coda.gemm_rmsnorm_backward(a, b, x, rstd, zdz, norm_weight, dres, save_y)
    return (dx, y, q) if save_y else (dx, q)


def _swiglu_backward_outputs(a, b, z, save_o, save_zdz, device):
    m, f = a.shape[0], b.shape[0]
    o = _rows(m, f, z.dtype, device) if save_o else _none(device, z.dtype)
    p = _partials(m, f, device) if save_zdz else _none(device, torch.float32)
    return _rows(m, 2 * f, z.dtype, device), o, p


@torch.library.custom_op("coda::gemm_swiglu_backward", mutates_args=())
def _gemm_swiglu_backward(
    a: Tensor, b: Tensor, z: Tensor, save_o: bool, save_zdz: bool
) -> tuple[Tensor, Tensor, Tensor]:
    _check_2d("gemm_swiglu_backward", a=a, b=b)
    device = _device_of(a=a, b=b, z=z)
    dz, o, p = _swiglu_backward_outputs(a, b, z, save_o, save_zdz, device)
    _run(lib.coda_gemm_swiglu_backward, device, _desc(a, "a"), _desc(b, "b"), _desc(z, "z"), _desc(dz, "dz_out"),
         _desc(o, "o_out") if save_o else None, _desc(p, "zdz_partials") if save_zdz else None)
    return dz, o, p


@_gemm_swiglu_backward.register_fake
def _(a, b, z, save_o, save_zdz):
    _check_2d("gemm_swiglu_backward", a=a, b=b)
    return _swiglu_backward_outputs(a, b, z, save_o, save_zdz, a.device)


def gemm_swiglu_backward(a, b, z, save_o=False, save_zdz=False):
    """SwiGLU backward in the epilogue of do = a b^T (coda-math.md 5.3): a = dY [M, K], the gradient
    of the down projection's output; b = Wdown [K, F] viewed as [F, K] (w.t()); z [M, 2F] the saved
    interleaved pre-activation (g, u). dz [M, 2F] interleaved: dg = do u s (1 + g (1 - s)),
    du = do silu(g) (s = sigmoid(g)); o = silu(g) u [M, F] recomputed (save_o, for dWdown = dY^T o);
    zdz_partials [M, ceil(F / 128)] fp32 = per 128-column granule sums of g dg + u du (save_zdz;
    row_sum_finish with scale 1/d gives the next RMSNorm backward's zdz). dz and o in z's dtype.
    Returns dz, followed by o and zdz_partials where asked for: dz, (dz, o), (dz, zdz_partials) or
    (dz, o, zdz_partials)."""
    dz, o, p = torch.ops.coda.gemm_swiglu_backward(a, b, z, save_o, save_zdz)
    out = (dz, *((o,) if save_o else ()), *((p,) if save_zdz else ()))
    return out if len(out) > 1 else dz


@torch.library.custom_op("coda::row_sum_finish", mutates_args=())
def _row_sum_finish(partials: Tensor, scale: float) -> Tensor:
    _check_2d("row_sum_finish", partials=partials)
    out = _vec(partials.shape[0], partials.device)
    _run(lib.coda_row_sum_finish, partials.device, _desc(partials, "partials"), _desc(out, "out"), scale)
    return out


@_row_sum_finish.register_fake
def _(partials, scale):
    _check_2d("row_sum_finish", partials=partials)
    return _vec(partials.shape[0], partials.device)


def row_sum_finish(partials, scale=1.0):
    """out[m] = scale * sum_t partials[m, t], fp32 [M]: ZdZ from per-row partials
    (gemm_swiglu_backward's zdz_partials, scale 1/d)."""
    return torch.ops.coda.row_sum_finish(partials, scale)


def _col_sum_out(partials, out_dtype):
    if out_dtype not in (None, torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"col_sum_finish: argument 'out_dtype' must be torch.bfloat16, torch.float16 or "
                         f"torch.float32 (or None: float32), got {out_dtype}")
    return torch.empty((partials.shape[1],), dtype=out_dtype or torch.float32, device=partials.device)


@torch.library.custom_op("coda::col_sum_finish", mutates_args=())
def _col_sum_finish(partials: Tensor, out_dtype: Optional[torch.dtype]) -> Tensor:
    _check_2d("col_sum_finish", partials=partials)
    out = _col_sum_out(partials, out_dtype)
    _run(lib.coda_col_sum_finish, partials.device, _desc(partials, "partials"), _desc(out, "out"))
    return out


@_col_sum_finish.register_fake
def _(partials, out_dtype):
    _check_2d("col_sum_finish", partials=partials)
    return _col_sum_out(partials, out_dtype)


def col_sum_finish(partials, out_dtype=None):
    """out[n] = sum_t partials[t, n] [N] in out_dtype (bf16, fp16 or fp32; default fp32): the
    norm-weight gradient from gemm_rmsnorm_backward's dw_partials."""
    return torch.ops.coda.col_sum_finish(partials, out_dtype)


def _rope_backward_outputs(dqkv, save_zdz, device):
    m = dqkv.shape[0]
    zdz = _vec(m, device) if save_zdz else _none(device, torch.float32)
    return _rows(m, dqkv.shape[1], dqkv.dtype, device), zdz


@torch.library.custom_op("coda::rope_backward", mutates_args=())
def _rope_backward(
    qkv: Tensor, dqkv: Tensor, positions: Tensor, freqs: Tensor, heads_q: int, heads_kv: int, head_dim: int,
    save_zdz: bool, zdz_scale: float
) -> tuple[Tensor, Tensor]:
    _check_2d("rope_backward", qkv=qkv, dqkv=dqkv)
    device = _device_of(qkv=qkv, dqkv=dqkv, positions=positions, freqs=freqs)
    dz, zdz = _rope_backward_outputs(dqkv, save_zdz, device)
    _run(lib.coda_rope_backward, device, _desc(qkv, "qkv"), _desc(dqkv, "dqkv"), _desc(positions, "positions"),
         _desc(freqs, "freqs"), _heads(heads_q, heads_kv, head_dim), _desc(dz, "dz_out"),
         _desc(zdz, "zdz_out") if save_zdz else None, zdz_scale)
    return dz, zdz


@_rope_backward.register_fake
def _(qkv, dqkv, positions, freqs, heads_q, heads_kv, head_dim, save_zdz, zdz_scale):
    _check_2d("rope_backward", qkv=qkv, dqkv=dqkv)
    return _rope_backward_outputs(dqkv, save_zdz, dqkv.device)


def rope_backward(qkv, dqkv, positions, freqs, heads, save_zdz=False, zdz_scale=1.0):
    """RoPE backward (coda-math.md 5.4, elementwise): dz = R(-theta) dqkv on the q and k heads, v
    columns as they are, [M, N3] in dqkv's dtype; with save_zdz also zdz = zdz_scale * sum_k qkv dqkv
    fp32 [M] (rotation keeps dot products: with zdz_scale 1/d, the zdz of gemm_rmsnorm_backward).
    qkv [M, N3] the forward output, dqkv its gradient, positions int32 [M] (>= 0), freqs fp32
    [hd / 2], heads = (hq, hkv, hd). Returns dz, or (dz, zdz) with save_zdz."""
    dz, zdz = torch.ops.coda.rope_backward(qkv, dqkv, positions, freqs, *heads, save_zdz, zdz_scale)
    return (dz, zdz) if save_zdz else dz


# ---- weight-layout helpers --------------------------------------------------------------------------------


@torch.library.custom_op("coda::interleave_gate_up", mutates_args=())
def _interleave_gate_up(gate: Tensor, up: Tensor) -> Tensor:
    device = _device_of(gate=gate, up=up)
    out = torch.empty((2 * gate.shape[0], gate.shape[1]), dtype=gate.dtype, device=device)
    _run(lib.coda_interleave_gate_up, device, _desc(gate, "gate"), _desc(up, "up"), _desc(out, "out"))
    return out


@_interleave_gate_up.register_fake
def _(gate, up):
    return torch.empty((2 * gate.shape[0], gate.shape[1]), dtype=gate.dtype, device=gate.device)


def interleave_gate_up(gate, up):
    """[2F, K] rows gate[0], up[0], gate[1], ...: the weight gemm_swiglu expects."""
    return torch.ops.coda.interleave_gate_up(gate, up)


@torch.library.custom_op("coda::permute_rotate_half_to_interleaved", mutates_args=())
def _permute_rotate_half_to_interleaved(w: Tensor, heads_q: int, heads_kv: int, head_dim: int) -> Tensor:
    out = torch.empty(tuple(w.shape), dtype=w.dtype, device=w.device)
    _run(lib.coda_permute_rotate_half_to_interleaved, w.device, _desc(w, "w"), _heads(heads_q, heads_kv, head_dim),
         _desc(out, "out"))
    return out


@_permute_rotate_half_to_interleaved.register_fake
def _(w, heads_q, heads_kv, head_dim):
    return torch.empty(tuple(w.shape), dtype=w.dtype, device=w.device)


def permute_rotate_half_to_interleaved(w, heads):
    """A fused [N3, K] q/k/v weight with Hugging Face rotate-half q/k rows -> coda's interleaved
    pairs (2i, 2i + 1); v rows copied. heads = (hq, hkv, hd)."""
    return torch.ops.coda.permute_rotate_half_to_interleaved(w, *heads)


# ---- host helpers -----------------------------------------------------------------------------------------


def rope_frequencies(head_dim, base=500000.0, factor=0.0, low_freq_factor=1.0, high_freq_factor=4.0,
                     original_max_position=8192.0, device=None):
    """Per-pair RoPE frequencies in turns per position (fp32 [head_dim / 2]), with the Llama-3.1
    scaling when factor > 0: what gemm_rope and qknorm_rope take as freqs."""
    out = (ctypes.c_float * max(head_dim // 2, 1))()
    check(lib.coda_rope_frequencies(out, head_dim, base, factor, low_freq_factor, high_freq_factor,
                                    original_max_position))
    return torch.tensor(list(out)[: head_dim // 2], dtype=torch.float32, device=device)
