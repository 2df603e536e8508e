"""Every family's deployments ranked on one serving footing: tokens/s per GPU under SLOs.

``moeplan plan`` first runs each family's own search (:func:`moeplan.planners.rank.plan`:
MixServe's strategy analysis, SMIDT's pipeline partition, FinDEP's disaggregated schedule —
each scored by its paper's own analytic figure). This module then answers the question a user
asks of all of them on the same footing: serving a stream of requests with continuous batching
(:mod:`moeplan.serve.engine`), how many output tokens/s per GPU does each deployment deliver
while its TTFT and TPOT stay within the SLOs?

Steps (decisions the papers leave open, pinned by tests):

1. **Layouts per family.** MixServe: the distinct ``(attn TP×DP, MoE TP×EP, PP)`` layouts of
   its ranked strategies (fused and unfused variants of one layout are the same deployment
   here: the serving iteration model does not price the fused RS-Combine/AG-Dispatch overlap).
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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from moeplan.cost import CostModel
from moeplan.errors import MoeplanError
from moeplan.planners.plan import Plan
from moeplan.planners.rank import Candidate, PlanResult
from moeplan.serve.engine import SimResult, simulate
from moeplan.serve.entries import Entry, Served
from moeplan.serve.iteration import IterationModel, iteration_model
from moeplan.serve.layout import ServeLayout
from moeplan.serve.metrics import SLO, summarize
from moeplan.serve.search import (
    ServeResult,
    analytic_rate,
    engine_config,
    evaluate_layout,
    rank_results,
)
from moeplan.serve.workload import LengthDist, ServeWorkload, generate
from moeplan.specs import ClusterSpec, ModelSpec

OBJECTIVES = ("throughput-per-gpu", "goodput", "min-gpus", "latency")
DEFAULT_KEEP = 6  # layouts simulated after pruning (each costs ~0.3-0.6 s on 2 cores)
MAX_STRATEGY_LAYOUTS = 24  # MixServe layouts estimated (its ranked list, distinct layouts)
IDLE_FRACTION = 64  # "near idle": this fraction of the analytic rate estimate


@dataclass(frozen=True, kw_only=True)
class ServeRanking:
    """The serving answer of ``moeplan plan``: ranked deployments, Pareto front, notes."""

    objective: str
    slo: SLO
    workload: ServeWorkload
    ranked: tuple[Served, ...]
    pruned: tuple[tuple[Entry, float], ...]
    not_served: dict[str, str] = field(default_factory=dict)
    rate_given: bool = True
    """False: no rate was given; each plan's metrics are at its largest SLO-meeting rate."""

    @property
    def winner(self) -> Served:
        return self.ranked[0]

    def pareto(self) -> list[dict[str, Any]]:
        """Simulated points not dominated in (output tokens/s per GPU, tokens/s per user =
        1 / median TPOT)."""
        pts: list[dict[str, Any]] = []
        for s in self.ranked:
            m = s.metrics
            if m is None or not m.tpot_p50_s > 0:
                continue
            pts.append(
                {
                    "label": f"{s.entry.family}: {s.entry.layout_label}",
                    "tokens_per_s_per_gpu": m.output_tokens_per_s_per_gpu,
                    "tokens_per_s_per_user": 1.0 / m.tpot_p50_s,
                    "meets_slo": s.result.meets_slo,
                }
            )
        front = [
            p
            for p in pts
            if not any(
                q["tokens_per_s_per_gpu"] >= p["tokens_per_s_per_gpu"]
                and q["tokens_per_s_per_user"] >= p["tokens_per_s_per_user"]
                and q != p
                and (q["tokens_per_s_per_gpu"], q["tokens_per_s_per_user"])
                != (p["tokens_per_s_per_gpu"], p["tokens_per_s_per_user"])
                for q in pts
            )
        ]
        return sorted(front, key=lambda p: -p["tokens_per_s_per_gpu"])


