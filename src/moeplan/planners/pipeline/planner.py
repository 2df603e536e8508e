"""SMIDT: the pipeline planner entry point :func:`plan_pipeline` (paper 001, §4).

For every PP degree it builds the cost tables (:mod:`.stages`), runs the search of Eq. 1
(:mod:`.search`), scores each degree's plan (:func:`.stages.pipeline_throughput`) and compares
with the baselines (:mod:`.baselines`) on the same tables.
"""

from __future__ import annotations

import math
import time
from typing import cast

import numpy as np

from moeplan.cost import CostModel
from moeplan.errors import MoeplanError, require
from moeplan.planners.pipeline.baselines import all_baselines
from moeplan.planners.pipeline.cost import (
    Evaluator,
    cost_model_evaluator,
    memory_reserve,
)
from moeplan.planners.pipeline.refine import (
    Certificate,
    certified_partition,
    memory_free_bound,
)
from moeplan.planners.pipeline.search import (
    Partition,
    exhaustive_partition,
    level_memory,
    naive_dp_partition,
    search_partition,
)
from moeplan.planners.pipeline.stages import (
    DegreeTables,
    PipelinePlan,
    PipelineResult,
    assemble,
    choose_plan,
    degree_tables,
    pp_degrees,
    stage_tables,
)
from moeplan.specs import ClusterSpec, ModelSpec, Workload
from moeplan.units import GIB


def smallest_memory_needed(
    degrees: dict[int, DegreeTables | None],
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    evaluate: Evaluator,
) -> float:
    """Least GPU memory with which some PP degree has a plan (time ignored)."""
    best = math.inf
    for pp in degrees:
        ctx, tables = stage_tables(model, cluster, workload, pp, evaluate)
        mins = np.array([t.mems().min() for t in tables])
        best = min(best, memory_reserve(ctx) + memory_free_bound(list(mins), pp, upper=True))
    return best


def plan_pipeline(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    cost_model: CostModel,
    *,
    pp: int | None = None,
    async_pp: bool = True,
    eps: float = 1e-4,
    resolution: int = 512,
    rounds: int = 4,
    evaluate: Evaluator | None = None,
    verify: bool = False,
    baselines: bool = True,
    level: bool = True,
) -> PipelineResult:
    """SMIDT plan for ``model`` on ``cluster`` serving ``workload`` (see module docstring).

    ``eps`` is the search's relative tolerance; ``resolution`` the starting memory resolution,
    refined (x4, :mod:`.refine`) until the plan is certified within 0.2 % of a lower bound.
    ``level``: after the search, keep its bottleneck but lower the peak memory per GPU
    (:func:`.pipeline_search.level_memory`) when that costs under 1 % throughput (fill).
    Raises :class:`MoeplanError` when no PP degree has a plan within GPU memory, naming the
    smallest memory per GPU that would fit.
    """
    require(rounds >= 1, f"rounds ({rounds}) must be >= 1")
    evaluate = evaluate or cost_model_evaluator(cost_model)
    t0 = time.perf_counter()
    degrees = {
        s: degree_tables(model, cluster, workload, cost_model, s, evaluate, resolution)
        for s in pp_degrees(model, cluster, pp)
    }
    per_pp, parts, certs = _search_degrees(degrees, eps, rounds, async_pp)
    if level:
        per_pp = {
            s: p if p is None else _leveled(cast(DegreeTables, degrees[s]), parts[s], p, rounds)
            for s, p in per_pp.items()
        }
    search_s = time.perf_counter() - t0
    best = choose_plan([p for p in per_pp.values() if p is not None], async_pp)
    if best is None:
        need = smallest_memory_needed(degrees, model, cluster, workload, evaluate)
        raise MoeplanError(
            f"no plan fits: {model.name} on {cluster.name} needs at least {need / GIB:.1f} GiB "
            f"per GPU for pp in {sorted(degrees)} (has {cluster.gpu.mem_bytes / GIB:.1f} GiB)"
        )
    if baselines:
        for s in pp_degrees(model, cluster, None):
            if s not in degrees:
                degrees[s] = degree_tables(
                    model, cluster, workload, cost_model, s, evaluate, resolution
                )
    base = all_baselines(degrees, rounds, async_pp) if baselines else {}
    check = _verify(degrees[best.pp], best) if verify else None
    return PipelineResult(
        model=model.name,
        cluster=cluster.name,
        world_size=cluster.num_gpus,
        mem_limit_bytes=cluster.gpu.mem_bytes,
        async_pp=async_pp,
        plan=best,
        per_pp=per_pp,
        baselines=base,
        search_s=search_s,
        verify=check,
        certificate=certs[best.pp].to_dict(),
    )


