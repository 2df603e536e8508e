"""Every family's deployments ranked on one serving footing: tokens/s per GPU under SLOs.

``moeplan plan`` first runs each family's own search (:func:`moeplan.planners.rank.plan`:
MixServe's strategy analysis, SMIDT's pipeline partition, FinDEP's disaggregated schedule —
each scored by its paper's own analytic figure). This module then answers the question a user
asks of all of them on the same footing: serving a stream of requests with continuous batching
(:mod:`moeplan.serve.engine`), how many output tokens/s per GPU does each deployment deliver
while its TTFT and TPOT stay within the SLOs?

Steps (decisions the papers leave open, pinned by tests):

1. **Layouts per family.** MixServe: the distinct ``(attn TP×DP, MoE TP×EP, PP, fused)``
   layouts of its ranked strategies (a fused layout is priced with its overlapped
   RS-Combine/AG-Dispatch, :mod:`moeplan.serve.fused`).
   SMIDT: its chosen PP degree with each stage's dominant module layout — SMIDT's per-module
   ``(t, e, d)`` choices are summarised by the most common attention and MoE choice over all
   stages, DPMoE replication ``d`` counted into the MoE EP span (a pipeline is still simulated
   as ``pp`` stages with micro-batches, not as a sum). FinDEP: its plan is a prefill batch
   schedule of disaggregated attention/expert GPUs — its analytic figure is reported beside,
   never ranked. Disaggregated serving is ranked as two more families
   (:mod:`moeplan.serve.disagg_rank`): ``pd`` (prefill/decode pools, KV transfer, x:y rate
   matching) and ``afd`` (attention–FFN disaggregated decode on FinDEP's schedule).
2. **Prune.** Every layout gets a closed-form estimate (:func:`moeplan.serve.search.analytic_rate`)
   of the rate it sustains under the TPOT SLO; the best ``keep`` by estimated output tokens/s
   per GPU are simulated, always including each family's best.
3. **Simulate.** :func:`moeplan.serve.search.evaluate_layout` searches the engine knobs
   (running-request cap, prefill chunk) and the largest Poisson rate meeting the SLOs, then
   simulates the user's workload — at the user's rate when given, else at that largest rate.
4. **Rank** by the objective (default: output tokens/s per GPU at the largest rate meeting the
   SLOs, i.e. SLO-bound capacity per GPU); plans that meet the SLOs come first.

Split by concern, every name still importable from here: step 1 is
:mod:`moeplan.serve.family_layouts`, the result type and replica arithmetic
:mod:`moeplan.serve.ranking`, and what the CLI and report show of a ranking (explanation,
error line, curves, trace, served plan) :mod:`moeplan.serve.rank_views`; this module holds
steps 2–4 (:func:`serve_rank`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from moeplan.cost import CostModel
from moeplan.cost.a2a import moe_backend
from moeplan.errors import MoeplanError
from moeplan.planners.rank import PlanResult
from moeplan.serve.engine import simulate
from moeplan.serve.entries import Entry, Served
from moeplan.serve.family_layouts import (  # noqa: F401 (re-exported)
    MAX_STRATEGY_LAYOUTS,
    entries_of,
    pipeline_entries,
    strategy_entries,
)
from moeplan.serve.instance_knobs import InstanceKnobs
from moeplan.serve.iteration import IterationModel
from moeplan.serve.knobs import KNOB_ENTRIES, knob_variants  # noqa: F401 (KNOB_ENTRIES: docs)
from moeplan.serve.metrics import SLO, summarize
from moeplan.serve.rank_views import (  # noqa: F401 (re-exported)
    CURVE_FRACTIONS,
    CURVE_REQUESTS,
    _operating_workload,
    _rerun,
    describe,
    no_plan_meets,
    serve_explanation,
    served_plan,
    serving_curves,
    serving_trace,
)
from moeplan.serve.ranking import ServeRanking, _all_replicas, _per_replica
from moeplan.serve.search import (
    ServeResult,
    analytic_rate,
    engine_config,
    evaluate_layout,
    rank_results,
)
from moeplan.serve.workload import ServeWorkload, generate
from moeplan.specs import ClusterSpec, ModelSpec

OBJECTIVES = ("throughput-per-gpu", "goodput", "min-gpus", "latency")
DEFAULT_KEEP = 6  # layouts simulated after pruning (each costs ~0.3-0.6 s on 2 cores)
IDLE_FRACTION = 64  # "near idle": this fraction of the analytic rate estimate


def _estimate(
    entry: Entry,
    model: ModelSpec,
    cluster: ClusterSpec,
    cost: CostModel,
    workload: ServeWorkload,
    slo: SLO,
    engine: str,
    knobs: InstanceKnobs | None = None,
) -> float:
    """Closed-form output tokens/s per GPU of ``entry`` under the TPOT SLO (0 if infeasible)."""
    try:
        ev = IterationModel(model, cluster, cost, entry.layout, knobs=knobs)
        kv_scale = knobs.kv_scale if knobs is not None else 1.0
        cfg = engine_config(engine, model, cluster, entry.layout, kv_scale=kv_scale)
    except MoeplanError:
        return 0.0
    est = analytic_rate(ev, cfg, workload.isl.mean, workload.osl.mean, slo)
    return est.rate_rps * workload.osl.mean / entry.layout.gpus


def best_knobs(
    entry: Entry,
    model: ModelSpec,
    cluster: ClusterSpec,
    cost: CostModel,
    workload: ServeWorkload,
    slo: SLO,
    engine: str,
    search: KnobSearch,
) -> tuple[Entry, InstanceKnobs, float]:
    """The instance knobs (:func:`moeplan.serve.knobs.knob_variants`) with the best
    closed-form estimate for ``entry``, the entry with its layout, and that estimate."""
    try:
        base_layout = replace(entry.layout, redundant_experts=search.redundant or 0)
        base = search.base
        if search.a2a is not None:
            lay = base_layout
            backend = moe_backend(search.a2a, cost.engine, model, cluster, lay.moe_tp, lay.moe_ep)
            base = replace(base, a2a=backend)
            if base.tbo and backend != "deepep":
                return entry, search.base, 0.0
        variants = knob_variants(cost.engine, model, cluster, base_layout, base, search.given)
    except MoeplanError:
        return entry, search.base, 0.0
    best = (entry, search.base, -1.0)
    for lay, kn in variants:
        e = replace(entry, layout=lay)
        est = _estimate(e, model, cluster, cost, workload, slo, engine, kn)
        if est > best[2]:
            best = (e, kn, est)
    return best


def _final_run(
    model: ModelSpec,
    cluster: ClusterSpec,
    cost: CostModel,
    r: ServeResult,
    workload: ServeWorkload,
    slo: SLO,
) -> ServeResult:
    """Re-simulate ``r`` at its largest SLO-meeting rate (no rate was given by the user).

    When no rate meets the SLOs, the run is at a near-idle rate (1/64 of the analytic
    estimate), so its latencies show what a lone request gets; it is marked as missing them.
    """
    rate = r.max_rate_meeting_slo_rps
    if not r.feasible or r.engine is None:
        return r
    idle = not rate
    if not rate:
        rate = (r.estimate.rate_rps if r.estimate is not None else 1.0) / IDLE_FRACTION
    ev = IterationModel(model, cluster, cost, r.layout, knobs=r.knobs)
    m = summarize(simulate(generate(workload.with_rate(rate)), r.engine, ev), r.layout.gpus, slo)
    if idle:
        return replace(
            r,
            metrics=m,
            meets_slo=False,
            bound="SLOs unreachable at any rate",
            reason=f"misses the SLOs even near idle ({rate:.3g} req/s)",
        )
    return replace(r, metrics=m, meets_slo=m.meets(slo))


def serve_rank(
    result: PlanResult,
    cost: CostModel,
    workload: ServeWorkload,
    slo: SLO,
    *,
    objective: str = "throughput-per-gpu",
    engine: str = "sglang",
    keep: int = DEFAULT_KEEP,
    rate_given: bool = True,
    progress: Callable[[str], None] | None = None,
    knob_search: KnobSearch | None = None,
) -> ServeRanking:
    """Rank every family's deployments by the serving answer (module docstring); each
    deployment's instance knobs are searched (``knob_search``; default: all searched)."""
    if objective not in OBJECTIVES:
        raise MoeplanError(f"objective ({objective!r}) must be one of {', '.join(OBJECTIVES)}")
    model, cluster = result.model, result.cluster
    entries, not_served = entries_of(result)
    search = knob_search or KnobSearch()
    tuned = [best_knobs(e, model, cluster, cost, workload, slo, engine, search) for e in entries]
    knobs_of = {id(e): kn for e, kn, _ in tuned}
    chosen, pruned = _prune([(e, est) for e, _, est in tuned], keep)
    served = []
    for i, (e, est) in enumerate(chosen):
        if progress:
            progress(f"serving simulation {i + 1}/{len(chosen)}: {e.layout.label}")
        wl = _per_replica(workload, e.replicas)
        r = evaluate_layout(
            model, cluster, cost, e.layout, wl, slo, engine=engine, knobs=knobs_of[id(e)]
        )
        if not rate_given:
            r = _final_run(model, cluster, cost, r, wl, slo)
        served.append(
            Served(entry=e, result=_all_replicas(r, e.replicas), estimate_tokens_per_s_per_gpu=est)
        )
    from moeplan.serve.disagg_rank import served_disaggregated

    disagg, why = served_disaggregated(
        result, cost, workload, slo, engine=engine, rate_given=rate_given, progress=progress
    )
    served += disagg
    not_served.update(why)
    if not served:
        raise MoeplanError(
            f"no deployment of {model.name} on {cluster.name} can serve "
            f"isl {workload.isl.mean} + osl {workload.osl.mean} tokens "
            "(KV cache or weights do not fit any layout)"
        )
    # ties under the objective (e.g. every plan that keeps up with a given rate serves the
    # same tokens/s) are broken by SLO-bound capacity per GPU: the stable sort keeps it
    served.sort(key=lambda s: -_capacity_per_gpu(s.result, workload))
    order = rank_results([s.result for s in served], objective)
    by_id = {id(s.result): s for s in served}
    ranked = tuple(by_id[id(r)] for r in order)
    return ServeRanking(
        objective=objective,
        slo=slo,
        workload=workload,
        ranked=ranked,
        pruned=pruned,
        not_served=not_served,
        rate_given=rate_given,
    )


