"""``moeplan plan``: every deployment family on one cost model, ranked, with the winner explained.

Families (each planner's own search, unchanged):

- ``strategy`` — colocated hybrid TP/EP/DP/PP (MixServe, :mod:`moeplan.planners.strategy.analyzer`);
- ``pipeline`` — module-level pipeline stages with DPMoE (SMIDT, :mod:`moeplan.planners.pipeline.planner`);
- ``dep`` — disaggregated attention/expert GPUs (FinDEP, :mod:`moeplan.planners.dep.solver`).

**Common footing (a decision the papers leave open).** The four papers optimise different
objectives: FinDEP and SMIDT report prefill throughput of fixed-length prompts, MixServe
TTFT/ITL/throughput including decode. The one quantity all three families model is the
*prefill* of ``workload.batch`` prompts of ``workload.isl`` tokens, so plans are ranked by
**prompt tokens per second per GPU** for that batch (every family gets the same number of
concurrent prompts; FinDEP splits them over its attention GPUs). TTFT here is that batch's
service time without queueing. Decode metrics are reported where the family models them
(MixServe's ITL) and are not used for ranking. A TTFT SLO filters plans before ranking.

What bounds the winner (compute, memory, intra- or inter-node communication) comes from the
family's own breakdown: MixServe's compute/communication split of the prefill step,
FinDEP's per-resource utilisation in the simulated schedule, SMIDT's bottleneck stage.
Sem-MoE placement is applied to the winner's EP group when a routing trace is given (or a
synthetic one with the model's shape), and its gain is reported.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from moeplan.cost import CostModel
from moeplan.errors import MoeplanError, require
from moeplan.planners.families import FAMILY, PROPOSING_FAMILIES, TITLES
from moeplan.planners.plan import Plan
from moeplan.specs import ClusterSpec, ModelSpec, Workload
from moeplan.units import GIB

FAMILY_NAMES = TITLES
#: MixServe's figure of a PP strategy, said beside the ranking it enters
PP_CAVEAT = (
    "Caveat: MixServe prices pipeline parallelism as one batch walking through the "
    "stages (its Eq. 6), without micro-batch pipelining; SMIDT's pipeline model "
    "overlaps micro-batches, so its PP plans look better by comparison."
)
TIE = 0.005  # plans within 0.5 % per GPU are tied
# A suggested cluster must hold the weights with 30 % to spare for KV cache and activations
# (a rule of thumb for the hint in the "fits no family" error, not used for planning).
WEIGHTS_HEADROOM = 1.3


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One family's best plan on the common footing."""

    family: str
    label: str
    gpus: int
    prefill_tokens_per_s: float
    ttft_s: float
    mem_bytes_per_gpu: float
    bound: str
    plan: Plan
    itl_s: float | None = None
    detail: Any = None
    search_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    launchable_as: dict[str, Any] | None = None
    """A non-strategy plan that is really a colocated one (a one-stage SMIDT plan with one
    choice per module kind): the strategy layout plus ``replicas`` (pipeline/launchable.py)."""
    caveat: str = ""
    """A limit of the proposer's own figure that the explanation states (empty: none)."""

    @property
    def per_gpu(self) -> float:
        return self.prefill_tokens_per_s / self.gpus

    @property
    def colocated(self) -> bool:
        """Launchable by SGLang/vLLM as a colocated TP/EP/DP layout."""
        return FAMILY[self.family].layout == "colocated" or self.launchable_as is not None

    @property
    def name(self) -> str:
        """What the plan is: its family, or "colocated" for a one-stage SMIDT plan."""
        if self.launchable_as is not None and FAMILY[self.family].layout != "colocated":
            return f"colocated ({FAMILY[self.family].proposer} module search, one stage)"
        return FAMILY_NAMES[self.family]

    def summary(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "label": self.label,
            "gpus": self.gpus,
            "prefill_tokens_per_s": self.prefill_tokens_per_s,
            "prefill_tokens_per_s_per_gpu": self.per_gpu,
            "ttft_s": self.ttft_s,
            "itl_s": self.itl_s,
            "mem_bytes_per_gpu": self.mem_bytes_per_gpu,
            "bound": self.bound,
            "search_ms": self.search_s * 1e3,
            "launchable_as": self.launchable_as,
            **self.extra,
        }


