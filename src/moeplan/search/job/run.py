"""``moeplan plan`` computed once: :func:`plan_job` returns a :class:`PlanOutcome`.

Steps: each family's own search (:func:`moeplan.planners.rank.plan`), every deployment on the
serving footing (:func:`moeplan.search.ranking.rank.serve_rank`), Sem-MoE on the winner's EP group, the
winner's curves and Chrome trace (:mod:`moeplan.search.ranking.views`), FinDEP's schedules for the
report's Gantt chart, and what priced it all (:mod:`moeplan.cost.provenance`). The CLI, the
report and the exports only format the result. Pure: the routing trace comes in as a callable
that yields its chunks (the CLI opens the file), cluster presets as a list.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from moeplan.cost import CostModel
from moeplan.cost.provenance import pricing, quant_vs_bf16, source_errors
from moeplan.errors import MoeplanError
from moeplan.planners.families import FAMILY
from moeplan.planners.plan import Plan
from moeplan.planners.rank import FAMILY_NAMES, PlanResult, plan
from moeplan.search.colocated.rank import require_steady
from moeplan.search.job.memo_cost import memo_cost
from moeplan.search.job.outcome import PlanOutcome
from moeplan.search.job.parts import (
    cluster_fill,
    fit_notes,
    instance_eps,
    limits_sentence,
    placement_changes,
    profile_fit,
    step_bound,
    winner_graphs,
    winner_price_sources,
)
from moeplan.search.ranking.rank import (
    begin_first,
    describe,
    no_plan_meets,
    serve_explanation,
    serve_rank,
    served_plan,
    serving_curves,
    serving_trace,
)
from moeplan.search.ranking.result import ServeRanking
from moeplan.search.ranking.views import side_by_side
from moeplan.serve.deployment import of
from moeplan.serve.metrics import SLO
from moeplan.serve.workload.arrivals import ServeWorkload
from moeplan.specs import ClusterSpec, ModelSpec, Workload

if TYPE_CHECKING:
    from moeplan.planners.placement.result import PlacementResult

SYNTH_LAYERS = 4  # MoE layers of the synthetic trace Sem-MoE runs on without --trace
GANTT_LAYERS = 2  # MoE layers of FinDEP's schedule drawn in the report


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """What to plan and how (every field an input of ``moeplan plan``)."""

    model: ModelSpec
    cluster: ClusterSpec
    workload: Workload  # the analytic families' batch (and its lengths)
    serve_workload: ServeWorkload  # the request stream of the serving footing
    slo: SLO
    families: tuple[str, ...]
    objective: str = "throughput-per-gpu"
    engine: str = "sglang"
    rate_given: bool = False
    requests: int = 500
    knob_search: Any = None
    any_divisor: bool | None = None
    alternatives: Sequence[ClusterSpec] = ()  # presets a model that fits nowhere is pointed to
    placement: bool = True
    trace: str | None = None  # the trace's name (for the report), read through trace_source
    trace_source: Callable[[], Any] | None = None  # yields the trace's chunks
    seed: int = 0
    full_model: ModelSpec | None = None  # the model the launch files load (None: ``model``)
    model_path: str = ""


def plan_job(
    spec: JobSpec, cost: CostModel, progress: Callable[[str], None] | None = None
) -> PlanOutcome:
    """Plan, serve, place, draw, price: the whole outcome of ``moeplan plan``. Raises
    :class:`MoeplanError` (one line) when no deployment meets the SLOs or the winner's
    measured requests cannot bound the SLO percentile (:func:`require_steady`)."""
    say = progress or (lambda _: None)
    m, c = spec.model, spec.cluster
    t0 = time.perf_counter()
    memo = memo_cost(cost)  # the ranking's memo, shared with its workers
    # the first disaggregated searches start in a worker while the planners run (workers)
    result, early = begin_first(
        lambda: plan(m, c, spec.workload, cost, families=spec.families,
                     alternatives=list(spec.alternatives), any_divisor=spec.any_divisor,
                     progress=lambda f: say(f"planning: {f}")),
        memo, spec.serve_workload, spec.slo, model=m, cluster=c, families=spec.families,
        engine=spec.engine, requests=spec.requests, knob_search=spec.knob_search,
    )  # fmt: skip
    t1 = time.perf_counter()
    try:
        ranking = serve_rank(result, memo, spec.serve_workload, spec.slo,
                             objective=spec.objective, engine=spec.engine,
                             rate_given=spec.rate_given, progress=say, requests=spec.requests,
                             knob_search=spec.knob_search, early=early)  # fmt: skip
    finally:
        if early is not None:
            early.cancel()  # joined by the ranking, or dropped on its error: stopped
    if not ranking.winner.result.meets_slo:
        raise MoeplanError(no_plan_meets(ranking))
    require_steady(ranking)
    t2 = time.perf_counter()
    place_res, place_note = None, None
    if spec.placement:
        say("placement: Sem-MoE on the winner's EP group")
        ep, place_note = placement_ep(ranking, m)
        place_res = _placement(result, ep, spec, cost) if ep else None
    t3 = time.perf_counter()
    say("simulating the top plans' curves and the winner's trace")
    curves = serving_curves(ranking, m, c, memo)  # what the ranking priced: not priced again
    timeline = serving_trace(ranking, m, c, memo)
    # the proposer whose plan is an attention/expert schedule (FinDEP) draws its Gantt chart
    dep = next((x for x in result.candidates if FAMILY[x.family].layout == "groups"), None)
    schedules: dict[str, Any] = {}
    if dep is not None:
        from moeplan.planners.dep.planner import schedules as dep_schedules

        schedules = dep_schedules(dep.detail, layers=GANTT_LAYERS)
    t4 = time.perf_counter()
    return _outcome(spec, cost, result, ranking, place_res, place_note, curves, timeline,
                    schedules, {"plan_s": t1 - t0, "serve_s": t2 - t1, "placement_s": t3 - t2,
                                "curves_s": t4 - t3, **_disagg_s(ranking)})  # fmt: skip


def _disagg_s(ranking: ServeRanking) -> dict[str, float]:
    """The disaggregated search's share of ``serve_s`` (absent when it did not run)."""
    d = ranking.search.get("disaggregated")
    return {} if not d else {"serve_disaggregated_s": d["seconds"]}


