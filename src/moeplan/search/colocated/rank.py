"""The colocated part of ``moeplan plan``'s serving ranking: the whole deployment space.

The families' planners propose layouts (:func:`moeplan.search.ranking.family_layouts.entries_of`);
they do not decide what is simulated. Every layout of :mod:`moeplan.search.colocated.space` is searched
by SLO-bound capacity (:func:`moeplan.search.colocated.search.search_space`); a layout a family
proposed keeps that family's name and plan (its analytic figures and report sections), any
other is a ``strategy`` deployment (the colocated hybrid grammar covers every layout here).

With a given rate each simulated deployment is also run at it (round-robin: ``rate /
replicas`` into each instance, steady window): it meets the SLOs only when that steady run
does, so an unstable deployment (rho >= 1) never meets them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from moeplan.cost import CostModel
from moeplan.errors import MoeplanError
from moeplan.planners.layout import Layout
from moeplan.planners.plan import Plan
from moeplan.planners.rank import PlanResult
from moeplan.search.capacity.slo import (
    CI_TARGET,
    WINDOW_LIFETIMES,
    SteadyProbe,
    limit_words,
    steady_probe,
    window_metrics,
)
from moeplan.search.colocated.evaluate import ServeResult
from moeplan.search.colocated.search import Certificate, SpaceCandidate, search_space
from moeplan.search.colocated.space import layouts
from moeplan.search.ranking.entries import Entry, Served
from moeplan.search.ranking.family_layouts import entries_of
from moeplan.search.ranking.result import ServeRanking, all_replicas
from moeplan.serve.deployment import of
from moeplan.serve.metrics import SLO
from moeplan.serve.workload.arrivals import ServeWorkload

IDLE_FRACTION = 64  # "a light load": this fraction of the analytic rate estimate


def _entry(c: SpaceCandidate, proposed: dict, result: PlanResult) -> Entry:
    if c.layout in proposed:  # the family's plan, launched as often as the space replicates it
        e = proposed[c.layout]
        launches = max(1, c.replicas // e.replicas)
        plan = e.plan
        if launches > 1:
            plan = replace(plan, details={**plan.details, "replicas": launches})
        return replace(e, plan=plan, replicas=c.replicas)
    lay = c.layout
    s = Layout(
        attn_tp=lay.attn_tp, attn_dp=lay.attn_dp, moe_tp=lay.moe_tp, moe_ep=lay.moe_ep, pp=lay.pp
    )
    plan = Plan(
        family="strategy",
        model=result.model.name,
        cluster=result.cluster.name,
        layout=s.plan_layout(),
        details={"label": s.label, "replicas": c.replicas, "proposed_by": "space search"},
    )
    return Entry(family="strategy", label=s.label, layout=lay, plan=plan, replicas=c.replicas)


def serve_result(
    c: SpaceCandidate,
    workload: ServeWorkload,
    slo: SLO,
    rate_given: bool,
    probe: SteadyProbe | None = None,
) -> ServeResult:
    """``c``'s result: metrics of the steady run at capacity, or at the given rate (``probe``
    when already run)."""
    cap = c.capacity
    assert cap is not None and c.cfg is not None and c.evaluate is not None
    gpus = c.layout.gpus
    if probe is None and not (rate_given and workload.rate is not None):
        probe = c.probe
    elif probe is None:
        probe = steady_probe(
            c.cfg,
            c.evaluate,
            workload,
            slo,
            workload.rate / c.replicas,  # type: ignore[operator]
            requests=workload.num_requests,  # the run at the rate alone, as serve-sim --rate
            replicas=c.replicas,
            window_lifetimes=WINDOW_LIFETIMES,
        )
    if probe is None:  # no rate meets the SLOs: what a light load gets (1/64 of the estimate)
        assert c.estimate is not None
        light = c.estimate.rate_rps / IDLE_FRACTION
        p = steady_probe(
            c.cfg, c.evaluate, workload, slo, light, requests=cap.requests, replicas=c.replicas,
            window_lifetimes=WINDOW_LIFETIMES,
        )  # fmt: skip
        return ServeResult(
            layout=c.layout,
            feasible=True,
            engine=c.cfg,
            metrics=window_metrics(p, gpus, slo),
            overloaded=not p.stable,
            meets_slo=False,
            max_rate_meeting_slo_rps=0.0,
            estimate=c.estimate,
            knobs=c.knobs,
            run=p,
            reason=f"misses the SLOs in steady state even at a light load ({light:.3g} req/s)",
            bound="SLOs unreachable at any rate",
        )
    return ServeResult(
        layout=c.layout,
        feasible=True,
        engine=c.cfg,
        metrics=window_metrics(probe, gpus, slo),
        overloaded=not probe.stable,
        max_rate_meeting_slo_rps=cap.rate_rps,
        meets_slo=probe.meets(slo),
        bound=limit_words(cap.limited_by),
        estimate=c.estimate,
        knobs=c.knobs,
        run=probe,
    )


def served_space(
    result: PlanResult,
    cost: CostModel,
    workload: ServeWorkload,
    slo: SLO,
    *,
    engine: str,
    requests: int,
    rate_given: bool,
    progress: Callable[[str], None] | None = None,
    knob_search: Any = None,
) -> tuple[list[Served], list[tuple[Entry, float]], dict[str, str], Certificate, dict]:
    """Served colocated deployments, those pruned by bound (with the bound per GPU), why a
    family is not served, the certificate, and the winner's capacity record."""
    entries, not_served = entries_of(result)
    proposed: dict[Layout, Entry] = {}
    for e in entries:  # every family served as one instance: colocated layouts
        proposed.setdefault(of(e.layout).visit(colocated=lambda d: d.layout), e)
    space = layouts(result.model, result.cluster)
    space += [lay for lay in proposed if lay not in set(space)]  # e.g. SMIDT micro-batches
    cands, cert = search_space(
        result.model,
        result.cluster,
        cost,
        workload,
        slo,
        engine=engine,
        requests=requests,
        space=space,
        progress=progress,
        knobs_for=_knobs_for(knob_search, cost, result),
    )
    osl = workload.osl.mean
    _require_reachable(cands, slo)
    served, pruned, seen = [], [], set()
    for c in cands:
        if c.capacity is None:  # a layout's best bound only (candidates come by bound)
            if c.bound is not None and c.layout not in seen:
                seen.add(c.layout)
                pruned.append((_entry(c, proposed, result), c.bound_per_gpu(osl)))
            continue
        e = _entry(c, proposed, result)
        r = all_replicas(serve_result(c, workload, slo, rate_given), c.replicas)
        served.append(Served(entry=e, result=r, estimate_tokens_per_s_per_gpu=c.bound_per_gpu(osl)))
    top = cands[0] if cands and cands[0].capacity is not None else None
    record = (
        {}
        if top is None or top.capacity is None
        else {
            **top.capacity.to_dict(osl, top.layout.gpus),
            "layout": top.layout.label,
            "replicas": top.replicas,
            "spare_gpus": top.spare_gpus,
        }
    )
    return served, pruned, not_served, cert, record