@dataclass(frozen=True, kw_only=True)
class PlanResult:
    """Ranked candidates, families that could not plan (and why), and the explanation."""

    model: ModelSpec
    cluster: ClusterSpec
    workload: Workload
    candidates: tuple[Candidate, ...]
    skipped: dict[str, str]
    explanation: list[str]
    placement: Any = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def winner(self) -> Candidate:
        return self.candidates[0]


Adapter = Callable[[ModelSpec, ClusterSpec, Workload, CostModel], Candidate]


def _bound_from_shares(compute: float, intra: float, inter: float) -> str:
    parts = {
        "compute": compute,
        "intra-node communication": intra,
        "inter-node communication": inter,
    }
    return max(parts, key=lambda k: parts[k])


def power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def strategy_candidate(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    cm: CostModel,
    any_divisor: bool | None = None,
) -> Candidate:
    """MixServe's analyzer; the strategy with the highest prefill throughput. Degrees are
    powers of two (the paper's rule 9) or, with ``any_divisor`` (``None``: when the GPU count
    is not a power of two, e.g. 12 nodes of 8, where no power-of-two EP group spans all GPUs),
    every divisor of the GPU count."""
    from moeplan.planners import strategy as st

    t0 = time.perf_counter()
    if any_divisor is None:
        any_divisor = not power_of_two(cluster.num_gpus)
    a = st.analyze(model, cluster, workload, cm, any_divisor=any_divisor)
    require(bool(a.strategies), f"no MixServe strategy meets the SLOs on {cluster.name}")
    tokens = workload.batch * workload.isl
    best = max(a.strategies, key=lambda r: (tokens / r.prefill.total_s, -r.num_gpus))
    p = best.prefill
    inter = (
        best.strategy.moe_ep > 1
        and cluster.num_domains > 1
        or best.strategy.pp > 1
        and cluster.num_domains > 1
    )
    comm = p.comm_s + p.p2p_s
    bound = _bound_from_shares(p.compute_s, 0 if inter else comm, comm if inter else 0)
    plan = st.to_plan(best, model=model.name, cluster=cluster.name, baselines=a.baselines)
    return Candidate(
        family="strategy",
        label=best.strategy.label,
        gpus=best.num_gpus,
        prefill_tokens_per_s=tokens / p.total_s,
        ttft_s=p.total_s,
        itl_s=best.itl_s if math.isfinite(best.itl_s) else None,
        mem_bytes_per_gpu=best.mem_bytes_per_gpu,
        bound=bound,
        plan=plan,
        detail=a,
        search_s=time.perf_counter() - t0,
        extra={"comm_share_prefill": p.comm_share},
        caveat=PP_CAVEAT if best.strategy.pp > 1 else "",
    )


def dep_candidate(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, cm: CostModel
) -> Candidate:
    """FinDEP over every (ag, eg) split of the cluster; the batch is split over the AG."""
    from moeplan.planners import dep as rep
    from moeplan.planners.dep.problem import dep_problem
    from moeplan.planners.dep.solver import naive, pppipe, search_groups

    t0 = time.perf_counter()
    n = cluster.num_gpus

    def make(ag: int, eg: int):
        return dep_problem(
            model,
            cluster,
            cm,
            ag=ag,
            eg=eg,
            seq_len=workload.isl,
            batch=max(1, math.ceil(workload.batch / ag)),
        )

    try:
        problem, result = search_groups(make, n)
        pp_problem, pp = search_groups(make, n, pppipe)
        nv_problem, nv = search_groups(make, n, naive)
    except MoeplanError:
        make(1, n - 1)  # raises the memory error of the roomiest split
        raise
    report = rep.DepReport(
        model=model.name,
        cluster=cluster.name,
        profile=cm.profile_name,
        seq_len=workload.isl,
        problem=problem,
        findep=result,
        pppipe=pp,
        naive=nv,
        baseline_problems={"pppipe": pp_problem, "naive": nv_problem},
        search_s=time.perf_counter() - t0,
    )
    util = rep.utilization(problem, result)
    top = max(util, key=lambda k: util[k])
    inter = problem.ag + problem.eg > cluster.nvlink_domain
    bound = (
        "compute"
        if top in ("AG", "EG") or "AG" in top or "EG" in top
        else ("inter" if inter else "intra") + "-node communication"
    )
    c = result.config
    mem = problem.memory(c.ma, c.r1) if problem.memory else {}
    mem_total = max(mem.get("ag_bytes", 0.0), mem.get("eg_bytes", 0.0))  # reserve included
    label = f"AG {problem.ag} + EG {problem.eg}, ma={c.ma} r1={c.r1} r2={c.r2} {c.order}"
    return Candidate(
        family="dep",
        label=label,
        gpus=problem.ag + problem.eg,
        prefill_tokens_per_s=result.throughput,
        ttft_s=result.makespan,
        mem_bytes_per_gpu=mem_total,
        bound=f"{bound} ({top} busiest)",
        plan=rep.to_plan(report),
        detail=report,
        search_s=time.perf_counter() - t0,
        extra={
            "speedup_vs_pppipe": report.speedup_vs_pppipe,
            "speedup_vs_naive": report.speedup_vs_naive,
            "utilization": util,
        },
    )


