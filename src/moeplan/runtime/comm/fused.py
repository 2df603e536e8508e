"""MixServe's fused collectives for hybrid TP-EP (§III-D, Algorithms 1 and 2).

Hidden states are replicated in the TP group, so each TP rank sends only its ``H/m`` slice to
the same TP rank of the other EP nodes in pairwise ``isend``/``irecv`` rounds; every block that
arrives is all-gathered (:func:`fused_ag_dispatch`) or reduce-scattered
(:func:`fused_rs_combine`) in the TP group asynchronously while later rounds are in flight.
Erratum: Alg. 1/2 compute the peer as ``(r_TP ± i·m) mod mn``; the peer must be
``(r ± i·m) mod mn`` (global rank), otherwise every node talks to node ``i``. We index peers
inside the EP group: ``(e ± i) mod n``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from moeplan.runtime.comm.collectives import Dispatched, exchange_counts, expert_ids
from moeplan.runtime.comm.groups import RankGroups

T = TypeVar("T")


def _exchange(
    blocks: list[torch.Tensor],
    recv_rows: list[int],
    g: RankGroups,
    tag: int,
    tp_op: Callable[[torch.Tensor, RankGroups], tuple[Any, T]],
) -> list[T]:
    """Pairwise EP rounds i=1..n-1 (send ``blocks[(e+i)%n]`` to EP peer e+i, receive
    ``recv_rows[e-i]`` rows from e-i), all posted at once; ``tp_op`` (an async TP collective)
    starts on this rank's own block at once and on every block as it arrives, so it overlaps
    the later rounds. Returns ``tp_op``'s results in EP source order, all completed."""
    ep = g.ranks["moe_ep"]
    n, e = len(ep), g.local_rank("moe_ep")
    posted: list[tuple[int, Any, torch.Tensor]] = []
    sends: list[Any] = []
    for i in range(1, n):
        dst, src = (e + i) % n, (e - i) % n
        sends.append(dist.isend(blocks[dst].contiguous(), ep[dst], tag=tag + i))
        buf = blocks[0].new_empty(recv_rows[src], blocks[0].shape[1])
        posted.append((src, dist.irecv(buf, ep[src], tag=tag + i), buf))
    started = {e: tp_op(blocks[e], g)}
    for src, req, buf in posted:
        req.wait()
        started[src] = tp_op(buf, g)
    out = []
    for src in range(n):
        work, value = started[src]
        work.wait()
        out.append(value)
    for req in sends:
        req.wait()
    return out


def _tp_all_gather(x: torch.Tensor, g: RankGroups) -> tuple[Any, list[torch.Tensor]]:
    parts = [torch.empty_like(x) for _ in range(g.size("moe_tp"))]
    return dist.all_gather(parts, x.contiguous(), group=g.handles["moe_tp"], async_op=True), parts


def fused_ag_dispatch(
    x_slice: torch.Tensor, dest_counts: torch.Tensor, g: RankGroups, tag: int = 0
) -> Dispatched:
    """MixServe Alg. 2. ``x_slice [N, H/m]``: this TP rank's hidden slice of the rows, sorted by
    destination EP node then expert; ``dest_counts [E]`` rows per expert. Returns full-width rows
    from every EP node (source-major), like :func:`dispatch`."""
    n = g.size("moe_ep")
    recv_counts = exchange_counts(dest_counts, n, g.handles["moe_ep"])
    send = dest_counts.view(n, -1).sum(dim=1).tolist()
    recv = recv_counts.sum(dim=1).tolist()
    blocks = list(torch.split(x_slice, send))
    full = [torch.cat(parts, dim=1) for parts in _exchange(blocks, recv, g, tag, _tp_all_gather)]
    return Dispatched(
        rows=torch.cat(full),
        local_expert=expert_ids(recv_counts),
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
    blocks = list(torch.split(partial, d.recv_splits))
    return _exchange(blocks, d.send_splits, g, tag, _tp_reduce_scatter)