def strategy_entries(c: Candidate, model: ModelSpec, cluster: ClusterSpec) -> list[Entry]:
    """Distinct layouts of MixServe's ranked strategies (its own order), at most a cap."""
    from moeplan.planners import strategy as st

    out, seen = [], set()
    for r in c.detail.strategies:
        s = r.strategy
        key = (s.attn_tp, s.attn_dp, s.moe_tp, s.moe_ep, s.pp)
        if key in seen:
            continue
        seen.add(key)
        lay = ServeLayout(
            attn_tp=s.attn_tp, attn_dp=s.attn_dp, moe_tp=s.moe_tp, moe_ep=s.moe_ep, pp=s.pp
        )
        plan = st.to_plan(r, model=model.name, cluster=cluster.name)
        out.append(Entry(family="strategy", label=s.label(), layout=lay, plan=plan))
        if len(out) >= MAX_STRATEGY_LAYOUTS:
            break
    return out


def pipeline_entries(c: Candidate) -> list[Entry]:
    """SMIDT's plan as ``pp`` stages with the dominant attention and MoE choice.

    Two readings of DPMoE replication ``d`` of the dominant MoE choice ``(t, e, d)``: as ``d``
    independent replicas (attention DP ``d_a / d`` each; how engines launch it, see
    :mod:`moeplan.planners.pipeline.launchable`) when ``d`` divides the attention DP, and as
    one EP group ``e·d`` wide. Both are estimated; pruning keeps the better (a replica must
    hold all the weights on fewer GPUs, so it may not fit).
    """
    la = c.launchable_as
    if la is not None:  # a one-stage plan that is a colocated layout (pipeline/launchable.py)
        lay = ServeLayout(
            attn_tp=la["attn"]["tp"],
            attn_dp=la["attn"]["dp"],
            moe_tp=la["moe"]["tp"],
            moe_ep=la["moe"]["ep"],
            pp=la.get("pp", 1),
        )
        return [
            Entry(
                family="pipeline",
                label=c.label,
                layout=lay,
                plan=c.plan,
                replicas=int(la.get("replicas", 1)),
            )
        ]
    p = c.detail.plan
    attn: Counter[tuple[int, int]] = Counter()
    moe: Counter[tuple[int, int, int]] = Counter()
    for stage in p.stages:
        for ref, choice in stage.modules:
            if ref.kind == "attn":
                attn[(choice.tp, choice.dpmoe)] += 1
            elif ref.kind == "moe":
                moe[(choice.tp, choice.ep, choice.dpmoe)] += 1
    a_tp, a_dp = attn.most_common(1)[0][0] if attn else (p.r, 1)
    m_tp, m_ep, d = moe.most_common(1)[0][0] if moe else (a_tp, a_dp, 1)
    out = []
    if d > 1 and a_dp % d == 0:
        rep = ServeLayout(attn_tp=a_tp, attn_dp=a_dp // d, moe_tp=m_tp, moe_ep=m_ep, pp=p.pp)
        out.append(Entry(family="pipeline", label=c.label, layout=rep, plan=c.plan, replicas=d))
    lay = ServeLayout(attn_tp=a_tp, attn_dp=a_dp, moe_tp=m_tp, moe_ep=m_ep * d, pp=p.pp)
    out.append(Entry(family="pipeline", label=c.label, layout=lay, plan=c.plan))
    return out


def entries_of(result: PlanResult) -> tuple[list[Entry], dict[str, str]]:
    """Serving layouts of every planned family, and why a family is not served."""
    entries: list[Entry] = []
    not_served: dict[str, str] = {}
    for c in result.candidates:
        if c.family == "strategy":
            entries += strategy_entries(c, result.model, result.cluster)
        elif c.family == "pipeline":
            entries += pipeline_entries(c)
        else:
            not_served[c.family] = (
                "its plan is a prefill batch schedule of disaggregated attention/expert GPUs, "
                "shown with its analytic figure and not ranked; its schedule serves decode "
                "under load as the attention-FFN disaggregated family (afd)"
            )
    return entries, not_served


def _estimate(
    entry: Entry,
    model: ModelSpec,
    cluster: ClusterSpec,
    cost: CostModel,
    workload: ServeWorkload,
    slo: SLO,
    engine: str,
) -> float:
    """Closed-form output tokens/s per GPU of ``entry`` under the TPOT SLO (0 if infeasible)."""
    try:
        ev = IterationModel(model, cluster, cost, entry.layout)
        cfg = engine_config(engine, model, cluster, entry.layout)
    except MoeplanError:
        return 0.0
    est = analytic_rate(ev, cfg, workload.isl.mean, workload.osl.mean, slo)
    return est.rate_rps * workload.osl.mean / entry.layout.gpus


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
    ev = IterationModel(model, cluster, cost, r.layout)
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
) -> ServeRanking:
    """Rank every family's deployments by the serving answer (module docstring)."""
    if objective not in OBJECTIVES:
        raise MoeplanError(f"objective ({objective!r}) must be one of {', '.join(OBJECTIVES)}")
    model, cluster = result.model, result.cluster
    entries, not_served = entries_of(result)
    scored = [(e, _estimate(e, model, cluster, cost, workload, slo, engine)) for e in entries]
    scored.sort(key=lambda es: -es[1])
    chosen = [es for es in scored if es[1] > 0][:keep]
    for fam in {e.family for e, _ in scored}:
        best = next(((e, v) for e, v in scored if e.family == fam and v > 0), None)
        if best is not None and best not in chosen:
            chosen.append(best)
    pruned = tuple(es for es in scored if es not in chosen)
    served = []
    for i, (e, est) in enumerate(chosen):
        if progress:
            progress(f"serving simulation {i + 1}/{len(chosen)}: {e.layout.label}")
        wl = _per_replica(workload, e.replicas)
        r = evaluate_layout(model, cluster, cost, e.layout, wl, slo, engine=engine)
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