def _search_degrees(
    degrees: dict[int, DegreeTables | None], eps: float, rounds: int, async_pp: bool
) -> tuple[dict[int, PipelinePlan | None], dict[int, Partition], dict[int, Certificate]]:
    """Search every degree at the starting resolution, then refine the memory resolution
    (:func:`.refine.certified_partition`) of each degree that could still win at its lower
    bound — best first, so the bar rises as degrees are refined; with each degree's
    certificate (how far its plan is proven from the byte-level optimum)."""
    certs: dict[int, Certificate] = {}
    per_pp: dict[int, PipelinePlan | None] = {}
    parts: dict[int, Partition] = {}
    for s, dt in degrees.items():
        part = (
            None
            if dt is None
            else search_partition(dt.times(), dt.units, dt.cap_units, s, eps=eps, base=dt.base)
        )
        per_pp[s] = (
            None
            if part is None or dt is None
            else assemble("smidt", dt, part.bounds, part.choice, rounds)
        )
        if part is not None:
            parts[s] = part

    def rate(p: PipelinePlan) -> float:
        return p.throughput_tokens_per_s if async_pp else p.throughput_sync_tokens_per_s

    bar = max((rate(p) for p in per_pp.values() if p is not None), default=0.0)
    for s in sorted(parts, key=lambda d: -rate(per_pp[d])):  # type: ignore[arg-type]
        plan = per_pp[s]
        assert plan is not None

        def worth(part: Partition, low: float, plan: PipelinePlan = plan, bar: float = bar) -> bool:
            return rate(plan) * part.bottleneck / low > bar

        dt, part, certs[s] = certified_partition(
            cast(DegreeTables, degrees[s]),  # a degree with a plan has its tables
            eps=eps,
            worth=worth,  # type: ignore[arg-type]
            first=parts[s],
        )
        assert part is not None  # a finer resolution keeps every coarser plan feasible
        degrees[s], parts[s] = dt, part
        per_pp[s] = assemble("smidt", dt, part.bounds, part.choice, rounds)
        bar = max(bar, rate(per_pp[s]))  # type: ignore[arg-type]
    return per_pp, parts, certs


def _leveled(dt: DegreeTables, part: Partition, plan: PipelinePlan, rounds: int) -> PipelinePlan:
    """The same bottleneck with the least peak memory, unless it costs >= 1 % throughput."""
    even = level_memory(
        dt.times(), dt.units, dt.cap_units, dt.ctx.pp, part.bottleneck, base=dt.base
    )
    if even is None:
        return plan
    alt = assemble("smidt", dt, even.bounds, even.choice, rounds)
    return alt if alt.throughput_tokens_per_s >= 0.99 * plan.throughput_tokens_per_s else plan


def _verify(dt: DegreeTables | None, plan: PipelinePlan) -> dict:
    """Exact optimum of the same discretized problem for the chosen PP degree."""
    assert dt is not None
    n = len(dt.tables)
    small = n <= 12 and dt.ctx.pp * dt.ctx.r <= 8
    solver = exhaustive_partition if small else naive_dp_partition
    exact = solver(dt.times(), dt.units, dt.cap_units, dt.ctx.pp, base=dt.base)
    assert exact is not None, "search found a plan the exact solver calls infeasible"
    return {
        "method": "exhaustive" if small else "exact_dp",
        "exhaustive_bottleneck_s": exact.bottleneck,
        "gap_s": plan.bottleneck_s - exact.bottleneck,
    }
