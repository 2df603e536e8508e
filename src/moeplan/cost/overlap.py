"""Overlap of work on separate resources: one mechanism for every overlapped schedule.

A schedule is a list of *chains*; a chain is an ordered list of :class:`Piece` s, each a
number of seconds on one named resource (``"compute"``, ``"comm"``, ``"intra"``,
``"inter"``, ...). A piece starts when the previous piece of its chain has ended and its
resource is free; each resource runs one piece at a time. :func:`makespan` list-schedules the
pieces (non-delay: the piece that can start earliest goes next, ties to the lower chain index,
i.e. the order the engine issues them) and returns the finish time of the last piece.

Users of the mechanism:

- two-batch overlap (SGLang ``--enable-two-batch-overlap``, DeepSeek-V3 report §3.4, DeepSeek
  profile-data): the batch is split into two micro-batches, each a chain of
  ``compute`` (attention, experts) and ``comm`` (DeepEP dispatch / combine) pieces per layer,
  so one micro-batch's communication runs under the other's compute; the serving paths
  (:mod:`moeplan.serve.iteration.tbo`, :mod:`moeplan.serve.iteration.phase`) schedule the
  two in the engine's fixed issue order (:func:`alternating_makespan`, non-decreasing in
  every piece); :func:`two_batch` and :func:`layered_chain` build identical chains for the
  list schedule;
- MixServe's fused AR-A2A (Algorithms 1-2): chunk ``j``'s inter-node round on ``"inter"``
  followed by its intra-node collective on ``"intra"`` (:func:`fused_rounds`), which
  reproduces :func:`moeplan.planners.strategy.fused.critical_path`.

Every piece is scheduled (no extrapolation over repeated layers: a greedy two-chain schedule
can take tens of layers to become periodic); callers memoise per batch.

Pure: no I/O, no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from moeplan.errors import MoeplanError, require


class Piece(NamedTuple):
    """``seconds`` of work on ``resource`` (one piece of a chain)."""

    resource: str
    seconds: float


Chain = Sequence[Piece]


def makespan(chains: Sequence[Chain]) -> float:
    """Finish time of the non-delay list schedule of ``chains`` (module docstring)."""
    n = len(chains)
    idx = [0] * n
    ready = [0.0] * n
    free: dict[str, float] = {}
    left = sum(len(c) for c in chains)
    while left:
        best_start, best = float("inf"), -1
        for c in range(n):
            i = idx[c]
            if i < len(chains[c]):
                start = max(ready[c], free.get(chains[c][i].resource, 0.0))
                if start < best_start:
                    best_start, best = start, c
        piece = chains[best][idx[best]]
        if piece.seconds < 0.0:
            raise MoeplanError(f"piece.seconds ({piece.seconds!r}) must be >= 0")
        end = best_start + piece.seconds
        free[piece.resource] = end
        ready[best] = end
        idx[best] += 1
        left -= 1
    return max(ready, default=0.0)


#: pieces the first micro-batch runs ahead of the second in :func:`alternating_makespan`: one,
#: so that each of its communication pieces is issued beside the other's compute (SGLang
#: starts micro-batch A ``tbo_delta_stages`` stages ahead for the same reason: 2 of the five
#: stages of a DeepSeek decode layer, python/sglang/srt/batch_overlap/operations_strategy.py,
#: v0.5.x; a chain here has two or three pieces per stage of that split)
TBO_LEAD = 1


def alternating_makespan(chains: Sequence[Chain], lead: int = TBO_LEAD) -> float:
    """Finish time of two-batch overlap as the engine issues it: the micro-batches' pieces
    in a fixed order — the first chain's first ``lead`` pieces, then piece ``i + lead`` of the
    first chain and piece ``i`` of the others, for ``i = 0, 1, ...`` — each piece starting when
    its chain's previous piece has ended and the previous piece on its resource in that order
    has ended. SGLang runs the two micro-batches' layer operations stage by stage in this
    alternation (sgl-project/sglang v0.5.x, python/sglang/srt/batch_overlap/operations.py
    ``execute_overlapped_operations``: a stage of batch A, then one of batch B, A
    ``delta_stages`` ahead, each a run of kernels on the compute stream or DeepEP's
    communication). With a fixed order every finish time is a longest
    path, a max of sums of piece times, so the makespan is non-decreasing in every piece
    (a non-delay list schedule, :func:`makespan`, is not: lengthening one piece can change
    which chain takes a resource next and lengthen the whole by more than the piece).
    Chains of different lengths: a shorter chain's missing pieces take no time; a piece of
    zero seconds is not issued (a jump up when it becomes positive, never down)."""
    ready = [0.0] * len(chains)
    free: dict[str, float] = {}
    offsets = [lead if c == 0 else 0 for c in range(len(chains))]
    for i in range(-lead, max((len(c) for c in chains), default=0)):
        for c, chain in enumerate(chains):
            j = i + offsets[c]
            if not 0 <= j < len(chain):
                continue
            piece = chain[j]
            if piece.seconds < 0.0:
                raise MoeplanError(f"piece.seconds ({piece.seconds!r}) must be >= 0")
            if piece.seconds == 0.0:  # nothing issued: no wait for the resource
                continue
            end = max(ready[c], free.get(piece.resource, 0.0)) + piece.seconds
            free[piece.resource] = ready[c] = end
    return max(ready, default=0.0)


def layered_chain(steps: Sequence[tuple[str, float]]) -> list[Piece]:
    """One micro-batch's pieces of one layer, in order (zero-second steps dropped)."""
    return [Piece(r, s) for r, s in steps if s > 0.0]


def two_batch(
    prefix: Sequence[tuple[str, float]],
    layer: Sequence[tuple[str, float]],
    layers: int,
) -> float:
    """Two-batch overlap: two identical micro-batches, each running ``prefix`` then
    ``layers`` copies of ``layer`` (steps priced at the micro-batch's own size), scheduled
    on shared resources. Returns the seconds until both have finished."""
    chain = layered_chain(prefix) + layered_chain(layer) * layers
    return makespan([chain, chain])


def sequential(
    prefix: Sequence[tuple[str, float]], layer: Sequence[tuple[str, float]], layers: int
) -> float:
    """The same steps without overlap (one batch, every step after the other)."""
    return sum(s for _, s in prefix) + layers * sum(s for _, s in layer)


def fused_rounds(inter: Sequence[float], intra: Sequence[float]) -> float:
    """MixServe's fused AR-A2A pipeline: chunk 0 is local (``intra[0]`` only); chunk
    ``j >= 1`` waits for inter-node round ``j - 1`` and then runs ``intra[j]``."""
    require(
        len(intra) == len(inter) + 1,
        f"intra rounds ({len(intra)}) must be inter rounds ({len(inter)}) + 1",
    )
    chains: list[list[Piece]] = [[Piece("intra", intra[0])]]
    chains += [
        [Piece("inter", a), Piece("intra", b)] for a, b in zip(inter, intra[1:], strict=True)
    ]
    return makespan(chains)
