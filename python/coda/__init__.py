"""coda: Transformer training's memory-bound work (RMSNorm, SwiGLU, RoPE, residual adds,
cross-entropy) run inside the epilogues of the GEMMs around it, as PyTorch custom ops, autograd
functions, LLaMA modules and a one-call patch of a Hugging Face model.

    import torch, coda
    o = coda.gemm_rmsnorm_swiglu(h, w_gate_up, rstd)   # torch.ops.coda.gemm_rmsnorm_swiglu (forward)
    o = coda.rmsnorm_swiglu(h, w_gate_up, rstd)        # the same with autograd (coda.functional)
    coda.patch(model)                                  # a transformers LlamaForCausalLM (coda.nn)

CUDA tensors run coda's sm_90a kernels (H100/H200) on the current stream; CPU tensors run the CPU
emulator (the same epilogue code, for tests and development). Bad shapes, dtypes or strides raise
ValueError with coda's message; other failures RuntimeError. docs/python.md has the whole list.
"""

from ._lib import IGNORE_INDEX, PARTIAL_COLS, PARTIAL_ROWS, version
from ._lib import lib as _library
from .ops import *  # noqa: F401,F403 (the ops and their functions; ops.__all__)
from .ops import __all__ as _ops_all
from .functional import *  # noqa: F401,F403 (the autograd functions; functional.__all__)
from .functional import __all__ as _functional_all
from . import nn
from .nn import patch

__version__ = version()
library_path = _library.path

__all__ = ["IGNORE_INDEX", "PARTIAL_COLS", "PARTIAL_ROWS", "version", "library_path", "nn", "patch", *_ops_all,
           *_functional_all]
