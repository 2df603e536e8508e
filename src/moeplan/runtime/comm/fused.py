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

from typing import Any

import torch
import torch.distributed as dist

from moeplan.runtime.comm.collectives import Dispatched, exchange_counts, expert_ids
from moeplan.runtime.comm.groups import RankGroups


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