def _knobs_for(search: Any, cost: CostModel, result: PlanResult):  # type: ignore[no-untyped-def]
    """Each layout's instance-knob variants: with a search (``search``, a
    :class:`moeplan.search.ranking.rank.KnobSearch`), every variant the engine allows
    (:func:`moeplan.serve.knobs.knob_variants`: the all-to-all backend, two-batch overlap and
    MTP as the disaggregated pools try them), the given knobs fixed — a given ``--a2a``
    resolved for the layout (:func:`moeplan.cost.a2a.moe_backend`; none when a given two-batch
    overlap needs DeepEP and the layout cannot have it); without a search, the engine's
    defaults. Redundant experts are the layout's own here (the space's layouts need none)."""
    from moeplan.cost.a2a import moe_backend
    from moeplan.serve.iteration.instance_knobs import resolve_knobs, with_kv_cache
    from moeplan.serve.knobs import knob_variants

    m, c = result.model, result.cluster

    def knobs(lay: Layout):  # type: ignore[no-untyped-def]
        if search is None:
            return [resolve_knobs(cost.engine, m, c, lay)]
        base = search.base
        if search.a2a is not None:
            backend = moe_backend(search.a2a, cost.engine, m, c, lay.moe_tp, lay.moe_ep)
            if base.tbo and backend != "deepep":
                return []
            base = replace(base, a2a=backend)
        given = search.given | {"redundant_experts"}
        variants = knob_variants(cost.engine, m, c, lay, base, given)
        return [with_kv_cache(kn, cost.engine, m, c) for _, kn in variants]

    return knobs