def _outcome(
    spec: JobSpec,
    cost: CostModel,
    result: PlanResult,
    ranking: ServeRanking,
    place_res: PlacementResult | None,
    place_note: str | None,
    curves: dict[str, Any],
    timeline: dict[str, Any],
    schedules: dict[str, Any],
    timings: dict[str, float],
) -> PlanOutcome:
    """Assemble the outcome; the kernel-price record is read after every price was asked."""
    from moeplan.cost.mixer_prices import stand_in_fields
    from moeplan.search.ranking.topology import topology_sentence

    m, c = spec.model, spec.cluster
    price = {**pricing(cost), **stand_in_fields(m, cost.engine is not None)}
    step = step_bound(ranking, m, c, cost)
    ep = max(ep for _, ep in instance_eps(ranking.winner.entry.layout))
    topo = topology_sentence(cost, m, ep)
    return PlanOutcome(
        model=m, full_layers=(spec.full_model or m).num_layers, cluster=c, analytic=result,
        ranking=ranking, plan=winner_plan(result, place_res, spec.trace, ranking),
        explanation=(*serve_explanation(ranking, result, step_bound=step), *([topo] if topo else [])),
        served_workload=workload_dict(ranking), limits=limits_sentence(ranking, step),
        fill=cluster_fill(ranking, c.num_gpus), curves=curves, timeline=timeline,
        side_by_side=side_by_side(ranking),
        dep_schedules=schedules, placement=place_res, placement_note=place_note,
        placement_changes=placement_changes(place_res, spec.trace),
        winner_ep=ep,
        pricing=price, lookup_sources=tuple(source_errors(price)),
        price_sources=winner_price_sources(ranking, m, c, cost), profile_fit=profile_fit(cost),
        cuda_graphs=winner_graphs(ranking, spec.engine, m, c),
        quant=_quant(cost, m, ranking), fit_notes=tuple(fit_notes(m, c, spec.full_model)),
        model_path=spec.model_path, trace=spec.trace, timings={**result.timings, **timings},
        family_names={k: v[0].upper() + v[1:] for k, v in FAMILY_NAMES.items()},
    )  # fmt: skip