def pipeline_candidate(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, cm: CostModel
) -> Candidate:
    """SMIDT's module-level partition over every PP degree, scored on the prefill phase."""
    from moeplan.planners import pipeline as pl
    from moeplan.planners.pipeline.launchable import colocated_layout, describe

    t0 = time.perf_counter()
    res = pl.plan_pipeline(model, cluster, replace(workload, phase="prefill"), cm)
    p = res.plan
    tps = p.throughput_tokens_per_s
    top = max(range(len(p.stages)), key=lambda i: p.stages[i].time_s + p.stages[i].p2p_s)
    st = p.stages[top]
    inter = cluster.num_domains > 1 and st.p2p_s > 0
    bound = (
        "compute"
        if p.pp == 1
        else f"compute (stage {top} of {p.pp} is the bottleneck)"
        if st.time_s >= st.p2p_s
        else f"{'inter' if inter else 'intra'}-node communication (stage {top} sends)"
    )
    hi, lo = p.mem_spread()
    layout = colocated_layout(p)
    label = (
        describe(layout)
        if layout
        else f"PP{p.pp}, module-level stages"
        if p.pp > 1
        else "one stage, a layout per module (no pipeline)"
    )
    return Candidate(
        family="pipeline",
        label=label,
        launchable_as=layout,
        gpus=res.world_size,
        prefill_tokens_per_s=tps,
        ttft_s=workload.batch * workload.isl / tps,
        mem_bytes_per_gpu=hi,
        bound=bound,
        plan=res.to_plan(),
        detail=res,
        search_s=time.perf_counter() - t0,
        extra={
            "speedup_vs_uniform": res.speedup("uniform"),
            "mem_spread_max_over_min": hi / lo if lo else None,
        },
    )


ADAPTERS: dict[str, Adapter] = {
    "strategy": strategy_candidate,
    "pipeline": pipeline_candidate,
    "dep": dep_candidate,
}


