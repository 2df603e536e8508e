"""MoE collectives on ``torch.distributed``: EP all-to-all and unequal all-gathers.

- :func:`dispatch` / :func:`combine_back`: EP all-to-all with split sizes (``all_to_all_single``);
  per-expert counts travel first so receivers know each row's expert.
- :func:`gather_split` / :func:`gather_sizes`: all-gather of unequal parts (re-sharding between
  layouts, DP gathers).

MixServe's fused collectives are in :mod:`.fused`, Sem-MoE's shuffled ones in :mod:`.shuffle`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True, kw_only=True, slots=True)
class Dispatched:
    """Rows received by an expert rank: ``rows [M, H]``, ``local_expert [M]``, split sizes."""

    rows: torch.Tensor
    local_expert: torch.Tensor
    send_splits: list[int]
    recv_splits: list[int]


def expert_ids(recv_counts: torch.Tensor) -> torch.Tensor:
    """Local expert of each received row; ``recv_counts [sources, E_local]``, source-major."""
    e_local = recv_counts.shape[1]
    ids = torch.arange(e_local, device=recv_counts.device).repeat(recv_counts.shape[0])
    return torch.repeat_interleave(ids, recv_counts.reshape(-1))


def exchange_counts(counts: torch.Tensor, n: int, group: Any) -> torch.Tensor:
    """All-to-all of per-expert counts ``[E]`` -> ``[n, E/n]`` counts received from each peer."""
    recv = torch.empty_like(counts)
    dist.all_to_all_single(recv, counts.contiguous(), group=group)
    return recv.view(n, -1)


def dispatch(rows: torch.Tensor, counts: torch.Tensor, group: Any, n: int) -> Dispatched:
    """Send rows sorted by expert (``counts [E]``, experts contiguous per rank) to their ranks."""
    recv_counts = exchange_counts(counts, n, group)
    send = counts.view(n, -1).sum(dim=1).tolist()
    recv = recv_counts.sum(dim=1).tolist()
    out = rows.new_empty(sum(recv), rows.shape[1])
    dist.all_to_all_single(out, rows.contiguous(), recv, send, group=group)
    return Dispatched(
        rows=out, local_expert=expert_ids(recv_counts), send_splits=send, recv_splits=recv
    )


def combine_back(y: torch.Tensor, d: Dispatched, group: Any) -> torch.Tensor:
    """Inverse of :func:`dispatch`: return expert outputs to the ranks that sent the rows."""
    out = y.new_empty(sum(d.send_splits), y.shape[1])
    dist.all_to_all_single(out, y.contiguous(), d.send_splits, d.recv_splits, group=group)
    return out


def gather_split(part: torch.Tensor, sizes: list[int], group: Any) -> torch.Tensor:
    """All-gather unequal parts along dim 0 (padded to the largest) and concatenate them."""
    cap = max(sizes)
    padded = part.new_zeros(cap, *part.shape[1:])
    padded[: part.shape[0]] = part
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded, group=group)
    return torch.cat([p[:n] for p, n in zip(parts, sizes, strict=True)])


def gather_sizes(n: int, group: Any, size: int, device: torch.device | str = "cpu") -> list[int]:
    """Every member's ``n`` (e.g. its row count), in group order."""
    t = torch.tensor([n], dtype=torch.long, device=device)
    out = [torch.zeros_like(t) for _ in range(size)]
    dist.all_gather(out, t, group=group)
    return [int(v) for v in out]
