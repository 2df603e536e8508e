"""Backend choice: Triton kernels only when Triton is importable *and* the tensor is on CUDA."""

from __future__ import annotations

import importlib.util
from functools import cache

import torch


@cache
def _triton_importable() -> bool:
    return importlib.util.find_spec("triton") is not None


def triton_enabled(t: torch.Tensor | None = None) -> bool:
    """True when the Triton path would run (for ``t``'s device when given)."""
    if not (_triton_importable() and torch.cuda.is_available()):
        return False
    return t is None or t.is_cuda
