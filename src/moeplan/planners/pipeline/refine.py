"""Adaptive memory resolution for the SMIDT search, with a certificate (issue 16, item 8).

The search (:mod:`.search`) solves a discretized problem: a module choice's extra memory is
rounded *up* to units of ``M/R`` bytes, so every plan fits in bytes but a memory-bound optimum
can be missed by up to one unit per module (with ``R = 512`` that cost up to 3.6 % on small
instances). Rounding *down* instead gives a relaxation whose optimum is a lower bound on the
exact (byte-level) optimum. :func:`certified_partition` therefore:

1. searches at the current resolution (rounded up → a feasible plan ``P``);
2. stops if ``P`` is within ``tol`` of a lower bound: first the memory-free bound (each module
   at its fastest choice, best contiguous split), else the rounded-down search's optimum;
3. otherwise multiplies the resolution by 4 (up to ``max_resolution``) and repeats.

With the search's relative ``eps``, a certified plan is within ``(1 + tol)(1 + eps) - 1`` of
the exact optimum. Instances where memory does not bind stop at step 2's first bound and cost
one extra O(n log) check; the rest cost one or more extra searches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from moeplan.planners.pipeline.search import Partition, discretize, search_partition
from moeplan.planners.pipeline.stages import DegreeTables

TOL = 0.002  # certified gap to a lower bound before refining further
MAX_RESOLUTION = 8192  # units per GPU memory: 16x the default 512


def memory_free_bound(
    times: list[float], stages: int, iters: int = 60, upper: bool = False
) -> float:
    """Least bottleneck of a contiguous split of ``times`` into at most ``stages`` runs
    (bisection: the bracket's low end, or with ``upper`` its feasible high end)."""
    lo, hi = max(times), sum(times)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        count, run = 1, 0.0
        for v in times:
            if run + v > mid:
                count, run = count + 1, 0.0
            run += v
        lo, hi = (lo, mid) if count <= stages else (mid, hi)
    return hi if upper else lo


def certified_partition(
    dt: DegreeTables,
    *,
    eps: float,
    tol: float = TOL,
    max_resolution: int = MAX_RESOLUTION,
    worth: Callable[[Partition, float], bool] | None = None,
    first: Partition | None = None,
) -> tuple[DegreeTables, Partition | None]:
    """:func:`certify` on one PP degree's tables; returns the tables at the final resolution
    (their units and bases) and the partition."""
    units, base, cap, part = certify(
        dt.times(),
        [t.mems() for t in dt.tables],
        dt.capacity,
        dt.ctx.pp,
        eps=eps,
        resolution=dt.cap_units,
        tol=tol,
        max_resolution=max_resolution,
        worth=worth,
        first=first,
        start=(dt.units, dt.base),
    )
    return replace(dt, units=units, base=base, cap_units=cap), part


def certify(
    times: Sequence[np.ndarray],
    mems: Sequence[np.ndarray],
    capacity: float,
    stages: int,
    *,
    eps: float,
    resolution: int = 512,
    tol: float = TOL,
    max_resolution: int = MAX_RESOLUTION,
    worth: Callable[[Partition, float], bool] | None = None,
    first: Partition | None = None,
    start: tuple[tuple[np.ndarray, ...], np.ndarray] | None = None,
) -> tuple[tuple[np.ndarray, ...], np.ndarray, int, Partition | None]:
    """The search's partition of ``mems`` (bytes, within ``capacity``) at the least resolution
    (x4 steps from ``resolution``) certified within ``tol`` (module docstring); returns
    ``(units, base, capacity_units, partition)`` of that resolution.

    ``worth(partition, lower_bound)``: asked once, after the first lower bound; False stops
    refining (e.g. the planner's check that this PP degree cannot win even at its bound).
    ``first``/``start``: the partition and (units, base) at ``resolution`` when known.
    """
    free = memory_free_bound([float(t.min()) for t in times], stages)
    units, base = start if start is not None else discretize(mems, capacity, resolution)[:2]
    while True:
        part = first or search_partition(times, units, resolution, stages, eps=eps, base=base)
        first = None
        if part is not None and part.bottleneck <= free * (1 + tol):
            break
        low_units, low_base, _ = discretize(mems, capacity, resolution, rounding="down")
        low = search_partition(times, low_units, resolution, stages, eps=eps, base=low_base)
        if low is None or part is not None and part.bottleneck <= low.bottleneck * (1 + tol):
            break  # infeasible even relaxed (so in bytes), or certified
        if part is not None and worth is not None and not worth(part, low.bottleneck):
            break
        worth = None
        if resolution * 4 > max_resolution:
            break
        resolution *= 4
        units, base, _ = discretize(mems, capacity, resolution)
    return units, base, resolution, part
