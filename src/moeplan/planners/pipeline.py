"""SMIDT: module-level pipeline partition for dynamic top-k, with DPMoE (paper 001, §4).

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
import math
import time
from dataclasses import dataclass, field

import numpy as np

from moeplan.cost import CostModel
from moeplan.errors import MoeplanError, require
from moeplan.planners.pipeline_cost import (
    Choice,
    Evaluator,
    ModuleRef,
    ModuleTable,
    StageContext,
    build_tables,
    cost_model_evaluator,
    memory_reserve,
    modules_of,
    p2p_seconds,
)
from moeplan.planners.pipeline_search import (
    Partition,
    discretize,
    exhaustive_partition,
    level_memory,
    naive_dp_partition,
    search_partition,
)
from moeplan.specs import ClusterSpec, ModelSpec, Workload

GIB = 1024**3


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
        return {"start_module": self.start_module, "end_module": self.end_module,
                "modules": [{"kind": m.kind, "layer": m.layer, "tp": c.tp, "ep": c.ep,
                             "dpmoe": c.dpmoe} for m, c in self.modules],
                "time_s": self.time_s, "mem_bytes_per_gpu": self.mem_bytes_per_gpu,
                "p2p_s": self.p2p_s}


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
        return {"method": self.method, "pp": self.pp, "bottleneck_s": self.bottleneck_s,
                "throughput_tokens_per_s": self.throughput_tokens_per_s,
                "stage_time_s": [s.time_s for s in self.stages],
                "stage_modules": [[s.start_module, s.end_module] for s in self.stages],
                "mem_bytes_per_gpu_max": hi, "mem_bytes_per_gpu_min": lo}


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

    def speedup(self, name: str) -> float | None:
        base = self.baselines.get(name)
        return None if base is None else self.plan.throughput_tokens_per_s / base.throughput_tokens_per_s

    def to_plan_dict(self) -> dict:
        """``plan.json`` (schema ``moeplan.plan/1``, family ``pipeline``; docs/API.md)."""
        p = self.plan
        hi, lo = p.mem_spread()
        return {
            "schema": "moeplan.plan/1", "family": "pipeline", "model": self.model,
            "cluster": self.cluster,
            "layout": {"world_size": self.world_size, "pp": p.pp,
                       "stages": [{k: v for k, v in s.to_dict().items()
                                   if k in ("start_module", "end_module", "modules")}
                                  for s in p.stages]},
            "details": {"end_module": "exclusive", "async_pp": self.async_pp,
                        "microbatches": p.microbatches, "micro_batch": p.micro_batch,
                        "stage_time_s": [s.time_s for s in p.stages],
                        "stage_p2p_s": [s.p2p_s for s in p.stages],
                        "mem_bytes_per_gpu": [s.mem_bytes_per_gpu for s in p.stages],
                        "mem_limit_bytes": self.mem_limit_bytes},
            "predicted": {"throughput_tokens_per_s": p.throughput_tokens_per_s,
                          "throughput_sync_tokens_per_s": p.throughput_sync_tokens_per_s,
                          "bottleneck_s": p.bottleneck_s, "period_s": p.period_s,
                          "mem_bytes_per_gpu_max": hi, "mem_bytes_per_gpu_min": lo},
            "baselines": {k: (None if v is None else v.summary())
                          for k, v in self.baselines.items()},
        }


def pipeline_throughput(stage_times: list[float], p2p: list[float], tokens_per_mb: float,
                        microbatches: int) -> tuple[float, float, float]:
    """(async period, async tokens/s, sync tokens/s) — see module docstring."""
    fill = sum(stage_times) + sum(p2p)
    per_async = max(max(c, p) for c, p in zip(stage_times, p2p, strict=True))
    per_sync = max(c + p for c, p in zip(stage_times, p2p, strict=True))
    work = microbatches * tokens_per_mb
    return (per_async, work / (fill + (microbatches - 1) * per_async),
            work / (fill + (microbatches - 1) * per_sync))


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


def degree_tables(model: ModelSpec, cluster: ClusterSpec, workload: Workload, cm: CostModel,
                  pp: int, evaluate: Evaluator, resolution: int) -> DegreeTables | None:
    """Cost tables and memory units for PP degree ``pp``; None if nothing can fit."""
    routing = workload.routing_for(model.top_k)
    ctx = StageContext(model=model, workload=workload, routing=routing, pp=pp,
                       r=cluster.num_gpus // pp, gpus_per_node=cluster.gpus_per_node)
    tables = build_tables(modules_of(model, routing), ctx, evaluate)
    reserve = memory_reserve(ctx)
    capacity = cluster.gpu.mem_bytes - reserve
    if capacity <= 0:
        return None
    units, base, cap_units = discretize([t.mems() for t in tables], capacity, resolution)
    p2p = [p2p_seconds(cm, ctx, j) if j < pp - 1 else 0.0 for j in range(pp)]
    return DegreeTables(ctx=ctx, tables=tables, capacity=capacity, reserve=reserve,
                        units=units, base=base, cap_units=cap_units, p2p=p2p,
                        time_arrays=tuple(t.times() for t in tables))


def assemble(method: str, dt: DegreeTables, bounds: tuple[int, ...], choice: tuple[int, ...],
             rounds: int) -> PipelinePlan:
    """A PipelinePlan from boundaries and per-module choice indices."""
    stages = []
    for j, (a, b) in enumerate(itertools.pairwise(bounds)):
        mods = tuple((dt.tables[m].module, dt.tables[m].choices[choice[m]]) for m in range(a, b))
        costs = [dt.tables[m].costs[choice[m]] for m in range(a, b)]
        stages.append(StagePlan(start_module=a, end_module=b, modules=mods,
                                time_s=sum(c.time_s for c in costs),
                                mem_bytes_per_gpu=dt.reserve + sum(c.mem_bytes for c in costs),
                                p2p_s=dt.p2p[j]))
    pp = dt.ctx.pp
    m = rounds * pp
    times = [s.time_s for s in stages]
    period, thr, thr_sync = pipeline_throughput(times, dt.p2p, dt.ctx.tokens_per_microbatch(), m)
    return PipelinePlan(method=method, pp=pp, r=dt.ctx.r, stages=tuple(stages),
                        bottleneck_s=max(times), period_s=period, throughput_tokens_per_s=thr,
                        throughput_sync_tokens_per_s=thr_sync, microbatches=m,
                        micro_batch=dt.ctx.micro_batch)


def _choose(plans: list[PipelinePlan], async_pp: bool) -> PipelinePlan | None:
    key = (lambda p: p.throughput_tokens_per_s) if async_pp else (
        lambda p: p.throughput_sync_tokens_per_s)
    return max(plans, key=key) if plans else None


def pp_degrees(model: ModelSpec, cluster: ClusterSpec, pp: int | None) -> list[int]:
    """PP degrees to search: the one given, or every divisor of P up to 2N modules."""
    p, n = cluster.num_gpus, 2 * model.num_layers
    if pp is not None:
        require(pp >= 1 and p % pp == 0, f"pp ({pp}) must divide the cluster's GPUs ({p})")
        require(pp <= n, f"pp ({pp}) must be <= the model's modules ({n})")
        return [pp]
    return [s for s in range(1, p + 1) if p % s == 0 and s <= n]


def smallest_memory_needed(degrees: dict[int, DegreeTables | None], model: ModelSpec,
                           cluster: ClusterSpec, workload: Workload, evaluate: Evaluator,
                           ) -> float:
    """Least GPU memory with which some PP degree has a plan (time ignored)."""
    best = math.inf
    for pp in degrees:
        routing = workload.routing_for(model.top_k)
        ctx = StageContext(model=model, workload=workload, routing=routing, pp=pp,
                           r=cluster.num_gpus // pp, gpus_per_node=cluster.gpus_per_node)
        tables = build_tables(modules_of(model, routing), ctx, evaluate)
        mins = np.array([t.mems().min() for t in tables])
        best = min(best, memory_reserve(ctx) + _min_max_partition(mins, pp))
    return best


def _min_max_partition(values: np.ndarray, parts: int) -> float:
    """Least possible largest sum when cutting ``values`` into ``parts`` contiguous runs."""
    lo, hi = float(values.max()), float(values.sum())
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        count, run = 1, 0.0
        for v in values:
            if run + v > mid:
                count, run = count + 1, 0.0
            run += v
        lo, hi = (lo, mid) if count <= parts else (mid, hi)
    return hi


def plan_pipeline(model: ModelSpec, cluster: ClusterSpec, workload: Workload,
                  cost_model: CostModel, *, pp: int | None = None, async_pp: bool = True,
                  eps: float = 1e-4, resolution: int = 512, rounds: int = 4,
                  evaluate: Evaluator | None = None, verify: bool = False,
                  baselines: bool = True, level: bool = True) -> PipelineResult:
    """SMIDT plan for ``model`` on ``cluster`` serving ``workload`` (see module docstring).

    ``level``: after the search, keep its bottleneck but lower the peak memory per GPU
    (:func:`.pipeline_search.level_memory`) when that costs under 1 % throughput (fill).
    Raises :class:`MoeplanError` when no PP degree has a plan within GPU memory, naming the
    smallest memory per GPU that would fit.
    """
    from moeplan.planners.pipeline_baselines import all_baselines

    require(rounds >= 1, f"rounds ({rounds}) must be >= 1")
    evaluate = evaluate or cost_model_evaluator(cost_model)
    t0 = time.perf_counter()
    degrees = {s: degree_tables(model, cluster, workload, cost_model, s, evaluate, resolution)
               for s in pp_degrees(model, cluster, pp)}
    per_pp: dict[int, PipelinePlan | None] = {}
    parts: dict[int, Partition] = {}
    for s, dt in degrees.items():
        part = None if dt is None else search_partition(dt.times(), dt.units, dt.cap_units, s,
                                                        eps=eps, base=dt.base)
        if part is None or dt is None:
            per_pp[s] = None
            continue
        parts[s] = part
        plan = assemble("smidt", dt, part.bounds, part.choice, rounds)
        per_pp[s] = _leveled(dt, part, plan, rounds) if level else plan
    search_s = time.perf_counter() - t0
    best = _choose([p for p in per_pp.values() if p is not None], async_pp)
    if best is None:
        need = smallest_memory_needed(degrees, model, cluster, workload, evaluate)
        raise MoeplanError(
            f"no plan fits: {model.name} on {cluster.name} needs at least {need / GIB:.1f} GiB "
            f"per GPU for pp in {sorted(degrees)} (has {cluster.gpu.mem_bytes / GIB:.1f} GiB)")
    if baselines:
        for s in pp_degrees(model, cluster, None):
            if s not in degrees:
                degrees[s] = degree_tables(model, cluster, workload, cost_model, s, evaluate,
                                           resolution)
    base = all_baselines(degrees, rounds, async_pp) if baselines else {}
    check = _verify(degrees[best.pp], best) if verify else None
    return PipelineResult(model=model.name, cluster=cluster.name, world_size=cluster.num_gpus,
                          mem_limit_bytes=cluster.gpu.mem_bytes, async_pp=async_pp, plan=best,
                          per_pp=per_pp, baselines=base, search_s=search_s, verify=check)


def _leveled(dt: DegreeTables, part: Partition, plan: PipelinePlan,
             rounds: int) -> PipelinePlan:
    """The same bottleneck with the least peak memory, unless it costs >= 1 % throughput."""
    even = level_memory(dt.times(), dt.units, dt.cap_units, dt.ctx.pp, part.bottleneck,
                        base=dt.base)
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
    return {"method": "exhaustive" if small else "exact_dp",
            "exhaustive_bottleneck_s": exact.bottleneck,
            "gap_s": plan.bottleneck_s - exact.bottleneck}
