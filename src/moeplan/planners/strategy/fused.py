"""Fused AR-A2A communication (MixServe §III-D, Algorithms 1-2) as an overlapped schedule.

Both algorithms are the same two-resource pipeline on one rank of an ``n``-node, ``m``-GPU
per node layout (MoE TP = m intra-node, EP = n inter-node):

- the inter-node link carries ``n-1`` pairwise rounds (Dispatch or Combine), one peer node
  per round, each a chunk of ``a`` bytes (the rank's 1/m hidden slice of the tokens that go
  to / come from that node);
- the intra-node link carries ``n`` TP collectives, one per chunk (AG for Alg. 2, RS plus
  the top-k weighting for Alg. 1). Chunk 1 is the local one and needs no inter round;
  chunk ``i+1`` can start only after inter round ``i`` has arrived.

Every step is priced by the cost model (:class:`~moeplan.planners.strategy.comm.Collectives`):
an inter round is one ``p2p`` of ``a`` bytes between nodes, an intra step the ``all_gather`` /
``reduce_scatter`` of the TP group inside one node (:meth:`FusedLayer.priced`). This module
owns only the schedule. The *modelled* time is the critical path of that pipeline in closed
form: ``end = max_j (arrival_j + sum_{i>=j} intra_i)``; with equal rounds it is
``max(n*t_intra, (n-1)*t_inter + t_intra)``. RS-Combine then ends with one AG of the rank's
output (Alg. 1 line 19). :func:`simulate_rounds` replays the same schedule round by round with
an event queue, as the independent check the tests compare against. The *sequential*
RS -> A2A -> AG alternative moves the same bytes with no overlap: one TP collective of all
``n`` chunks and one ``all_to_all`` of ``n`` chunks over the EP group (one rank per node).

Departures: Alg. 1's pseudo-code sends the same slice to every peer; we price each round as
the 1/n share of the combine volume (what Fig. 8/9 and the O(n) analysis assume). The top-k
weighting compute of Alg. 1 is an optional per-chunk term (0 by default).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from moeplan.errors import require
from moeplan.planners.strategy.comm import Collectives


@dataclass(frozen=True, kw_only=True, slots=True)
class FusedTime:
    """Seconds of one fused collective and of its sequential RS/AG + A2A equivalent."""

    fused: float
    sequential: float
    inter_rounds: int
    intra_rounds: int

    @property
    def saving(self) -> float:
        return self.sequential - self.fused


def critical_path(inter: Sequence[float], intra: Sequence[float]) -> float:
    """Closed-form finish time: ``len(intra) == len(inter) + 1``; chunk 0 is local."""
    require(
        len(intra) == len(inter) + 1,
        f"intra rounds ({len(intra)}) must be inter rounds ({len(inter)}) + 1",
    )
    arrival = [0.0]
    for t in inter:
        arrival.append(arrival[-1] + t)
    best, tail = 0.0, 0.0
    for j in range(len(intra) - 1, -1, -1):
        tail += intra[j]
        best = max(best, arrival[j] + tail)
    return best


def uniform_overlap(n: int, t_inter: float, t_intra: float) -> float:
    """Closed form for equal rounds: ``max(n*t_intra, (n-1)*t_inter + t_intra)``."""
    return max(n * t_intra, (n - 1) * t_inter + t_intra)


def simulate_rounds(inter: Sequence[float], intra: Sequence[float]) -> float:
    """Round-by-round event simulation of the pipeline (independent of the closed form).

    Two resources (inter link, intra link) each run one round at a time in issue order;
    intra round ``j`` (j >= 1) becomes ready when inter round ``j`` completes.
    """
    events: list[tuple[float, int, str, int]] = []
    seq = 0
    ready = [False] * len(intra)
    ready[0] = True
    inter_next, intra_next, intra_busy, finish = 0, 0, False, 0.0

    def push(t: float, kind: str, idx: int) -> None:
        nonlocal seq
        heapq.heappush(events, (t, seq, kind, idx))
        seq += 1

    if inter:
        push(inter[0], "inter_done", 0)
        inter_next = 1
    now = 0.0
    while True:
        if not intra_busy and intra_next < len(intra) and ready[intra_next]:
            push(now + intra[intra_next], "intra_done", intra_next)
            intra_busy, intra_next = True, intra_next + 1
        if not events:
            break
        now, _, kind, idx = heapq.heappop(events)
        if kind == "inter_done":
            ready[idx + 1] = True
            if inter_next < len(inter):
                push(now + inter[inter_next], "inter_done", inter_next)
                inter_next += 1
        else:
            intra_busy, finish = False, now
    require(intra_next == len(intra), "simulate_rounds: schedule did not complete")
    return finish


@dataclass(frozen=True, kw_only=True, slots=True)
class FusedLayer:
    """One MoE layer's fused communication on one rank: its shape and the seconds of each
    step (``t_*``, from the cost model via :meth:`priced`; see module docstring)."""

    nodes: int
    tp: int
    chunk_bytes: float
    output_bytes: float
    t_inter: float  # one pairwise round: a chunk to one peer node
    t_ag: float  # TP all-gather of one chunk's tp slices
    t_rs: float  # TP reduce-scatter of one chunk
    t_ag_all: float  # sequential path: TP all-gather of all n chunks
    t_rs_all: float  # sequential path: TP reduce-scatter of all n chunks
    t_a2a: float  # sequential path: all-to-all of n chunks over the EP group
    t_ag_out: float  # Alg. 1 line 19: all-gather of the rank's output

    def __post_init__(self) -> None:
        require(
            self.nodes >= 1 and self.tp >= 1,
            f"fused layer (nodes {self.nodes}, tp {self.tp}) must be >= 1",
        )

    @classmethod
    def priced(
        cls, *, nodes: int, tp: int, chunk_bytes: float, output_bytes: float, coll: Collectives
    ) -> FusedLayer:
        """Price every step with ``coll``: TP groups are one node (contiguous ranks), the EP
        group has one rank per node (stride ``tp``)."""
        a, whole = chunk_bytes * tp, chunk_bytes * tp * nodes
        return cls(
            nodes=nodes,
            tp=tp,
            chunk_bytes=chunk_bytes,
            output_bytes=output_bytes,
            t_inter=coll.p2p(chunk_bytes, True) if nodes > 1 else 0.0,
            t_ag=coll.all_gather(a, tp),
            t_rs=coll.reduce_scatter(a, tp),
            t_ag_all=coll.all_gather(whole, tp),
            t_rs_all=coll.reduce_scatter(whole, tp),
            t_a2a=coll.all_to_all(chunk_bytes * nodes, nodes, tp),
            t_ag_out=coll.all_gather(output_bytes, tp),
        )

    def times(self) -> tuple[FusedTime, FusedTime]:
        """(AG-Dispatch, RS-Combine) closed-form times."""
        return ag_dispatch(self), rs_combine(self)


def ag_dispatch(layer: FusedLayer) -> FusedTime:
    """Alg. 2: ``nodes-1`` inter Dispatch rounds overlapped with ``nodes`` intra AGs."""
    n = layer.nodes
    fused = uniform_overlap(n, layer.t_inter, layer.t_ag)
    return FusedTime(
        fused=fused, sequential=layer.t_a2a + layer.t_ag_all, inter_rounds=n - 1, intra_rounds=n
    )


def rs_combine(layer: FusedLayer, weighting_s: float = 0.0) -> FusedTime:
    """Alg. 1: ``nodes-1`` inter Combine rounds overlapped with ``nodes`` intra RS (+ top-k
    weighting), then one intra AG of the rank's output (full hidden, its DP tokens)."""
    n = layer.nodes
    fused = uniform_overlap(n, layer.t_inter, layer.t_rs + weighting_s) + layer.t_ag_out
    seq = layer.t_rs_all + n * weighting_s + layer.t_a2a + layer.t_ag_out
    return FusedTime(fused=fused, sequential=seq, inter_rounds=n - 1, intra_rounds=n)


