"""Communication families: engine all-reduce and DeepEP dispatch/combine (see families)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from moeplan.cost.kerneldb.base import BF16, Columns, Features
from moeplan.cost.kerneldb.base import col as _f
from moeplan.cost.kerneldb.base import l2 as _l2

DEEPEP_RANKS = 8  # node_num 1: one 8-GPU NVLink node


def _allreduce(cols: Columns) -> Features:
    m, n = _f(cols, "message_size"), _f(cols, "num_gpus")
    z = np.zeros_like(m)
    return Features(
        flops=z,
        nbytes=2 * (n - 1) / n * BF16 * m,
        work=z,
        fp8=np.zeros(len(m), bool),
        tokens=m,
        coords=np.stack([_l2(m), _l2(n)], 1),
    )


def dest_ranks(num_experts: np.ndarray, topk: np.ndarray, ranks: int = DEEPEP_RANKS) -> np.ndarray:
    """Expected distinct ranks among a token's ``topk`` experts (uniform, without repeats)."""
    e, k = np.asarray(num_experts, float), np.asarray(topk, float)
    miss = np.ones_like(e)
    for i in range(int(k.max(initial=0))):
        with np.errstate(divide="ignore", invalid="ignore"):
            term = np.nan_to_num(np.clip((e - e / ranks - i) / (e - i), 0.0, 1.0))
        miss = np.where(i < k, miss * term, miss)
    return ranks * (1.0 - miss)


def _deepep(per_rank: bool, elem_bytes: float) -> Callable[[Columns], Features]:
    def feats(cols: Columns) -> Features:
        t, h = _f(cols, "num_token"), _f(cols, "hidden_size")
        k, e = _f(cols, "num_topk"), _f(cols, "num_experts")
        copies = dest_ranks(e, k) * (DEEPEP_RANKS - 1) / DEEPEP_RANKS if per_rank else k
        z = np.zeros_like(t)
        coords = np.stack([_l2(t), _l2(h), _l2(k), _l2(e)], 1)
        return Features(
            flops=z,
            nbytes=t * copies * h * elem_bytes,
            work=t,
            fp8=np.zeros(len(t), bool),
            tokens=t,
            coords=coords,
        )

    return feats
