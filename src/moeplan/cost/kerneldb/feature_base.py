"""What the feature modules (:mod:`.moe_features`, :mod:`.attention_features`) share: the rows'
kernel, the step between kernel paths in the residual field, the SM-count column and the
features of kernels that pay their per-work cost once per wave of blocks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from moeplan.cost.kerneldb.base import Columns, Features

#: streaming multiprocessors of the GPU a row runs on (a column the variant fills from the GPU record, fit.sm_count)
SM_COUNT_COLUMN = "_sm_count"
PATH_COORD = 4.0  # log2 units between kernel paths in the residual field (> any shape step)


@dataclass(frozen=True, kw_only=True, slots=True)
class WaveFeatures(Features):
    """Features of a kernel whose per-work cost runs serially inside each of ``ctas`` thread
    blocks: the work term is paid once per wave of blocks over the SMs (:mod:`.fit`)."""

    ctas: np.ndarray


def row_kernels(cols: Columns) -> np.ndarray:
    """The rows' ``kernel_source`` ("" where the query names none)."""
    n = len(next(iter(cols.values())))
    return np.asarray(cols.get("kernel_source", np.full(n, ""))).astype(str)
