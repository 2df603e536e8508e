"""Adaptive memory resolution for the SMIDT search, with a certificate.

The search (:mod:`.search`) solves a discretized problem: a module choice's extra memory is
rounded *up* to units of ``M/R`` bytes, so every plan fits in bytes but a memory-bound optimum
can be missed by up to one unit per module (with ``R = 512`` that cost up to 3.6 % on small
instances). Rounding *down* instead gives a relaxation whose optimum is a lower bound on the
exact (byte-level) optimum. :func:`certified_partition` therefore:

1. searches at the current resolution (rounded up → a feasible plan ``P``);
2. stops if ``P`` is within ``tol`` of a lower bound: first the memory-free bound (each module
   at its fastest choice, best contiguous split), else the rounded-down search's optimum;
3. otherwise multiplies the resolution by 4 (up to ``max_resolution``) and repeats;
4. if the finest resolution is still not certified (a stage's slack below one unit per
   module), searches in bytes (:mod:`.exact`: exact Pareto-front knapsacks) between the
   lower bound and the plan found, which ends within ``eps`` of the byte-level optimum.

Every answer carries a :class:`Certificate`: ``certified`` is True when the plan is proven
within ``(1 + tol)/(1 - eps) - 1`` of the byte-level optimum; otherwise (the caller stopped a
degree that cannot win, or step 4's fronts passed their work bound) ``gap_bound`` is the proven
relative distance to the optimum. Instances where memory does not bind stop at step 2's first
bound and cost one extra O(n log) check; the rest cost one or more extra searches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from moeplan.planners.pipeline.exact import FrontTooLarge, byte_exact_search
from moeplan.planners.pipeline.search import Partition, discretize, search_partition
from moeplan.planners.pipeline.stages import DegreeTables

INF = float("inf")

TOL = 0.002  # certified gap to a lower bound before refining further
MAX_RESOLUTION = 8192  # units per GPU memory: 16x the default 512
REFINE_STEP = 4  # each refinement multiplies the resolution by this


@dataclass(frozen=True, kw_only=True, slots=True)
class Certificate:
    """How far a partition is proven from the byte-level optimum (module docstring)."""

    certified: bool
    lower_bound_s: float  # no plan in bytes has a smaller bottleneck
    gap_bound: float  # bottleneck / lower_bound_s - 1 (relative, >= 0)
    method: str  # which bound proved it, or why the search stopped short

    def to_dict(self) -> dict:
        return {
            "certified": self.certified,
            "lower_bound_s": self.lower_bound_s if np.isfinite(self.lower_bound_s) else None,
            "gap_bound": self.gap_bound if np.isfinite(self.gap_bound) else None,
            "certificate": self.method,
        }


def _cert(part: Partition | None, low: float, method: str, limit: float) -> Certificate:
    if part is None:  # infeasible even relaxed: proven infeasible in bytes
        return Certificate(certified=True, lower_bound_s=INF, gap_bound=0.0, method=method)
    gap = max(0.0, part.bottleneck / low - 1) if low > 0 else INF
    return Certificate(certified=gap <= limit, lower_bound_s=low, gap_bound=gap, method=method)


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
) -> tuple[DegreeTables, Partition | None, Certificate]:
    """:func:`certify` on one PP degree's tables; returns the tables at the final resolution
    (their units and bases), the partition and its certificate."""
    units, base, cap, part, cert = certify(
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
    return replace(dt, units=units, base=base, cap_units=cap), part, cert


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
) -> tuple[tuple[np.ndarray, ...], np.ndarray, int, Partition | None, Certificate]:
    """The search's partition of ``mems`` (bytes, within ``capacity``) at the least resolution
    (x4 steps from ``resolution``) certified within ``tol``, else the byte-level search's
    (module docstring); returns ``(units, base, capacity_units, partition, certificate)``.

    ``worth(partition, lower_bound)``: asked once, after the first lower bound; False stops
    refining (e.g. the planner's check that this PP degree cannot win even at its bound) and
    the certificate says so. ``first``/``start``: the partition and (units, base) at
    ``resolution`` when known.
    """
    limit = (1 + tol) / (1 - eps) - 1  # tol on a bound proven within eps (relative)
    free = memory_free_bound([float(t.min()) for t in times], stages)
    units, base = start if start is not None else discretize(mems, capacity, resolution)[:2]
    while True:
        part = first or search_partition(times, units, resolution, stages, eps=eps, base=base)
        first = None
        if part is not None and part.bottleneck <= free * (1 + tol):
            return units, base, resolution, part, _cert(part, free, "memory-free bound", limit)
        low_units, low_base, _ = discretize(mems, capacity, resolution, rounding="down")
        low = search_partition(times, low_units, resolution, stages, eps=eps, base=low_base)
        # the relaxed search's bracket: its optimum is >= (1 - eps) x the bottleneck it found
        bound = max(free, 0.0 if low is None else low.bottleneck * (1 - eps))
        if low is None or part is not None and part.bottleneck <= low.bottleneck * (1 + tol):
            cert = _cert(None if low is None else part, bound, "rounded-down relaxation", limit)
            return units, base, resolution, part, cert
        if part is not None and worth is not None and not worth(part, low.bottleneck):
            cert = _cert(part, bound, "stopped: this PP degree cannot win at its bound", limit)
            return units, base, resolution, part, cert
        worth = None
        if resolution * REFINE_STEP > max_resolution:
            got, cert = _in_bytes(times, mems, capacity, stages, eps, bound, part, limit)
            return units, base, resolution, got, cert
        resolution *= REFINE_STEP
        units, base, _ = discretize(mems, capacity, resolution)


def _in_bytes(
    times: Sequence[np.ndarray],
    mems: Sequence[np.ndarray],
    capacity: float,
    stages: int,
    eps: float,
    bound: float,
    part: Partition | None,
    limit: float,
) -> tuple[Partition | None, Certificate]:
    """Step 4: the byte-level search, or the unit plan with its gap when it stops short."""
    try:
        exact, lo = byte_exact_search(
            times, mems, capacity, stages, eps=eps, lower=bound, upper=part
        )
    except FrontTooLarge as err:
        method = f"stopped: byte-level search's {err}"
        if part is None:
            return None, Certificate(
                certified=False, lower_bound_s=bound, gap_bound=INF, method=method
            )
        return part, _cert(part, bound, method, -1.0)
    if exact is None:  # no plan in bytes either: the relaxation's plan was not realisable
        return None, Certificate(
            certified=True, lower_bound_s=INF, gap_bound=0.0, method="byte-level Pareto fronts"
        )
    return exact, _cert(exact, max(bound, lo), "byte-level Pareto fronts", limit)
