"""Helpers shared by the Python suites: random inputs and design.md's tolerance rule."""

import torch

BF16 = torch.bfloat16
F64 = torch.float64


def hopper():
    """torch sees a CUDA device and coda's kernels run on it (an sm_90 GPU)."""
    from coda import _lib
    return torch.cuda.is_available() and _lib.lib.coda_device_check(0) == 0


def randn(gen, *shape, sd=1.0, dtype=BF16):
    return (torch.randn(*shape, generator=gen, dtype=torch.float32) * sd).to(dtype)


def positive(gen, n):
    return (torch.rand(n, generator=gen) + 0.5).to(torch.float32)


def rounded(t, dtype=BF16):
    """What an unfused graph stores: the value rounded to its storage dtype (back in float64)."""
    return t.to(dtype).to(F64)


def rel_error(got, want):
    got, want = got.to(F64), want.to(F64)
    return ((got - want).norm() / want.norm().clamp_min(1e-300)).item()


def assert_rule(name, got, want, unfused, eps=1e-4):
    """design.md 7: the fused result's error against float64 is at most 2x the unfused bf16
    pipeline's on the same inputs, plus eps."""
    fused, base = rel_error(got, want), rel_error(unfused, want)
    assert fused <= 2 * base + eps, f"{name}: fused rel. error {fused} > 2 x unfused ({base}) + {eps}"