def _prune(
    scored: list[tuple[Entry, float]], keep: int
) -> tuple[list[tuple[Entry, float]], tuple[tuple[Entry, float], ...]]:
    """The ``keep`` best estimates plus each family's best (simulated), and the rest."""
    scored.sort(key=lambda es: -es[1])
    chosen = [es for es in scored if es[1] > 0][:keep]
    for fam in {e.family for e, _ in scored}:
        best = next(((e, v) for e, v in scored if e.family == fam and v > 0), None)
        if best is not None and best not in chosen:
            chosen.append(best)
    return chosen, tuple(es for es in scored if es not in chosen)


@dataclass(frozen=True, kw_only=True, slots=True)
class KnobSearch:
    """The instance knobs of a deployment search: ``base`` holds the given ones (and the
    defaults of the others), ``given`` names the :data:`KNOB_ENTRIES` entries not searched,
    ``redundant`` the given redundant-expert count (``None``: searched)."""

    base: InstanceKnobs = InstanceKnobs()
    given: frozenset[str] = frozenset()
    redundant: int | None = None
    a2a: str | None = None  # the requested backend (auto / deepep / nccl), resolved per layout


def _capacity_per_gpu(r: ServeResult, workload: ServeWorkload) -> float:
    """Output tokens/s per GPU at the largest rate meeting the SLOs (0 when unknown)."""
    rate = r.max_rate_meeting_slo_rps or 0.0
    gpus = r.metrics.gpus if r.metrics is not None else r.layout.gpus
    return rate * workload.osl.mean / gpus
