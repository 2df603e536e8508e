"""SMIDT's partition search over module cost tables (paper 001, §4.2, Eq. 1, Algorithms 1–2).

Input: for each of the ``n = 2N`` modules, the parallel choices that fit ``t·e·d = r`` with their
duration (s) and per-GPU memory (bytes). Output: stage boundaries ``0 = b_0 < … < b_S = n`` and
one choice per module minimising the bottleneck stage duration (Eq. 1) subject to per-GPU memory
``<= M`` in every stage.

* :func:`search_partition` — Algorithm 1 (binary search on the bottleneck) around Algorithm 2
  (FEASIBLE: greedy sliding window, each window's best duration from a multiple-choice knapsack).
* :func:`exhaustive_partition` — every boundary set, each stage by exact Pareto enumeration of
  all choice combinations: the oracle for small instances.
* :func:`naive_dp_partition` — the O(n²)-knapsack dynamic program the paper contrasts with
  (every window, then a min-max partition DP); exact, used as the benchmark reference.

Memory discretization (:func:`discretize`): with ``u = M/R`` bytes per unit, each module's
cheapest choice is its *base* ``b`` (kept exact, as a float number of units) and a choice of
``m`` bytes weighs ``ceil((m - b)/u)`` extra units; a window fits when its extra units are at
most ``floor(R - Σ base)``. So a selection that fits in units fits in bytes (conservative: never
over-commits memory), and only modules that pick a larger-than-minimal choice lose (under one
unit each) to rounding. All three solvers take the *same* units and bases, so the search is
checked on the very problem it solves; its result is within ``eps`` of that optimum.

Departures / additions: the paper starts ``d_lo = 0``; we start at the lower bound
``max(max_m min t, Σ min t / S)`` and set ``d_hi`` to the bottleneck actually found, which only
shortens the search. FEASIBLE may use fewer than ``S`` stages; the plan is then split (sub-windows
never cost more) so that exactly ``S`` stages are returned. Knapsack tables are cached per window
start, so windows are reused across binary-search iterations as well as within one window growth.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from moeplan.errors import require

INF = float("inf")


@dataclass(frozen=True, kw_only=True, slots=True)
class Partition:
    """A solved partition: boundaries, one choice index per module, stage durations."""

    bounds: tuple[int, ...]
    choice: tuple[int, ...]
    stage_times: tuple[float, ...]
    bottleneck: float
    feasible_calls: int = 0

    def __post_init__(self) -> None:
        require(
            self.bounds[0] == 0 and all(a < b for a, b in itertools.pairwise(self.bounds)),
            f"partition.bounds ({self.bounds}) must start at 0 and increase",
        )
        require(len(self.choice) == self.bounds[-1], "partition.choice must cover every module")


def discretize(
    mems: Sequence[np.ndarray], capacity: float, resolution: int = 512, rounding: str = "up"
) -> tuple[tuple[np.ndarray, ...], np.ndarray, int]:
    """Memory bytes → (extra units per choice, base units per module, capacity units).

    ``rounding='up'`` (the search's problem) never over-commits memory; ``'down'`` is a
    relaxation — every selection that fits in bytes fits in its units — whose optimum is a
    lower bound on the exact one (:mod:`.refine` uses the pair to certify a resolution).
    """
    require(capacity > 0, f"memory capacity ({capacity}) must be positive")
    require(resolution >= 1, f"resolution ({resolution}) must be >= 1")
    require(rounding in ("up", "down"), f"rounding ({rounding!r}) must be 'up' or 'down'")
    scale = resolution / float(capacity)
    arrs = [np.asarray(m, dtype=np.float64) * scale for m in mems]
    base = np.array([a.min() for a in arrs])
    if rounding == "down":
        extra = tuple(
            np.floor((a - b) * (1 - 1e-12)).astype(np.int64)
            for a, b in zip(arrs, base, strict=True)
        )
        return extra, base * (1 - 1e-12), int(resolution)
    extra = tuple(
        np.ceil((a - b) * (1 + 1e-12)).astype(np.int64) for a, b in zip(arrs, base, strict=True)
    )
    return extra, base * (1 + 1e-12), int(resolution)


def _pareto_all(times: list[np.ndarray], units: list[np.ndarray]) -> list[np.ndarray]:
    """Indices of each module's non-dominated choices (fewest units for a time), in units
    order; vectorised over modules with equally many choices."""
    out: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * len(times)
    groups: dict[int, list[int]] = {}
    for m, t in enumerate(times):
        groups.setdefault(len(t), []).append(m)
    for ms in groups.values():
        tt = np.stack([times[m] for m in ms])
        order = np.lexsort((tt, np.stack([units[m] for m in ms])), axis=1)
        ts = np.take_along_axis(tt, order, axis=1)
        keep = np.ones(ts.shape, dtype=bool)
        keep[:, 1:] = ts[:, 1:] < np.minimum.accumulate(ts, axis=1)[:, :-1]
        for row, m in enumerate(ms):
            out[m] = order[row][keep[row]]
    return out


def _prefix_base(base: Sequence[float] | np.ndarray | None, n: int) -> np.ndarray:
    arr = np.zeros(n) if base is None else np.asarray(base, dtype=np.float64)
    return np.concatenate([[0.0], np.cumsum(arr)])


def _room(capacity: int, prefix_b: np.ndarray, left: int, right: int) -> int:
    return math.floor(capacity - (prefix_b[right] - prefix_b[left]))


class WindowKnapsack:
    """Multiple-choice knapsack over windows ``[left, right)``, cached per ``left``.

    ``table(left, right)[c]`` is the least total duration of modules ``left..right-1`` with
    at most ``c`` memory units; a window grows by one module in ``O(capacity · choices)``.
    """

    def __init__(
        self,
        times: Sequence[np.ndarray],
        units: Sequence[np.ndarray],
        capacity: int,
        base: Sequence[float] | np.ndarray | None = None,
    ) -> None:
        require(len(times) == len(units) and len(times) >= 1, "times/units: one per module")
        self.n, self.capacity = len(times), int(capacity)
        self.limit_units = self.capacity  # may be lowered (<= capacity) to level memory
        self.times = [np.asarray(t, dtype=np.float64) for t in times]
        self.units = [np.asarray(u, dtype=np.int64) for u in units]
        self.keep = _pareto_all(self.times, self.units)
        # per module: the Pareto choices as python (units, time) pairs, fewest units first
        self.pairs = [
            list(zip(u[k].tolist(), t[k].tolist(), strict=True))
            for t, u, k in zip(self.times, self.units, self.keep, strict=True)
        ]
        tmin = np.array([min(p[1] for p in pairs) for pairs in self.pairs])
        umin = np.array([pairs[0][0] for pairs in self.pairs])
        self.prefix_t = np.concatenate([[0.0], np.cumsum(tmin)])
        self.prefix_u = np.concatenate([[0], np.cumsum(umin)])
        self.prefix_b = _prefix_base(base, self.n)
        fast = [int(k[np.argmin(t[k])]) for t, k in zip(self.times, self.keep, strict=True)]
        self.fast_u = np.concatenate(
            [[0], np.cumsum([u[i] for u, i in zip(self.units, fast, strict=True)])]
        )
        self._cache: dict[int, list[np.ndarray]] = {}
        self._suffix: list[np.ndarray] = [np.zeros(self.capacity + 1)]  # [n-j, n) at index j
        self.grown = 0

    def table(self, left: int, right: int) -> np.ndarray:
        if right == self.n:  # windows ending at the last module share one right-anchored chain
            return self.suffix(left)
        rows = self._cache.setdefault(left, [])
        while len(rows) < right - left:
            prev = rows[-1] if rows else np.zeros(self.capacity + 1)
            rows.append(self._add(prev, left + len(rows)))
        return rows[right - left - 1]

    def suffix(self, left: int) -> np.ndarray:
        """Knapsack table of ``[left, n)``, grown from the right end (shared by all lefts)."""
        while len(self._suffix) <= self.n - left:
            self._suffix.append(self._add(self._suffix[-1], self.n - len(self._suffix)))
        return self._suffix[self.n - left]

    def _add(self, prev: np.ndarray, m: int) -> np.ndarray:
        self.grown += 1
        size = self.capacity + 1
        (w0, t0), *rest = self.pairs[m]
        out = np.empty(size)
        out[:w0] = INF
        if w0 < size:
            np.add(prev[: size - w0], t0, out=out[w0:])
        for w, t in rest:
            if w < size:
                np.minimum(out[w:], prev[: size - w] + t, out=out[w:])
        return out

    def room(self, left: int, right: int) -> int:
        """Units left for the window's extra units once its bases are paid (< 0: none)."""
        return _room(self.limit_units, self.prefix_b, left, right)

    def best(self, left: int, right: int) -> float:
        """Least duration of window ``[left, right)`` within memory (inf if none fits)."""
        room = self.room(left, right)
        if self.prefix_u[right] - self.prefix_u[left] > room:
            return INF
        if self.fast_u[right] - self.fast_u[left] <= room:
            return float(self.prefix_t[right] - self.prefix_t[left])
        return float(self.table(left, right)[room])

    def lower(self, left: int, right: int) -> float:
        """Memory-free lower bound on the window's duration."""
        return float(self.prefix_t[right] - self.prefix_t[left])

    def choose(self, left: int, right: int) -> list[int]:
        """Choices achieving :meth:`best` for the window (backtracking the cached tables)."""
        cap, picks = self.room(left, right), []
        if self.fast_u[right] - self.fast_u[left] <= cap:
            return [
                int(k[np.argmin(t[k])])
                for t, k in zip(self.times[left:right], self.keep[left:right], strict=True)
            ]
        if right == self.n:  # walk the right-anchored chain forwards
            for m in range(left, right):
                pick = self._step(m, self.suffix(m)[cap], self.suffix(m + 1), cap)
                picks.append(pick)
                cap -= int(self.units[m][pick])
            return picks
        for m in range(right - 1, left - 1, -1):
            prev = self.table(left, m) if m > left else self._suffix[0]
            pick = self._step(m, self.table(left, m + 1)[cap], prev, cap)
            picks.append(pick)
            cap -= int(self.units[m][pick])
        return picks[::-1]

    def _step(self, m: int, cur: float, rest: np.ndarray, cap: int) -> int:
        """The choice of module ``m`` that, with the best of ``rest``, attains ``cur``."""
        cands = [
            (rest[cap - int(self.units[m][i])] + self.times[m][i], int(i))
            for i in self.keep[m]
            if int(self.units[m][i]) <= cap
        ]
        val, pick = min(cands)
        assert val <= cur + 1e-12 * max(1.0, abs(cur)), "knapsack backtrack lost its path"
        return pick


def _fits(value: float, limit: float) -> bool:
    return value <= limit and value < INF


def feasible(ks: WindowKnapsack, limit: float, stages: int) -> tuple[list[int] | None, float]:
    """Algorithm 2: greedy longest windows with duration ``<= limit``.

    Returns ``(bounds or None, next_limit)``. A window's best duration only grows with its
    right end (paper §4.2), so the longest window from ``left`` is found by bisection over the
    right end. ``next_limit`` is the least limit above ``limit`` at which the greedy would cut
    differently (the cheapest one-module extension of any of its windows): the greedy makes
    the same cuts, and so fails again, for every limit below it — a valid lower bound on the
    optimum after a failure (addition to the paper; it lets the search skip dead ranges).
    """
    bounds, left, nxt = [0], 0, INF
    while left < ks.n:
        first = ks.best(left, left + 1)
        if not _fits(first, limit):
            return None, min(nxt, first)
        if len(bounds) == stages:  # the last stage must take every remaining module
            whole = ks.best(left, ks.n)
            return (bounds + [ks.n], nxt) if _fits(whole, limit) else (None, min(nxt, whole))
        # memory-free bound caps how far the window can reach
        reach = int(np.searchsorted(ks.prefix_t, ks.prefix_t[left] + limit, side="right")) - 1
        good, bad = left + 1, min(reach, ks.n) + 1  # best(left, good) fits; bad is beyond
        while bad - good > 1:
            mid = (good + bad) // 2
            if _fits(ks.best(left, mid), limit):
                good = mid
            else:
                bad = mid
        if good < ks.n:
            nxt = min(nxt, ks.best(left, good + 1))
        bounds.append(good)
        left = good
    return bounds, nxt


def _split_to(ks: WindowKnapsack, bounds: list[int], stages: int) -> list[int]:
    """Split windows (never raising a stage's duration) until there are ``stages``."""
    bounds = list(bounds)
    while len(bounds) - 1 < stages:
        spans = [(ks.best(a, b), a, b) for a, b in itertools.pairwise(bounds) if b - a >= 2]
        _, a, b = max(spans)
        cut = min(range(a + 1, b), key=lambda k: max(ks.best(a, k), ks.best(k, b)))
        bounds = sorted({*bounds, cut})
    return bounds


def _result(ks: WindowKnapsack, bounds: Sequence[int], calls: int = 0) -> Partition:
    choice: list[int] = []
    times = []
    for a, b in itertools.pairwise(bounds):
        choice += ks.choose(a, b)
        times.append(ks.best(a, b))
    return Partition(
        bounds=tuple(bounds),
        choice=tuple(choice),
        stage_times=tuple(times),
        bottleneck=max(times),
        feasible_calls=calls,
    )


def search_partition(
    times: Sequence[np.ndarray],
    units: Sequence[np.ndarray],
    capacity: int,
    stages: int,
    *,
    eps: float = 1e-4,
    base: Sequence[float] | np.ndarray | None = None,
) -> Partition | None:
    """Algorithm 1: binary search on the bottleneck; None when no plan fits memory.

    ``eps`` is *relative*: the search stops when the bracket is within ``eps`` of the
    bottleneck found (an absolute 0.1 ms cost up to 3.6 % on ~1 ms stages)."""
    ks = WindowKnapsack(times, units, capacity, base)
    require(1 <= stages <= ks.n, f"pp ({stages}) must be in [1, modules ({ks.n})]")
    if stages == 1:  # one window: the knapsack answers directly
        return None if ks.best(0, ks.n) == INF else _result(ks, [0, ks.n], 0)
    lo = max(max(float(t.min()) for t in ks.times), ks.lower(0, ks.n) / stages)
    best, _ = feasible(ks, INF, stages)
    if best is None:
        return None
    calls = 1
    hi = max(ks.best(a, b) for a, b in itertools.pairwise(best))
    step = max(eps * lo, 0.01 * lo)
    galloping = True  # the optimum is usually close to the lower bound: gallop, then bisect
    while hi - lo > eps * hi:
        mid = min(lo + step, 0.5 * (lo + hi)) if galloping else 0.5 * (lo + hi)
        got, nxt = feasible(ks, mid, stages)
        calls += 1
        if got is None:
            lo, step = max(mid, min(nxt, hi)), 2 * step
        else:
            best, galloping = got, False
            hi = max(ks.best(a, b) for a, b in itertools.pairwise(got))
    return _result(ks, _split_to(ks, best, stages), calls)


def level_memory(
    times: Sequence[np.ndarray],
    units: Sequence[np.ndarray],
    capacity: int,
    stages: int,
    limit: float,
    base: Sequence[float] | np.ndarray | None = None,
) -> Partition | None:
    """Least per-GPU memory (in units) at which a plan with bottleneck ``<= limit`` exists.

    A secondary objective after the search (addition to the paper): with the bottleneck fixed,
    bisect the memory cap so that the heaviest stage holds as little as possible, which moves
    modules towards stages with spare memory and leaves headroom on every GPU.
    """
    ks = WindowKnapsack(times, units, capacity, base)
    lo, hi = -1, capacity  # feasible at hi (the caller's plan), infeasible at lo
    if feasible(ks, limit, stages)[0] is None:
        return None
    while hi - lo > 1:
        ks.limit_units = (lo + hi) // 2
        if feasible(ks, limit, stages)[0] is None:
            lo = ks.limit_units
        else:
            hi = ks.limit_units
    ks.limit_units = hi
    bounds, _ = feasible(ks, limit, stages)
    assert bounds is not None
    return _result(ks, _split_to(ks, bounds, stages))


def _stage_front(times: Sequence[np.ndarray], units: Sequence[np.ndarray], capacity: int):
    """Exact (units, time, choices) Pareto front of all choice combinations of a window."""
    front: list[tuple[int, float, tuple[int, ...]]] = [(0, 0.0, ())]
    for t, u in zip(times, units, strict=True):
        cand = [
            (fu + int(u[i]), ft + float(t[i]), fc + (i,))
            for fu, ft, fc in front
            for i in range(len(t))
            if fu + int(u[i]) <= capacity
        ]
        cand.sort(key=lambda x: (x[0], x[1]))
        front, best = [], INF
        for c in cand:
            if c[1] < best:
                front.append(c)
                best = c[1]
    return front


def exhaustive_partition(
    times: Sequence[np.ndarray],
    units: Sequence[np.ndarray],
    capacity: int,
    stages: int,
    base: Sequence[float] | np.ndarray | None = None,
) -> Partition | None:
    """Exact optimum: every boundary set × exact per-stage choice enumeration (small n only)."""
    n = len(times)
    require(1 <= stages <= n, f"pp ({stages}) must be in [1, modules ({n})]")
    memo: dict[tuple[int, int], tuple[float, tuple[int, ...]]] = {}
    prefix_b = _prefix_base(base, n)

    def stage(a: int, b: int) -> tuple[float, tuple[int, ...]]:
        if (a, b) not in memo:
            room = _room(capacity, prefix_b, a, b)
            front = _stage_front(times[a:b], units[a:b], room) if room >= 0 else []
            memo[a, b] = (front[-1][1], front[-1][2]) if front else (INF, ())
        return memo[a, b]

    best_val, best_bounds = INF, None
    for cuts in itertools.combinations(range(1, n), stages - 1):
        bounds = (0, *cuts, n)
        val = max(stage(a, b)[0] for a, b in itertools.pairwise(bounds))
        if val < best_val:
            best_val, best_bounds = val, bounds
    if best_bounds is None:
        return None
    choice = sum((stage(a, b)[1] for a, b in itertools.pairwise(best_bounds)), ())
    st = tuple(stage(a, b)[0] for a, b in itertools.pairwise(best_bounds))
    return Partition(bounds=best_bounds, choice=choice, stage_times=st, bottleneck=best_val)


def naive_dp_partition(
    times: Sequence[np.ndarray],
    units: Sequence[np.ndarray],
    capacity: int,
    stages: int,
    base: Sequence[float] | np.ndarray | None = None,
) -> Partition | None:
    """Reference: knapsack for every window (O(n²) growths), then min-max partition DP."""
    ks = WindowKnapsack(times, units, capacity, base)
    n = ks.n
    require(1 <= stages <= n, f"pp ({stages}) must be in [1, modules ({n})]")
    cost = np.full((n + 1, n + 1), INF)
    for a in range(n):
        for b in range(a + 1, n + 1):
            room = ks.room(a, b)
            cost[a, b] = ks.table(a, b)[room] if room >= 0 else INF
    f = np.full((stages + 1, n + 1), INF)
    arg = np.zeros((stages + 1, n + 1), dtype=np.int64)
    f[0, 0] = 0.0
    for s in range(1, stages + 1):
        for b in range(s, n + 1):
            vals = np.maximum(f[s - 1, :b], cost[:b, b])
            arg[s, b] = int(np.argmin(vals))
            f[s, b] = vals[arg[s, b]]
    if not np.isfinite(f[stages, n]):
        return None
    bounds = [n]
    for s in range(stages, 0, -1):
        bounds.append(int(arg[s, bounds[-1]]))
    return _result(ks, bounds[::-1])
