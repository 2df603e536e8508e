"""Collective communication times: ring/pairwise α-β formulas over a two-level hierarchy.

Message-size convention (nccl-tests): ``nbytes`` is the per-rank buffer — all_reduce: the
buffer reduced; all_gather: the *output* (n shards); reduce_scatter: the *input* (n shards);
all_to_all: the bytes one rank sends in total (including its own shard).

Formulas for a group of ``n`` ranks on one link level with latency ``a`` and per-direction
bandwidth ``B`` (bytes/s per GPU):

- ring all_reduce: ``2(n-1) a + 2 (n-1)/n * nbytes / B``
- ring all_gather / reduce_scatter: ``(n-1) a + (n-1)/n * nbytes / B``
- pairwise all_to_all: ``(n-1) a + (n-1)/n * nbytes / B``
- P2P: ``a + nbytes / B``

Groups spanning ``nodes > 1`` nodes (``g = n / nodes`` ranks per node) are hierarchical:
all_reduce = intra reduce_scatter + inter all_reduce of ``nbytes / g`` + intra all_gather;
all_gather / reduce_scatter = intra part on ``nbytes / nodes`` + inter part on ``nbytes / g``;
all_to_all sends ``(n-g)/n`` of its bytes over the network and ``(g-1)/n`` over the intra
link at the same time, so it takes the longer of the two plus both latencies.

When a :class:`HardwareProfile` has a measured fit for ``(op, n)`` inside one node, that fit
replaces the intra-node formula.
"""

from __future__ import annotations

from collections.abc import Callable

from moeplan.specs import ClusterSpec, LinkSpec

COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")

IntraFit = Callable[[str, int, float], float | None]


def ring_time(op: str, nbytes: float, n: int, link: LinkSpec) -> float:
    """One-level ring/pairwise formula (see module docstring)."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    frac = (n - 1) / n
    if op == "all_reduce":
        return 2 * (n - 1) * link.latency + 2 * frac * nbytes / link.bw
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) * link.latency + frac * nbytes / link.bw
    raise ValueError(f"unknown collective op {op!r}; expected one of {COLLECTIVE_OPS}")


def collective_time(op: str, nbytes: float, n: int, nodes: int, cluster: ClusterSpec,
                    intra_fit: IntraFit | None = None) -> float:
    """Seconds for collective ``op`` over ``n`` ranks spread over ``nodes`` nodes."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    nodes = max(1, min(nodes, n))

    def intra(o: str, b: float, m: int) -> float:
        if m <= 1 or b <= 0:
            return 0.0
        if intra_fit is not None:
            t = intra_fit(o, m, b)
            if t is not None:
                return t
        return ring_time(o, b, m, cluster.intra)

    if nodes == 1:
        return intra(op, nbytes, n)
    g = max(1, n // nodes)
    inter = cluster.inter
    if op == "all_reduce":
        return (intra("reduce_scatter", nbytes, g) + ring_time("all_reduce", nbytes / g, nodes, inter)
                + intra("all_gather", nbytes, g))
    if op in ("all_gather", "reduce_scatter"):
        return intra(op, nbytes / nodes, g) + ring_time(op, nbytes / g, nodes, inter)
    if op == "all_to_all":
        t_inter = (nodes - 1) * inter.latency + (n - g) / n * nbytes / inter.bw
        t_intra = intra("all_to_all", nbytes * g / n, g) if g > 1 else 0.0
        return max(t_inter, t_intra) + inter.latency
    raise ValueError(f"unknown collective op {op!r}; expected one of {COLLECTIVE_OPS}")
