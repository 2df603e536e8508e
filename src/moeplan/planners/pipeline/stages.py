"""SMIDT plan types and the throughput of a partition (paper 001, §4.3).

Originally part of the planner module; split out so that the baselines and the planner both
build on it without an import cycle.

SMIDT: module-level pipeline partition for dynamic top-k, with DPMoE (paper 001, §4).

:func:`plan_pipeline` is the entry point. For every PP degree ``S`` dividing ``P`` (or the one
asked for) it builds the module cost tables (:mod:`.pipeline_cost`), runs the binary search /
greedy / knapsack search of Eq. 1 (:mod:`.pipeline_search`), and scores the plan by predicted
throughput including P2P sends and pipeline fill; the best degree wins. Baselines on the same
tables are in :mod:`.pipeline_baselines`.

Throughput model (the paper picks ``S`` by "estimated throughput" without a formula): the
batch is split into ``m = rounds·S`` micro-batches of ``ceil(batch/S)`` requests; stage ``j``
takes ``c_j`` per micro-batch and sends ``p_j`` to the next stage. Synchronous sends block the
sender (period ``max_j c_j + p_j``); asynchronous sends overlap compute (SMIDT §4.3; period
``max_j max(c_j, p_j)``). Time for the ``m`` micro-batches is the fill ``Σ_j (c_j + p_j)`` plus
``(m-1)`` periods; throughput counts prompt and generated tokens per second (whole cluster).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from moeplan.cost import CostModel
from moeplan.errors import require
from moeplan.planners.pipeline.cost import (
    Choice,
    Evaluator,
    ModuleRef,
    ModuleTable,
    StageContext,
    build_tables,
    memory_reserve,
    modules_of,
    p2p_seconds,
)
from moeplan.planners.pipeline.search import (
    discretize,
)
from moeplan.planners.plan import Plan
from moeplan.specs import ClusterSpec, ModelSpec, Workload


@dataclass(frozen=True, kw_only=True, slots=True)
class StagePlan:
    """One stage: modules ``[start_module, end_module)`` with their choices and costs."""

    start_module: int
    end_module: int
    modules: tuple[tuple[ModuleRef, Choice], ...]
    time_s: float
    mem_bytes_per_gpu: float
    p2p_s: float = 0.0

    def to_dict(self) -> dict:
        return {
            "start_module": self.start_module,
            "end_module": self.end_module,
            "modules": [
                {"kind": m.kind, "layer": m.layer, "tp": c.tp, "ep": c.ep, "dpmoe": c.dpmoe}
                for m, c in self.modules
            ],
            "time_s": self.time_s,
            "mem_bytes_per_gpu": self.mem_bytes_per_gpu,
            "p2p_s": self.p2p_s,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class PipelinePlan:
    """A full plan for one PP degree with its predicted performance."""

    method: str
    pp: int
    r: int
    stages: tuple[StagePlan, ...]
    bottleneck_s: float
    period_s: float
    throughput_tokens_per_s: float
    throughput_sync_tokens_per_s: float
    microbatches: int
    micro_batch: int

    def mem_spread(self) -> tuple[float, float]:
        mems = [s.mem_bytes_per_gpu for s in self.stages]
        return max(mems), min(mems)

    def summary(self) -> dict:
        hi, lo = self.mem_spread()
        return {
            "method": self.method,
            "pp": self.pp,
            "bottleneck_s": self.bottleneck_s,
            "throughput_tokens_per_s": self.throughput_tokens_per_s,
            "stage_time_s": [s.time_s for s in self.stages],
            "stage_modules": [[s.start_module, s.end_module] for s in self.stages],
            "mem_bytes_per_gpu_max": hi,
            "mem_bytes_per_gpu_min": lo,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class PipelineResult:
    """What :func:`plan_pipeline` returns: the plan, the baselines, search facts."""

    model: str
    cluster: str
    world_size: int
    mem_limit_bytes: float
    async_pp: bool
    plan: PipelinePlan
    per_pp: dict[int, PipelinePlan | None]
    baselines: dict[str, PipelinePlan | None]
    search_s: float
    verify: dict | None = field(default=None)
    # the plan's distance to the byte-level optimum (:class:`.refine.Certificate` as a dict)
    certificate: dict | None = field(default=None)

    def speedup(self, name: str) -> float | None:
        base = self.baselines.get(name)
        return (
            None
            if base is None
            else self.plan.throughput_tokens_per_s / base.throughput_tokens_per_s
        )

    def to_plan(self) -> Plan:
        """The :class:`~moeplan.planners.plan.Plan` of family ``pipeline`` (docs/API.md)."""
        p = self.plan
        hi, lo = p.mem_spread()
        return Plan(
            family="pipeline",
            model=self.model,
            cluster=self.cluster,
            layout={
                "world_size": self.world_size,
                "pp": p.pp,
                "stages": [
                    {
                        k: v
                        for k, v in s.to_dict().items()
                        if k in ("start_module", "end_module", "modules")
                    }
                    for s in p.stages
                ],
            },
            details={
                "end_module": "exclusive",
                "async_pp": self.async_pp,
                "microbatches": p.microbatches,
                "micro_batch": p.micro_batch,
                "stage_time_s": [s.time_s for s in p.stages],
                "stage_p2p_s": [s.p2p_s for s in p.stages],
                "mem_bytes_per_gpu": [s.mem_bytes_per_gpu for s in p.stages],
                "mem_limit_bytes": self.mem_limit_bytes,
                "launchable_as": _launchable(p),
                "certificate": self.certificate,  # distance to the byte-level optimum
            },
            predicted={
                "throughput_tokens_per_s": p.throughput_tokens_per_s,
                "throughput_sync_tokens_per_s": p.throughput_sync_tokens_per_s,
                "bottleneck_s": p.bottleneck_s,
                "period_s": p.period_s,
                "mem_bytes_per_gpu_max": hi,
                "mem_bytes_per_gpu_min": lo,
            },
            baselines={k: (None if v is None else v.summary()) for k, v in self.baselines.items()},
        )


def _launchable(plan: PipelinePlan) -> dict | None:
    from moeplan.planners.pipeline.launchable import colocated_layout  # imports this module

    return colocated_layout(plan)


def pipeline_throughput(
    stage_times: list[float], p2p: list[float], tokens_per_mb: float, microbatches: int
) -> tuple[float, float, float]:
    """(async period, async tokens/s, sync tokens/s) — see module docstring."""
    fill = sum(stage_times) + sum(p2p)
    per_async = max(max(c, p) for c, p in zip(stage_times, p2p, strict=True))
    per_sync = max(c + p for c, p in zip(stage_times, p2p, strict=True))
    work = microbatches * tokens_per_mb
    return (
        per_async,
        work / (fill + (microbatches - 1) * per_async),
        work / (fill + (microbatches - 1) * per_sync),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class DegreeTables:
    """Everything the searches need for one PP degree."""

    ctx: StageContext
    tables: list[ModuleTable]
    capacity: float
    reserve: float
    units: tuple[np.ndarray, ...]
    base: np.ndarray
    cap_units: int
    p2p: list[float]
    time_arrays: tuple[np.ndarray, ...]

    def times(self) -> tuple[np.ndarray, ...]:
        """Duration of every choice, per module (the search's input)."""
        return self.time_arrays


def stage_tables(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, pp: int, evaluate: Evaluator
) -> tuple[StageContext, list[ModuleTable]]:
    """The stage context of PP degree ``pp`` and every module's choice table."""
    routing = workload.routing_for(model.top_k)
    ctx = StageContext(
        model=model,
        workload=workload,
        routing=routing,
        pp=pp,
        r=cluster.num_gpus // pp,
        nvlink_domain=cluster.nvlink_domain,
    )
    return ctx, build_tables(modules_of(model, routing), ctx, evaluate)


def degree_tables(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    cm: CostModel,
    pp: int,
    evaluate: Evaluator,
    resolution: int,
) -> DegreeTables | None:
    """Cost tables and memory units for PP degree ``pp``; None if nothing can fit."""
    ctx, tables = stage_tables(model, cluster, workload, pp, evaluate)
    reserve = memory_reserve(ctx)
    capacity = cluster.gpu.mem_bytes - reserve
    if capacity <= 0:
        return None
    units, base, cap_units = discretize([t.mems() for t in tables], capacity, resolution)
    p2p = [p2p_seconds(cm, ctx, j) if j < pp - 1 else 0.0 for j in range(pp)]
    return DegreeTables(
        ctx=ctx,
        tables=tables,
        capacity=capacity,
        reserve=reserve,
        units=units,
        base=base,
        cap_units=cap_units,
        p2p=p2p,
        time_arrays=tuple(t.times() for t in tables),
    )


def assemble(
    method: str, dt: DegreeTables, bounds: tuple[int, ...], choice: tuple[int, ...], rounds: int
) -> PipelinePlan:
    """A PipelinePlan from boundaries and per-module choice indices."""
    stages = []
    for j, (a, b) in enumerate(itertools.pairwise(bounds)):
        mods = tuple((dt.tables[m].module, dt.tables[m].choices[choice[m]]) for m in range(a, b))
        costs = [dt.tables[m].costs[choice[m]] for m in range(a, b)]
        stages.append(
            StagePlan(
                start_module=a,
                end_module=b,
                modules=mods,
                time_s=sum(c.time_s for c in costs),
                mem_bytes_per_gpu=dt.reserve + sum(c.mem_bytes for c in costs),
                p2p_s=dt.p2p[j],
            )
        )
    pp = dt.ctx.pp
    m = rounds * pp
    times = [s.time_s for s in stages]
    period, thr, thr_sync = pipeline_throughput(times, dt.p2p, dt.ctx.tokens_per_microbatch(), m)
    return PipelinePlan(
        method=method,
        pp=pp,
        r=dt.ctx.r,
        stages=tuple(stages),
        bottleneck_s=max(times),
        period_s=period,
        throughput_tokens_per_s=thr,
        throughput_sync_tokens_per_s=thr_sync,
        microbatches=m,
        micro_batch=dt.ctx.micro_batch,
    )


def choose_plan(plans: list[PipelinePlan], async_pp: bool) -> PipelinePlan | None:
    key = (
        (lambda p: p.throughput_tokens_per_s)
        if async_pp
        else (lambda p: p.throughput_sync_tokens_per_s)
    )
    return max(plans, key=key) if plans else None


def pp_degrees(model: ModelSpec, cluster: ClusterSpec, pp: int | None) -> list[int]:
    """PP degrees to search: the one given, or every divisor of P up to 2N modules."""
    p, n = cluster.num_gpus, 2 * model.num_layers
    if pp is not None:
        require(pp >= 1 and p % pp == 0, f"pp ({pp}) must divide the cluster's GPUs ({p})")
        require(pp <= n, f"pp ({pp}) must be <= the model's modules ({n})")
        return [pp]
    return [s for s in range(1, p + 1) if p % s == 0 and s <= n]