def _require_reachable(cands: list[SpaceCandidate], slo: SLO) -> None:
    """One line when even a lone request misses the SLOs on every layout: the best lone-request
    TTFT and TPOT any layout reaches."""
    bounded = [c for c in cands if c.bound is not None]
    if not bounded or any(c.bound.rate_rps > 0 for c in bounded):  # type: ignore[union-attr]
        return
    t1 = min(bounded, key=lambda c: c.bound.lone_ttft_s)  # type: ignore[union-attr]
    t2 = min(bounded, key=lambda c: c.bound.lone_tpot_s)  # type: ignore[union-attr]
    assert t1.bound is not None and t2.bound is not None
    limits = ", ".join(
        x
        for x in (
            None
            if slo.ttft_s is None
            else f"TTFT p{slo.percentile:g} <= {slo.ttft_s * 1e3:.4g} ms",
            None
            if slo.tpot_s is None
            else f"TPOT p{slo.percentile:g} <= {slo.tpot_s * 1e3:.4g} ms",
        )
        if x
    )
    raise MoeplanError(
        f"no deployment meets the SLOs ({limits}) at any rate: the best TTFT p"
        f"{slo.percentile:g} any layout reaches is {t1.bound.lone_ttft_s * 1e3:.1f} ms "
        f"({t1.layout.label}, a lone request), the best TPOT is "
        f"{t2.bound.lone_tpot_s * 1e3:.2f} ms ({t2.layout.label})"
    )


def replicated(r: ServeResult, replicas: int) -> ServeResult:
    """One instance's result as ``replicas`` round-robin copies' (totals and rates times
    ``replicas``; per-GPU figures and latencies unchanged)."""
    return all_replicas(r, replicas)


def require_steady(ranking: ServeRanking | dict) -> None:
    """Raise when the measured requests cannot bound the SLO percentile (the colocated
    search's record, or a capacity record): the closest figure, its interval and the request
    count that would bring it within the steady target (the half-width shrinks as
    1/sqrt(requests)). An interval wider than the target with a boundable percentile is
    stated (``steady: false`` in the record, the interval in the explanation), not
    enforced: the 4-stream interval exceeds 5 % at the few hundred requests quick runs use."""
    if isinstance(ranking, dict):
        rec = ranking
    else:  # the colocated search's record: a disaggregated winner's interval is stated only
        rec = ranking.search.get("colocated_capacity") or ranking.search.get("winner_capacity")
        rec = rec or {}
    if not rec or rec.get("steady", True) or rec.get("percentile_boundable", True):
        return
    ci, n = rec["ci95_half_width_rel"], rec["measured_requests"]
    need = math.ceil(n * (ci / CI_TARGET) ** 2)
    raise MoeplanError(
        f"--requests ({n}) is too small for a steady estimate: {rec.get('layout', 'the layout')} "
        f"sustains {rec['output_tokens_per_s_per_gpu']:,.1f} output tokens/s per GPU "
        f"+/- {ci:.1%} (95 %), over the {CI_TARGET:.0%} target; try --requests {need}"
    )
