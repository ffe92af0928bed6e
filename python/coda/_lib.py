"""libcoda.so through ctypes: finding and loading it, the C ABI's types and prototypes, and its
status codes turned into Python exceptions.

Search order for the library: the environment variable CODA_LIBRARY (a path to the file), this
package's folder (a wheel or an install that copied libcoda.so next to these files), then the
repository's build/lib (an editable install from a source tree built with ./coda test).
"""

import ctypes
import os
from pathlib import Path

LIBRARY_NAME = "libcoda.so"

# coda.h's constants.
MAX_RANK = 4
PARTIAL_COLS = 128
PARTIAL_ROWS = 128
IGNORE_INDEX = -100

SUCCESS = 0
ERROR_INVALID_ARGUMENT = 1
ERROR_NOT_SUPPORTED = 2
ERROR_CUDA = 3
ERROR_INTERNAL = 4

DTYPE_BF16 = 0
DTYPE_FP16 = 1
DTYPE_FP32 = 2
DTYPE_INT32 = 3

REDUCTION_MEAN = 0
REDUCTION_SUM = 1


class Tensor(ctypes.Structure):
    """coda_tensor_t: data pointer, rank, dtype, sizes and strides in elements."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("rank", ctypes.c_int32),
        ("dtype", ctypes.c_int),  # coda_dtype_t (a C enum: int)
        ("sizes", ctypes.c_int64 * MAX_RANK),
        ("strides", ctypes.c_int64 * MAX_RANK),
    ]


class Heads(ctypes.Structure):
    """coda_heads_t."""

    _fields_ = [("heads_q", ctypes.c_int64), ("heads_kv", ctypes.c_int64), ("head_dim", ctypes.c_int64)]


_T = ctypes.POINTER(Tensor)
_S = ctypes.c_void_p  # coda_stream_t (cudaStream_t); None is the legacy default stream
_F = ctypes.c_float
_I32 = ctypes.c_int32
_I64 = ctypes.c_int64
_D = ctypes.c_double
_ST = ctypes.c_int  # coda_status_t

# name: (restype, argtypes), as declared in include/coda/coda.h.
_PROTOTYPES = {
    "coda_status_string": (ctypes.c_char_p, [_ST]),
    "coda_last_error": (ctypes.c_char_p, []),
    "coda_version_string": (ctypes.c_char_p, []),
    "coda_device_check": (_ST, [ctypes.c_int]),
    "coda_gemm": (_ST, [_T, _T, _T, _S]),
    "coda_gemm_ex": (_ST, [_T, _T, _T, _T, _F, _F, ctypes.c_void_p, ctypes.c_void_p, _S]),
    "coda_gemm_residual_rmsnorm_partial": (_ST, [_T, _T, _T, _T, _T, _T, _T, _F, _S]),
    "coda_rms_finish": (_ST, [_T, _T, _I64, _F, _S]),
    "coda_gemm_swiglu": (_ST, [_T, _T, _T, _T, _T, _S]),
    "coda_gemm_rmsnorm_swiglu": (_ST, [_T, _T, _T, _T, _T, _S]),
    "coda_gemm_rope": (_ST, [_T, _T, _T, _T, _T, Heads, _T, _S]),
    "coda_gemm_rmsnorm_rope": (_ST, [_T, _T, _T, _T, _T, Heads, _T, _S]),
    "coda_rope_frequencies": (_ST, [ctypes.POINTER(ctypes.c_float), _I64, _D, _D, _D, _D, _D]),
    "coda_gemm_qkv_sqsum": (_ST, [_T, _T, _T, Heads, _T, _T, _S]),
    "coda_qknorm_rope": (_ST, [_T, _T, _T, _T, _T, _T, Heads, _F, _T, _S]),
    "coda_gemm_lse": (_ST, [_T, _T, _T, _T, _I32, _T, _T, _T, _S]),
    "coda_gemm_rmsnorm_lse": (_ST, [_T, _T, _T, _T, _I32, _T, _T, _T, _S]),
    "coda_lse_finish": (_ST, [_T, _T, _S]),
    "coda_cross_entropy": (_ST, [_T, _T, _T, _I32, ctypes.c_int, _T, _T, _T, _T, _F, _S]),
    "coda_lm_head_loss_workspace_bytes": (ctypes.c_size_t, [_I64, _I64]),
    "coda_lm_head_loss": (_ST, [_T, _T, _T, _T, _I32, ctypes.c_int, _T, _T, _T, ctypes.c_void_p, ctypes.c_size_t, _S]),
    "coda_lm_head_train_workspace_bytes": (ctypes.c_size_t, [_I64, _I64]),
    "coda_lm_head_train": (_ST, [_T, _T, _T, _T, _I32, ctypes.c_int, _T, _T, _T, _T, _T, ctypes.c_void_p,
                                 ctypes.c_size_t, _S]),
    "coda_lm_head_backward_workspace_bytes": (ctypes.c_size_t, [_I64, _I64]),
    "coda_lm_head_backward": (_ST, [_T, _T, _T, _T, _T, _F, ctypes.c_void_p, _T, _T, ctypes.c_void_p, ctypes.c_size_t,
                                    _S]),
    "coda_gemm_rmsnorm_backward": (_ST, [_T, _T, _T, _T, _T, _T, _T, _T, _T, _T, _S]),
    "coda_gemm_swiglu_backward": (_ST, [_T, _T, _T, _T, _T, _T, _S]),
    "coda_row_sum_finish": (_ST, [_T, _T, _F, _S]),
    "coda_col_sum_finish": (_ST, [_T, _T, _S]),
    "coda_rope_backward": (_ST, [_T, _T, _T, _T, Heads, _T, _T, _F, _S]),
    "coda_interleave_gate_up": (_ST, [_T, _T, _T, _S]),
    "coda_permute_rotate_half_to_interleaved": (_ST, [_T, Heads, _T, _S]),
}


def candidates():
    """Where load() looks for libcoda.so, in order."""
    paths = []
    env = os.environ.get("CODA_LIBRARY")
    if env:
        paths.append(Path(env))
    here = Path(__file__).resolve().parent
    paths.append(here / LIBRARY_NAME)
    paths.append(here.parent.parent / "build" / "lib" / LIBRARY_NAME)  # <repo>/python/coda -> <repo>/build/lib
    return paths


def load():
    """Load libcoda.so and declare the C ABI's prototypes; ImportError naming every place tried."""
    tried = []
    for path in candidates():
        if not path.is_file():
            tried.append(f"{path} (not found)")
            continue
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        lib.path = str(path)
        return lib
    raise ImportError(
        "coda: cannot load libcoda.so; set CODA_LIBRARY to its path or build it (./coda test builds "
        "build/lib/libcoda.so). Tried: " + "; ".join(tried)
    )


lib = load()


def last_error():
    return lib.coda_last_error().decode("utf-8", "replace")


def check(status):
    """Raise for a failed coda call: ValueError for CODA_ERROR_INVALID_ARGUMENT (a shape, dtype,
    stride or value coda rejects), RuntimeError otherwise; the message is coda_last_error()'s."""
    if status == SUCCESS:
        return
    message = last_error() or lib.coda_status_string(status).decode()
    if status == ERROR_INVALID_ARGUMENT:
        raise ValueError(message)
    raise RuntimeError(message)


def version():
    return lib.coda_version_string().decode()
