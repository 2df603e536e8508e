"""Sem-MoE token-shuffle plan (§4.3, Alg. 3): argsort tokens by device, group, pad.

Same result as :func:`moeplan.runtime.collectives.token_plan` (a :class:`ShufflePlan` whose
``order [n * cap]`` lists each device's tokens in original order, ``-1`` padding), computed with
:func:`~moeplan.kernels.positions.stable_positions` — the Triton two-pass counting sort on
CUDA (no full sort, no atomics), one stable argsort without ``nonzero`` elsewhere.
"""

from __future__ import annotations

import torch

from moeplan.kernels.positions import stable_positions
from moeplan.runtime.collectives import ShufflePlan


def token_plan(dest: torch.Tensor, n: int) -> ShufflePlan:
    """Group tokens by destination device ``dest [T]`` (values in ``[0, n)``), pad to ``cap``."""
    pos, counts = stable_positions(dest, n)
    cap = max(int(counts.max()) if dest.numel() else 0, 1)
    start = torch.cumsum(counts, 0) - counts
    slot = dest.long() * cap + (pos - start[dest.long()])
    order = torch.full((n * cap,), -1, dtype=torch.long, device=dest.device)
    order[slot] = torch.arange(dest.numel(), device=dest.device)
    return ShufflePlan(order=order, cap=cap, counts=counts, num_tokens=int(dest.numel()))