def _quant(cost: CostModel, model: ModelSpec, ranking: ServeRanking) -> dict[str, Any] | None:
    """:func:`quant_vs_bf16` on one GPU of the winner's widest EP group."""
    lay = ranking.winner.entry.layout
    ep = max(e for _, e in instance_eps(lay))
    tp = of(lay).visit(colocated=lambda d: d.layout.moe_tp, default=lambda _: 1)
    return quant_vs_bf16(cost, model, ep=ep, tp=tp)


def workload_dict(ranking: ServeRanking) -> dict[str, Any]:
    """The request stream every deployment was served (``--json``'s ``workload``), with each
    length distribution in words."""
    sw = ranking.workload
    return {"requests": sw.num_requests, "rate_rps": sw.rate if ranking.rate_given else None,
            "isl": describe(sw.isl), "osl": describe(sw.osl),
            "arrival": sw.arrival, "seed": sw.seed}  # fmt: skip


def placement_ep(ranking: ServeRanking, model: ModelSpec) -> tuple[int, str | None]:
    """The served winner's real EP degree, or 0 and a plain sentence saying why no placement.
    A disaggregated winner's pools are separate instances: its largest EP group is placed."""
    w = ranking.winner.entry
    pool, ep = max(instance_eps(w.layout), key=lambda p: p[1])
    where = f"{pool} instances' " if pool else ""
    if ep <= 1:
        return 0, (
            f"Sem-MoE placement skipped: the winner ({w.label}) has no expert "
            f"parallelism{' in any instance' if pool else ''}, so every GPU holds the "
            "experts it runs and nothing is placed."
        )
    if model.num_experts % ep:
        return 0, (
            f"Sem-MoE placement skipped: {model.num_experts} experts do not divide "
            f"evenly over the winner's {where}EP{ep}."
        )
    return ep, None


def _placement(result: PlanResult, ep: int, spec: JobSpec, cm: CostModel) -> Any:
    """Sem-MoE on the winner's EP group of ``ep`` GPUs (a synthetic trace if none given)."""
    from moeplan.planners.placement.planner import PlaceConfig, cost_evaluator, place
    from moeplan.traces.synthetic import SynthConfig, synthesize

    m, c = result.model, result.cluster
    cfg = PlaceConfig(ep=ep, mode="dp", baselines=True, seed=spec.seed)
    ev = cost_evaluator(cm, m, ep, c.domains_spanned(ep))
    layers = m.num_moe_layers
    src: Any = spec.trace_source
    if src is None:
        # No trace: estimate the gain on a small synthetic trace with the model's shape,
        # on its first SYNTH_LAYERS MoE layers (a per-layer statistic; keeps plan fast).
        layers = min(SYNTH_LAYERS, layers)
        groups = math.gcd(16, m.num_experts)
        src = synthesize(
            SynthConfig(
                num_layers=layers,
                num_experts=m.num_experts,
                top_k=m.top_k,
                num_requests=48,
                num_groups=groups,
                groups_per_topic=min(2, groups),
                seed=spec.seed,
            )
        )
    return place(
        src,
        num_layers=layers,
        num_experts=m.num_experts,
        hidden_bytes=m.hidden_bytes,
        evaluate=ev,
        cfg=cfg,
    )


def winner_plan(
    result: PlanResult, placement: PlacementResult | None, trace: str | None, ranking: ServeRanking
) -> Plan:
    """The serving winner's :class:`Plan` with the ranking and (from a trace) its expert
    placement."""
    plan_ = replace(
        served_plan(ranking.winner, ranking), ranking=[s.summary() for s in ranking.ranked]
    )
    if placement is None or trace is None:
        return plan_
    from moeplan.planners.placement import physical_to_logical

    sem = placement.methods["semmoe"]
    phys = sem.y if sem.replicas is None else sem.replicas
    p2l = physical_to_logical(phys, placement.ep)
    return replace(plan_, details={**plan_.details, "placement": {
        "ep": placement.ep, "physical_to_logical_map": p2l.tolist(),
        "moe_layers": list(result.model.moe_layers)}})  # fmt: skip