def plan(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    cm: CostModel,
    *,
    families: Sequence[str] = PROPOSING_FAMILIES,
    ttft_slo_s: float | None = None,
    adapters: dict[str, Adapter] | None = None,
    progress: Callable[[str], None] | None = None,
    alternatives: Sequence[ClusterSpec] = (),
    any_divisor: bool | None = None,
) -> PlanResult:
    """Run every requested family, rank by prefill tokens/s per GPU, explain the winner.

    ``alternatives``: clusters to suggest when nothing fits (the CLI passes the presets).
    ``any_divisor``: the strategy family's degrees (:func:`strategy_candidate`; ``None``:
    every divisor when the GPU count is not a power of two).
    """
    adapters = adapters or ADAPTERS
    for f in families:
        require(f in adapters, f"families ({f!r}) must be among {', '.join(adapters)}")
    cands, skipped, timings = [], {}, {}
    for f in families:
        if progress:
            progress(f)
        t0 = time.perf_counter()
        try:
            adapter = adapters[f]
            if adapter is strategy_candidate and any_divisor is not None:
                adapter = partial(adapter, any_divisor=any_divisor)
            c = adapter(model, cluster, workload, cm)
        except MoeplanError as err:
            skipped[f] = str(err)
        else:
            if ttft_slo_s is not None and c.ttft_s > ttft_slo_s:
                skipped[f] = (
                    f"best plan's TTFT {c.ttft_s * 1e3:.1f} ms exceeds the SLO "
                    f"{ttft_slo_s * 1e3:.1f} ms"
                )
            else:
                cands.append(c)
        timings[f] = time.perf_counter() - t0
    if not cands:
        raise MoeplanError(_nothing_fits(model, cluster, skipped, alternatives))
    ranked = tuple(sorted(cands, key=lambda c: (-c.per_gpu, not c.colocated)))
    best = ranked[0].per_gpu

    # Within TIE of the best, prefer the colocated plan: SGLang/vLLM can launch it as is.
    def key(c: Candidate) -> tuple[bool, bool, float]:
        behind = c.per_gpu < best * (1 - TIE)
        return behind, not behind and not c.colocated, -c.per_gpu

    ranked = tuple(sorted(ranked, key=key))
    return PlanResult(
        model=model,
        cluster=cluster,
        workload=workload,
        candidates=ranked,
        skipped=skipped,
        explanation=explain(ranked, cluster),
        timings=timings,
    )


def explain(ranked: Sequence[Candidate], cluster: ClusterSpec) -> list[str]:
    """A few plain sentences: who won, by how much, what bounds it."""
    w = ranked[0]
    out = [
        f"The {w.name} plan wins: {w.label}, {w.per_gpu:,.0f} prompt tokens/s per "
        f"GPU on {w.gpus} GPUs ({w.prefill_tokens_per_s:,.0f} tokens/s in all)."
    ]
    out.append(
        f"It is bound by {w.bound}; it uses {w.mem_bytes_per_gpu / GIB:.1f} GiB of "
        f"{cluster.gpu.mem_bytes / GIB:.0f} GiB per GPU."
    )
    if w.mem_bytes_per_gpu > 0.9 * cluster.gpu.mem_bytes:
        out.append(
            "Memory is nearly full: a larger batch would not fit, so memory also limits throughput."
        )
    if len(ranked) > 1:
        r = ranked[1]
        if r.per_gpu >= w.per_gpu * (1 - TIE):
            first = r.name[0].upper() + r.name[1:]
            out.append(
                f"{first} ({r.label}) ties it at {r.per_gpu:,.0f} tokens/s per "
                f"GPU (within {100 * TIE:.1f}%); the colocated plan is preferred on ties "
                "because SGLang and vLLM can launch it as is."
            )
        else:
            out.append(
                f"Runner-up: {r.name} ({r.label}) at {r.per_gpu:,.0f} tokens/s "
                f"per GPU; the winner is {w.per_gpu / r.per_gpu:.2f}x faster per GPU."
            )
    for c in ranked:
        if c.caveat:
            out.append(c.caveat)
            break
    return out


def _nothing_fits(
    model: ModelSpec,
    cluster: ClusterSpec,
    skipped: dict[str, str],
    alternatives: Sequence[ClusterSpec],
) -> str:
    """The error when no family fits, naming the smallest of ``alternatives`` that would."""
    from moeplan.cost import memory as mem

    need = mem.weights_floor_per_gpu(model, 1)
    options = []
    for c in alternatives:
        name = c.name
        for nodes in (c.num_nodes, 2 * c.num_nodes, 4 * c.num_nodes, 8 * c.num_nodes):
            usable = mem.usable_bytes(c.gpu.mem_bytes) * c.gpus_per_node * nodes
            if usable > WEIGHTS_HEADROOM * need:
                options.append(
                    (c.gpu.mem_bytes * c.gpus_per_node * nodes, name, nodes, c.num_nodes)
                )
                break
    reasons = "; ".join(f"{k}: {v}" for k, v in skipped.items())
    if not options:
        return f"model {model.name} fits no family on {cluster.name} ({reasons})"
    _, name, nodes, base = min(options)
    hint = name if nodes == base else f"{name} --nodes {nodes}"
    return (
        f"model {model.name} ({need / GIB:.0f} GiB of weights) fits no family on "
        f"{cluster.name}; the smallest preset that would is {hint} ({reasons})"
    )
