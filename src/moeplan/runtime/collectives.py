"""MoE collectives on ``torch.distributed``.

- :func:`dispatch` / :func:`combine_back`: EP all-to-all with split sizes (``all_to_all_single``);
  per-expert counts travel first so receivers know each row's expert.
- :func:`fused_ag_dispatch` (MixServe Alg. 2) and :func:`fused_rs_combine` (MixServe Alg. 1):
  hybrid TP-EP. Hidden states are replicated in the TP group, so each TP rank sends only its
  ``H/m`` slice to the same TP rank of the other EP nodes in pairwise ``isend``/``irecv`` rounds;
  every block that arrives is all-gathered (dispatch) or reduce-scattered (combine) in the TP
  group asynchronously while later rounds are in flight. Erratum: Alg. 1/2 compute the peer as
  ``(r_TP ± i·m) mod mn``; the peer must be ``(r ± i·m) mod mn`` (global rank), otherwise every
  node talks to node ``i``. We index peers inside the EP group: ``(e ± i) mod n``.
- :func:`token_plan`, :func:`shuffled_reduce_scatter`, :func:`shuffled_all_gather` (Sem-MoE
  §4.3 / Alg. 3): tokens are argsorted by destination device, grouped and padded to a common
  capacity, reduce-scattered so each device receives the reduced rows of *its* tokens, and
  all-gathered + un-shuffled after the MoE.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from moeplan.runtime.groups import RankGroups


@dataclass(frozen=True, kw_only=True, slots=True)
class Dispatched:
    """Rows received by an expert rank: ``rows [M, H]``, ``local_expert [M]``, split sizes."""

    rows: torch.Tensor
    local_expert: torch.Tensor
    send_splits: list[int]
    recv_splits: list[int]


def _expert_ids(recv_counts: torch.Tensor) -> torch.Tensor:
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
        rows=out, local_expert=_expert_ids(recv_counts), send_splits=send, recv_splits=recv
    )


def combine_back(y: torch.Tensor, d: Dispatched, group: Any) -> torch.Tensor:
    """Inverse of :func:`dispatch`: return expert outputs to the ranks that sent the rows."""
    out = y.new_empty(sum(d.send_splits), y.shape[1])
    dist.all_to_all_single(out, y.contiguous(), d.send_splits, d.recv_splits, group=group)
    return out


def _pairwise(
    blocks: list[torch.Tensor], recv_rows: list[int], width: int, g: RankGroups, tag: int
) -> tuple[list[tuple[int, Any, torch.Tensor]], list[Any]]:
    """Post rounds i=1..n-1: send ``blocks[(e+i)%n]`` to EP peer e+i, receive from e-i."""
    ep = g.ranks["moe_ep"]
    n, e = len(ep), g.local_rank("moe_ep")
    posted, sends = [], []
    for i in range(1, n):
        dst, src = (e + i) % n, (e - i) % n
        sends.append(dist.isend(blocks[dst].contiguous(), ep[dst], tag=tag + i))
        buf = blocks[0].new_empty(recv_rows[src], width)
        posted.append((src, dist.irecv(buf, ep[src], tag=tag + i), buf))
    return posted, sends


def _tp_all_gather(x: torch.Tensor, g: RankGroups) -> tuple[Any, list[torch.Tensor]]:
    parts = [torch.empty_like(x) for _ in range(g.size("moe_tp"))]
    return dist.all_gather(parts, x.contiguous(), group=g.handles["moe_tp"], async_op=True), parts


def fused_ag_dispatch(
    x_slice: torch.Tensor, dest_counts: torch.Tensor, g: RankGroups, tag: int = 0
) -> Dispatched:
    """MixServe Alg. 2. ``x_slice [N, H/m]``: this TP rank's hidden slice of the rows, sorted by
    destination EP node then expert; ``dest_counts [E]`` rows per expert. Returns full-width rows
    from every EP node (source-major), like :func:`dispatch`."""
    n, e = g.size("moe_ep"), g.local_rank("moe_ep")
    recv_counts = exchange_counts(dest_counts, n, g.handles["moe_ep"])
    send = dest_counts.view(n, -1).sum(dim=1).tolist()
    recv = recv_counts.sum(dim=1).tolist()
    blocks = list(torch.split(x_slice, send))
    posted, sends = _pairwise(blocks, recv, x_slice.shape[1], g, tag)
    gathered: dict[int, tuple[Any, list[torch.Tensor]]] = {e: _tp_all_gather(blocks[e], g)}
    for src, req, buf in posted:  # overlap: AG of block i runs while later rounds arrive
        req.wait()
        gathered[src] = _tp_all_gather(buf, g)
    full = []
    for src in range(n):
        work, parts = gathered[src]
        work.wait()
        full.append(torch.cat(parts, dim=1))
    for s in sends:
        s.wait()
    return Dispatched(
        rows=torch.cat(full),
        local_expert=_expert_ids(recv_counts),
        send_splits=send,
        recv_splits=recv,
    )


def _tp_reduce_scatter(x: torch.Tensor, g: RankGroups) -> tuple[Any, torch.Tensor]:
    m = g.size("moe_tp")
    parts = [p.contiguous() for p in x.chunk(m, dim=1)]
    out = torch.empty_like(parts[g.local_rank("moe_tp")])
    return dist.reduce_scatter(out, parts, group=g.handles["moe_tp"], async_op=True), out


def fused_rs_combine(
    partial: torch.Tensor, d: Dispatched, g: RankGroups, tag: int = 1000
) -> list[torch.Tensor]:
    """MixServe Alg. 1. ``partial [M, H]``: TP-partial expert outputs of the rows received in
    ``d`` (source-major). Returns, per destination EP node order, this TP rank's reduced hidden
    slice ``[rows sent to node b, H/m]`` of the outputs of the rows it dispatched."""
    n, e = g.size("moe_ep"), g.local_rank("moe_ep")
    blocks = list(torch.split(partial, d.recv_splits))
    posted, sends = _pairwise(blocks, d.send_splits, partial.shape[1], g, tag)
    reduced = {e: _tp_reduce_scatter(blocks[e], g)}
    for src, req, buf in posted:  # overlap: RS of block i runs while later rounds arrive
        req.wait()
        reduced[src] = _tp_reduce_scatter(buf, g)
    out = []
    for b in range(n):
        work, t = reduced[b]
        work.wait()
        out.append(t)
    for s in sends:
        s.wait()
    return out


@dataclass(frozen=True, kw_only=True, slots=True)
class ShufflePlan:
    """Sem-MoE token plan: ``order [n*cap]`` token index per padded slot (``-1`` = pad)."""

    order: torch.Tensor
    cap: int
    counts: torch.Tensor
    num_tokens: int


def token_plan(dest: torch.Tensor, n: int) -> ShufflePlan:
    """Group tokens by destination device ``dest [T]`` (argsort), pad groups to equal size."""
    counts = torch.bincount(dest, minlength=n)
    cap = max(int(counts.max()) if dest.numel() else 0, 1)
    idx = torch.argsort(dest, stable=True)
    start = torch.cumsum(counts, 0) - counts
    pos = torch.arange(dest.numel(), device=dest.device) - start[dest[idx]]
    order = torch.full((n * cap,), -1, dtype=torch.long, device=dest.device)
    order[dest[idx] * cap + pos] = idx
    return ShufflePlan(order=order, cap=cap, counts=counts, num_tokens=int(dest.numel()))


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
