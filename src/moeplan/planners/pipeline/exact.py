"""Byte-level SMIDT search: exact multiple-choice knapsacks by (time, bytes) Pareto fronts.

The unit search (:mod:`.search`) rounds each choice's extra memory up to units of ``M/R``
bytes, so even at the finest resolution a memory-bound optimum can be missed when a stage's
slack is below one unit per module. :class:`ByteWindows` answers the same questions as
:class:`.search.WindowKnapsack` (``best``, ``choose``, ``n``, ``prefix_t``) with no rounding:
a window's table is the Pareto front of ``(bytes, time)`` over every combination of its
modules' choices, grown one module at a time from each window start (cached per start), with
points above ``capacity`` bytes or above ``cut`` seconds dropped. The front of ``k`` modules
holds at most as many points as there are distinct byte sums, and pruning by the known
feasible bottleneck ``cut`` keeps it small in practice; a front past ``max_points`` stops the
search (:class:`FrontTooLarge`) and the caller reports the plan as uncertified with its gap
bound instead.

:func:`byte_exact_search` runs Algorithm 1's bisection with FEASIBLE (:func:`.search.feasible`)
over these exact windows between a proven lower bound and a plan already feasible in bytes;
the result is within ``eps`` (relative) of the byte-level optimum, and the final bracket is
the certificate.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from moeplan.planners.pipeline.search import INF, Partition, _result, _split_to, feasible

MAX_POINTS = 200_000  # work bound per front (points x choices per growth): ~10 MB of arrays


class FrontTooLarge(Exception):  # noqa: N818 - a stop signal for the caller, not a user error
    """A window's Pareto front grew past the work bound."""


class ByteWindows:
    """Exact per-window multiple-choice knapsacks in bytes (see module docstring)."""

    def __init__(
        self,
        times: Sequence[np.ndarray],
        mems: Sequence[np.ndarray],
        capacity: float,
        cut: float,
        max_points: int = MAX_POINTS,
    ) -> None:
        self.n = len(times)
        self.times = [np.asarray(t, dtype=np.float64) for t in times]
        self.mems = [np.asarray(m, dtype=np.float64) for m in mems]
        self.capacity, self.cut, self.max_points = float(capacity), float(cut), max_points
        tmin = np.array([float(t.min()) for t in self.times])
        self.prefix_t = np.concatenate([[0.0], np.cumsum(tmin)])
        # per start: one (bytes, time, parent, pick) step per module added
        self._steps: dict[int, list[tuple[np.ndarray, ...]]] = {}

    def _grow(self, prev: tuple[np.ndarray, ...] | None, m: int) -> tuple[np.ndarray, ...]:
        pb, pt = (np.zeros(1), np.zeros(1)) if prev is None else (prev[0], prev[1])
        k = len(self.times[m])
        b = (pb[:, None] + self.mems[m][None, :]).ravel()
        t = (pt[:, None] + self.times[m][None, :]).ravel()
        parent = np.repeat(np.arange(len(pb)), k)
        pick = np.tile(np.arange(k), len(pb))
        ok = (b <= self.capacity) & (t <= self.cut)
        b, t, parent, pick = b[ok], t[ok], parent[ok], pick[ok]
        order = np.lexsort((t, b))
        b, t, parent, pick = b[order], t[order], parent[order], pick[order]
        keep = np.ones(len(t), dtype=bool)
        if len(t) > 1:  # fewest bytes first: keep a point only if strictly faster than all before
            keep[1:] = t[1:] < np.minimum.accumulate(t)[:-1]
        if int(keep.sum()) > self.max_points:
            raise FrontTooLarge(f"front of {int(keep.sum())} points at module {m}")
        return b[keep], t[keep], parent[keep], pick[keep]

    def _front(self, left: int, right: int) -> list[tuple[np.ndarray, ...]]:
        steps = self._steps.setdefault(left, [])
        while len(steps) < right - left:
            prev = steps[-1] if steps else None
            if prev is not None and len(prev[0]) == 0:
                steps.append(prev)  # nothing fits: stays empty
            else:
                steps.append(self._grow(prev, left + len(steps)))
        return steps[: right - left]

    def best(self, left: int, right: int) -> float:
        """Least duration of ``[left, right)`` within ``capacity`` bytes (inf above ``cut``)."""
        t = self._front(left, right)[-1][1]
        return float(t[-1]) if len(t) else INF

    def choose(self, left: int, right: int) -> list[int]:
        """The choices of the fastest point of the window's front (backtracked)."""
        steps = self._front(left, right)
        idx, picks = len(steps[-1][0]) - 1, []
        for step in reversed(steps):
            picks.append(int(step[3][idx]))
            idx = int(step[2][idx])
        return picks[::-1]


def byte_exact_search(
    times: Sequence[np.ndarray],
    mems: Sequence[np.ndarray],
    capacity: float,
    stages: int,
    *,
    eps: float,
    lower: float,
    upper: Partition | None,
    max_points: int | None = None,
) -> tuple[Partition | None, float]:
    """Bisect the bottleneck between ``lower`` (proven: no plan is faster) and ``upper`` (a
    plan feasible in bytes, or None: then FEASIBLE without a limit finds the first one) with
    exact byte-level windows; returns the best plan found (None: nothing fits in bytes) and
    the proven lower bound. Raises :class:`FrontTooLarge` past the work bound."""
    cut = INF if upper is None else upper.bottleneck * (1 + 1e-9)
    ks = ByteWindows(times, mems, capacity, cut, MAX_POINTS if max_points is None else max_points)
    best = None
    if upper is None:
        best, _ = feasible(ks, INF, stages)  # type: ignore[arg-type]  # duck-typed windows
        if best is None:
            return None, INF
        hi = max(ks.best(a, b) for a, b in itertools.pairwise(best))
    else:
        hi = upper.bottleneck
    lo = lower
    while hi - lo > eps * hi:
        mid = 0.5 * (lo + hi)
        got, nxt = feasible(ks, mid, stages)  # type: ignore[arg-type]  # duck-typed windows
        if got is None:
            lo = max(mid, min(nxt, hi))
        else:
            best = got
            hi = max(ks.best(a, b) for a, b in itertools.pairwise(got))
    if best is None:
        return upper, lo
    return _result(ks, _split_to(ks, best, stages)), lo  # type: ignore[arg-type]