def _per_replica(workload: ServeWorkload, replicas: int) -> ServeWorkload:
    """One replica's share of the load (round-robin over ``replicas`` instances)."""
    if replicas == 1:
        return workload
    if workload.concurrency is not None:
        return replace(workload, concurrency=max(1, workload.concurrency // replicas))
    return replace(workload, rate=(workload.rate or 1.0) / replicas)


def _all_replicas(r: ServeResult, replicas: int) -> ServeResult:
    """One replica's result as the whole deployment's: totals and rates times ``replicas``,
    per-GPU figures and latencies unchanged."""
    if replicas == 1 or r.metrics is None:
        return r
    m = r.metrics
    scaled = replace(
        m,
        gpus=m.gpus * replicas,
        requests=m.requests * replicas,
        output_tokens_per_s=m.output_tokens_per_s * replicas,
        total_tokens_per_s=m.total_tokens_per_s * replicas,
        goodput_rps=m.goodput_rps * replicas,
    )
    rate = r.max_rate_meeting_slo_rps
    return replace(
        r, metrics=scaled, max_rate_meeting_slo_rps=None if rate is None else rate * replicas
    )


def _capacity_per_gpu(r: ServeResult, workload: ServeWorkload) -> float:
    """Output tokens/s per GPU at the largest rate meeting the SLOs (0 when unknown)."""
    rate = r.max_rate_meeting_slo_rps or 0.0
    gpus = r.metrics.gpus if r.metrics is not None else r.layout.gpus
    return rate * workload.osl.mean / gpus


def no_plan_meets(ranking: ServeRanking) -> str:
    """The one-line error when no deployment meets the SLOs: the best any plan reaches."""
    done = [s for s in ranking.ranked if s.metrics is not None]
    slo = ranking.slo
    pct = int(slo.percentile)
    if not done:
        return "no deployment could be simulated: " + "; ".join(
            f"{s.entry.label}: {s.result.reason}" for s in ranking.ranked[:3]
        )
    ttft = min(done, key=lambda s: s.metrics.at_percentile(slo.percentile)[0])  # type: ignore[union-attr]
    tpot = min(done, key=lambda s: s.metrics.at_percentile(slo.percentile)[1])  # type: ignore[union-attr]
    t1 = ttft.metrics.at_percentile(slo.percentile)[0]  # type: ignore[union-attr]
    t2 = tpot.metrics.at_percentile(slo.percentile)[1]  # type: ignore[union-attr]
    limits = ", ".join(
        x
        for x in (
            None if slo.ttft_s is None else f"TTFT p{pct} <= {slo.ttft_s * 1e3:.4g} ms",
            None if slo.tpot_s is None else f"TPOT p{pct} <= {slo.tpot_s * 1e3:.4g} ms",
        )
        if x
    )
    return (
        f"no deployment meets the SLOs ({limits}) at rate {ranking.workload.rate} req/s: "
        f"the best TTFT p{pct} any plan reaches is {t1 * 1e3:.0f} ms "
        f"({ttft.entry.layout_label}), the best TPOT p{pct} is {t2 * 1e3:.1f} ms "
        f"({tpot.entry.layout_label})"
    )


def describe(d: LengthDist) -> str:
    """``2048``, ``uniform 128..1024`` or ``lognormal mean 512 (sigma 0.8)`` tokens."""
    if d.kind == "fixed":
        return f"{d.mean}"
    if d.kind == "uniform":
        return f"uniform {d.low}..{d.high}"
    return f"{d.kind} mean {d.mean} (sigma {d.sigma:g})"


def serve_explanation(ranking: ServeRanking, result: PlanResult) -> list[str]:
    """Plain sentences: who wins on the serving footing, what bounds it, how close the SLOs
    are, and how the families' own analytic figures compare."""
    from moeplan.planners.rank import FAMILY_NAMES

    w = ranking.winner
    m = w.metrics
    if m is None:
        return [f"No deployment could be simulated: {w.result.reason}"]
    slo, pct = ranking.slo, ranking.slo.percentile
    ttft, tpot = m.at_percentile(pct)
    at = (
        "at a given load"
        if ranking.rate_given
        else f"at its largest SLO-meeting rate, {w.result.max_rate_meeting_slo_rps:.2f} req/s"
    )
    out = [
        f"The {FAMILY_NAMES[w.entry.family]} deployment {w.entry.layout_label} wins on "
        f"{w.entry.gpus} GPUs: {m.output_tokens_per_s_per_gpu:,.1f} output tokens/s "
        f"per GPU ({m.output_tokens_per_s:,.0f} in all) {at} (simulated, "
        f"{m.requests} requests)."
    ]
    out.append(
        f"It is bound by {w.result.bound}. SLO use at p{pct:g}: TTFT "
        f"{ttft * 1e3:.0f} of {slo.ttft_s * 1e3:.0f} ms ({ttft / slo.ttft_s:.0%}), "  # type: ignore[operator]
        f"TPOT {tpot * 1e3:.1f} of {slo.tpot_s * 1e3:.0f} ms ({tpot / slo.tpot_s:.0%}); "  # type: ignore[operator]
        f"KV cache {m.kv_utilisation:.0%} used on average, {m.preemptions} preemptions."
    )
    if len(ranking.ranked) > 1 and ranking.ranked[1].metrics is not None:
        r = ranking.ranked[1]
        rm = r.metrics
        assert rm is not None
        ratio = (
            m.output_tokens_per_s_per_gpu / rm.output_tokens_per_s_per_gpu
            if rm.output_tokens_per_s_per_gpu
            else float("inf")
        )
        out.append(
            f"Runner-up: {FAMILY_NAMES[r.entry.family]} {r.entry.layout_label} at "
            f"{rm.output_tokens_per_s_per_gpu:,.1f} output tokens/s per GPU"
            f"{'' if r.result.meets_slo else ' (misses the SLOs)'}; the winner is "
            f"{ratio:.2f}x per GPU."
        )
    a = result.winner
    if a.family != w.entry.family:
        out.append(
            f"By the families' own analytic figures (prefill of one batch) "
            f"{FAMILY_NAMES[a.family]} ({a.label}) leads; under load with both SLOs the "
            f"ranking differs — the serving simulation decides."
        )
    return out


CURVE_FRACTIONS = (0.25, 0.5, 0.75, 1.0, 1.25)  # of each plan's largest SLO-meeting rate
CURVE_REQUESTS = 300  # requests per point of a latency-rate curve


def _operating_workload(ranking: ServeRanking, s: Served) -> ServeWorkload:
    """The load ``s``'s metrics were taken at: the user's, else its largest SLO rate."""
    rate = s.result.max_rate_meeting_slo_rps
    if not ranking.rate_given and rate:
        return ranking.workload.with_rate(rate)
    return ranking.workload


def serving_curves(
    ranking: ServeRanking,
    model: ModelSpec,
    cluster: ClusterSpec,
    cost: CostModel,
    *,
    top: int = 3,
    fractions: tuple[float, ...] = CURVE_FRACTIONS,
) -> dict[str, Any]:
    """For the ``top`` simulated plans: per-request TTFT/TPOT at their operating point, and
    p90 TTFT/TPOT against the arrival rate (``fractions`` of the largest SLO-meeting rate;
    open-loop workloads only). Same seed at every rate (common random numbers)."""
    from moeplan.serve.metrics import request_latencies

    latency: dict[str, dict[str, list[float]]] = {}
    rate_curves: dict[str, list[dict[str, float]]] = {}
    done = [x for x in ranking.ranked if x.result.engine is not None][:top]
    for x in done:
        label = f"{x.entry.family}: {x.entry.layout_label}"
        res = _rerun(x, _operating_workload(ranking, x), model, cluster, cost)
        ttft, tpot, _ = request_latencies(res)
        latency[label] = {
            "ttft_s": [float(v) for v in ttft],
            "tpot_s": [float(v) for v in tpot if v == v],
        }
        base = x.result.max_rate_meeting_slo_rps or ranking.workload.rate
        if not base or ranking.workload.concurrency is not None:
            continue
        probe = replace(
            ranking.workload, num_requests=min(CURVE_REQUESTS, ranking.workload.num_requests)
        )
        pts = []
        for f in fractions:
            m = summarize(
                _rerun(x, probe.with_rate(base * f), model, cluster, cost),
                x.result.layout.gpus,
                ranking.slo,
            )
            pts.append(
                {
                    "rate_rps": base * f,
                    "ttft_p90_s": m.ttft_p90_s,
                    "tpot_p90_s": m.tpot_p90_s,
                    "output_tokens_per_s_per_gpu": m.output_tokens_per_s_per_gpu,
                }
            )
        rate_curves[label] = pts
    return {"latency": latency, "rate": rate_curves}


def serving_trace(
    ranking: ServeRanking, model: ModelSpec, cluster: ClusterSpec, cost: CostModel
) -> dict[str, Any]:
    """Chrome trace of the winner's simulated run (one event per engine iteration), at the
    load its metrics were taken: the user's rate or concurrency, else its largest SLO rate."""
    from moeplan.serve.trace import serve_trace

    w = ranking.winner
    r = w.result
    meta: dict[str, Any] = {
        "family": w.entry.family,
        "label": w.entry.label,
        "layout": w.entry.layout_label,
    }
    if r.engine is None:
        return {"traceEvents": [], "otherData": {**meta, "note": r.reason}}
    wl = ranking.workload
    if not ranking.rate_given and r.max_rate_meeting_slo_rps:
        wl = wl.with_rate(r.max_rate_meeting_slo_rps)
    meta["rate_rps"] = wl.rate
    meta["requests"] = wl.num_requests
    res = _rerun(w, wl, model, cluster, cost)
    return serve_trace(res, label=w.entry.layout_label, metadata=meta)


def _rerun(
    x: Served, wl: ServeWorkload, model: ModelSpec, cluster: ClusterSpec, cost: CostModel
) -> SimResult:
    """Simulate ``x``'s deployment on ``wl`` again (disaggregated pools run their own pools:
    :class:`moeplan.serve.disagg.DisaggResult`)."""
    r = x.result
    rerun = getattr(r, "rerun", None)
    if rerun is not None:
        return rerun(wl)
    assert r.engine is not None
    wl = _per_replica(wl, x.entry.replicas)  # one instance of a replicated deployment
    return simulate(generate(wl), r.engine, iteration_model(model, cluster, cost, r.layout))


def served_plan(s: Served, ranking: ServeRanking) -> Plan:
    """The winner's :class:`Plan` with its serving prediction in ``predicted.serving``."""
    serving = {"objective": ranking.objective, "slo": ranking.slo.to_dict(), **s.summary()}
    return replace(s.entry.plan, predicted={**s.entry.plan.predicted, "serving": serving})
