"""Sem-MoE's shuffled reduce-scatter / all-gather for attention TP + MoE EP (§4.3, Alg. 3).

After TP attention every rank holds a partial sum of all tokens. A *token plan* (one
destination device per token) groups the tokens by device and pads the groups to a common
capacity; :func:`shuffled_reduce_scatter` then reduces and scatters so each device receives the
reduced rows of *its* tokens, and :func:`shuffled_all_gather` gathers and un-shuffles after the
MoE. The plan itself is the planner's pure numpy :func:`moeplan.planners.placement.sched.
token_plan` (one implementation for planner and runtime); :func:`shuffle_plan` only carries it
to torch. Departure: the capacity is at least 1 (an empty batch still reduce-scatters one padded
row per device, as collectives need equal non-empty splits).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from moeplan.planners.placement.sched import token_plan


@dataclass(frozen=True, kw_only=True, slots=True)
class ShufflePlan:
    """Token plan on the device: ``order [n*cap]`` token index per padded slot (``-1`` = pad),
    ``counts [n]`` tokens per device, ``cap`` slots per device, ``num_tokens``."""

    order: torch.Tensor
    cap: int
    counts: torch.Tensor
    num_tokens: int


def shuffle_plan(dest: torch.Tensor, n: int) -> ShufflePlan:
    """Group tokens by destination device ``dest [T]`` (values in ``[0, n)``), pad to ``cap``."""
    plan = token_plan(dest.detach().cpu().numpy().astype(np.int64), n)
    cap = max(plan.width, 1)
    order = plan.padded if plan.width else np.full(n * cap, -1, dtype=np.int64)
    return ShufflePlan(
        order=torch.from_numpy(order).to(dest.device),
        cap=cap,
        counts=torch.from_numpy(plan.counts.astype(np.int64)).to(dest.device),
        num_tokens=int(dest.numel()),
    )


def shuffled_reduce_scatter(
    partial: torch.Tensor, plan: ShufflePlan, group: Any, rank: int
) -> torch.Tensor:
    """Sum ``partial [T, H]`` over the group; rank d receives its ``counts[d]`` tokens' rows."""
    valid = plan.order >= 0
    padded = partial.new_zeros(plan.order.numel(), partial.shape[1])
    padded[valid] = partial[plan.order[valid]]
    out = partial.new_empty(plan.cap, partial.shape[1])
    dist.reduce_scatter(out, [c.contiguous() for c in padded.split(plan.cap)], group=group)
    return out[: int(plan.counts[rank])]


def shuffled_all_gather(y: torch.Tensor, plan: ShufflePlan, group: Any) -> torch.Tensor:
    """Gather every device's rows ``y [counts[d], H]`` and restore the original token order."""
    n = plan.counts.numel()
    padded = y.new_zeros(plan.cap, y.shape[1])
    padded[: y.shape[0]] = y
    parts = [torch.empty_like(padded) for _ in range(n)]
    dist.all_gather(parts, padded, group=group)
    flat = torch.cat(parts)
    valid = plan.order >= 0
    out = y.new_empty(plan.num_tokens, y.shape[1])
    out[plan.order[valid]] = flat[valid]
    return out