def round_times(layer: FusedLayer, kind: str) -> tuple[list[float], list[float]]:
    """Per-round (inter, intra) durations of Alg. 1 (``kind='rs'``) or Alg. 2 (``'ag'``),
    for replaying with :func:`simulate_rounds` or ``moeplan.sim``."""
    require(kind in ("rs", "ag"), f"kind ({kind}) must be 'rs' or 'ag'")
    t_i = layer.t_rs if kind == "rs" else layer.t_ag
    return [layer.t_inter] * (layer.nodes - 1), [t_i] * layer.nodes


def layer_schedules(layer: FusedLayer) -> dict:
    """AG-Dispatch then RS-Combine of one layer replayed on ``moeplan.sim``: ``{"fused":
    Schedule, "sequential": Schedule}`` on two resources (intra link, inter link)."""
    from moeplan.sim import TaskGraph, simulate

    fused = TaskGraph()
    last = _pipeline(fused, "dispatch", "ag", *round_times(layer, "ag"), [])
    last = _pipeline(fused, "combine", "rs", *round_times(layer, "rs"), last)
    fused.add("ag_out", "intra link", layer.t_ag_out, last, kind="ag")
    seq = TaskGraph()
    chain: list[int] = []
    steps = [
        ("dispatch", "inter link", layer.t_a2a),
        ("ag", "intra link", layer.t_ag_all),
        ("rs", "intra link", layer.t_rs_all),
        ("combine", "inter link", layer.t_a2a),
        ("ag_out", "intra link", layer.t_ag_out),
    ]
    for name, res, dur in steps:
        chain = [seq.add(name, res, dur, chain, kind=name.split("_")[0])]
    return {"fused": simulate(fused).check(), "sequential": simulate(seq).check()}


def _pipeline(
    g,
    inter_name: str,
    intra_name: str,
    inter: Sequence[float],
    intra: Sequence[float],
    after: list[int],
) -> list[int]:
    """Add one fused algorithm's rounds after tasks ``after``; returns its last intra task.

    Tasks on one resource run in insertion order (``moeplan.sim.simulate``), so only the
    cross-resource edge (intra chunk j waits for inter round j) is explicit.
    """
    arrivals = [
        g.add(f"{inter_name}{i + 1}", "inter link", t, after, kind=inter_name)
        for i, t in enumerate(inter)
    ]
    last = after
    for j, t in enumerate(intra):
        deps = after + ([arrivals[j - 1]] if j else [])
        last = [g.add(f"{intra_name}{j}", "intra link", t, deps, kind=intra_name)]
    return last
