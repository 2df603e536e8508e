"""Shared pieces of the operation families: per-row model inputs and column helpers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

Columns = Mapping[str, np.ndarray]
BF16_BYTES = 2.0  # bytes per bf16 value


@dataclass(frozen=True, kw_only=True, slots=True)
class Features:
    """Per-row model inputs (arrays of equal length)."""

    flops: np.ndarray
    nbytes: np.ndarray
    work: np.ndarray
    fp8: np.ndarray
    tokens: np.ndarray
    coords: np.ndarray


def col(cols: Columns, name: str) -> np.ndarray:
    return np.asarray(cols[name], dtype=float)


def l2(x: np.ndarray) -> np.ndarray:
    return np.log2(np.maximum(x, 1e-9))
