"""Shared pieces of the operation families: per-row model inputs and column helpers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

Columns = Mapping[str, np.ndarray]
BF16_BYTES = 2.0  # bytes per bf16 value
#: ``Features.fp8`` of a row whose GEMMs run on FP4 tensor cores (the fp4 peak)
FP4_TIER = 2


@dataclass(frozen=True, kw_only=True, slots=True)
class Features:
    """Per-row model inputs (arrays of equal length). ``fp8`` is each row's tensor rate
    tier: 0 / False the bf16 peak, 1 / True the fp8 peak, :data:`FP4_TIER` the fp4 peak
    (:meth:`~.device.Device.tensor_peak`)."""

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
