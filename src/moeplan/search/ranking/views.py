"""What ``moeplan plan`` and its report show of a serving ranking (:mod:`moeplan.search.ranking.rank`).

:func:`no_plan_meets` is the one-line error when no deployment meets the SLOs (the best TTFT
and TPOT any plan reaches); :func:`serve_explanation` the plain sentences (who wins, what
bounds it, how much of each SLO it uses, the runner-up, and whether the families' own analytic
figures agree); :func:`describe` a length distribution in words. :func:`serving_curves` and
:func:`serving_trace` simulate the top plans again — at their operating point, and at
fractions of their largest SLO-meeting rate with the same seed (common random numbers) — for
the report's latency and rate charts and the winner's Chrome trace. :func:`served_plan` is
the winner's :class:`~moeplan.planners.plan.Plan` with its serving prediction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from moeplan.cost import CostModel
from moeplan.planners.families import POOLED_FAMILIES
from moeplan.planners.plan import Plan
from moeplan.planners.rank import PlanResult
from moeplan.search.job.fanout import fan_out
from moeplan.search.ranking.entries import Served
from moeplan.search.ranking.result import ServeRanking, _per_replica
from moeplan.search.ranking.sweep import (
    all_points,
    front,
    given_load_points,
    label_of,
    rerun_evaluator,
    sweep,
)
from moeplan.serve.engine.run import SimResult, simulate
from moeplan.serve.workload.arrivals import LengthDist, ServeWorkload, generate
from moeplan.specs import ClusterSpec, ModelSpec


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
        f"no deployment meets the SLOs ({limits}) at {_load(ranking.workload)}: "
        f"the best TTFT p{pct} any plan reaches is {t1 * 1e3:.0f} ms "
        f"({ttft.entry.layout_label}), the best TPOT p{pct} is {t2 * 1e3:.1f} ms "
        f"({tpot.entry.layout_label})"
    )


def _load(w: ServeWorkload) -> str:
    """The load a ranking ran at: ``rate 4 req/s`` or ``64 clients in a closed loop``."""
    if w.concurrency is not None:
        think = f", {w.think_s * 1e3:g} ms mean think time" if w.think_s else ""
        return f"{w.concurrency} clients in a closed loop{think}"
    return f"rate {w.rate:g} req/s"


def describe(d: LengthDist) -> str:
    """``2048``, ``uniform 128..1024`` or ``lognormal median 512 (sigma 0.8, mean 703)``
    tokens."""
    if d.kind == "fixed":
        return f"{d.mean}"
    if d.kind == "uniform":
        return f"uniform {d.low}..{d.high}"
    return f"{d.kind} median {d.median} (sigma {d.sigma:g}, mean {d.mean})"


def serve_explanation(
    ranking: ServeRanking, result: PlanResult, step_bound: str | None = None
) -> list[str]:
    """Plain sentences: who wins on the serving footing, what bounds it, how close the SLOs
    are, and how the families' own analytic figures compare. ``step_bound``: the largest part
    of the winner's engine step, said beside the limit its load hits first."""
    from moeplan.planners.rank import FAMILY_NAMES

    w = ranking.winner
    m = w.metrics
    if m is None:
        return [f"No deployment could be simulated: {w.result.reason}"]
    slo, pct = ranking.slo, ranking.slo.percentile
    ttft, tpot = m.at_percentile(pct)
    out = [
        lead_sentence(ranking),
        f"Simulated in steady state over {m.requests} measured requests: "
        f"{m.output_tokens_per_s:,.0f} output tokens/s in all.",
    ]
    out += _capacity_sentences(ranking, result)
    step = f"Within each engine step most time goes to {step_bound}. " if step_bound else ""
    out.append(
        f"{step}SLO use at p{pct:g}: TTFT "
        f"{ttft * 1e3:.0f} of {slo.ttft_s * 1e3:.0f} ms ({ttft / slo.ttft_s:.0%}), "  # type: ignore[operator]
        f"TPOT {tpot * 1e3:.1f} of {slo.tpot_s * 1e3:.0f} ms ({tpot / slo.tpot_s:.0%}); "  # type: ignore[operator]
        f"KV cache {m.kv_utilisation:.0%} used on average{_fraction(w.result)}, "
        f"{m.preemptions} preemptions."
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
    both = side_by_side(ranking)
    if both is not None:
        out.append(f"Aggregated against disaggregated: the {both['winner']} one wins: "
                   f"{both['reason']}.")  # fmt: skip
    a = result.winner
    if a.family != w.entry.family:
        out.append(
            f"The analytic table below (each family's own figure for one prefill batch) "
            f"ranks {FAMILY_NAMES[a.family]} first; under load with both SLOs the ranking "
            f"differs — the serving simulation decides."
        )
    return out


def lead_sentence(ranking: ServeRanking) -> str:
    """The answer first, in one sentence: the deployment, its figures and what limits it (the
    winner's ``bound``, :func:`moeplan.search.capacity.slo.limit_words`: the same words as
    the serving table's and the JSON's ``limits``)."""
    from moeplan.planners.rank import FAMILY_NAMES

    w = ranking.winner
    m = w.metrics
    if m is None:
        return f"No deployment could be simulated: {w.result.reason}"
    pct = ranking.slo.percentile
    ttft, tpot = m.at_percentile(pct)
    at = (
        "at the given load"
        if ranking.rate_given
        else f"at {w.result.max_rate_meeting_slo_rps:.2f} req/s (its largest SLO-meeting rate)"
    )
    return (
        f"Deploy {w.entry.layout_label}, {FAMILY_NAMES[w.entry.family]}, on "
        f"{w.entry.gpus} GPUs: {m.output_tokens_per_s_per_gpu:,.1f} output tokens/s per GPU "
        f"{at}, TTFT p{pct:g} {ttft * 1e3:,.0f} ms, TPOT p{pct:g} {tpot * 1e3:.1f} ms; "
        f"limited by {w.result.bound}."
    )


def side_by_side(ranking: ServeRanking) -> dict[str, Any] | None:
    """The best aggregated (colocated) and the best disaggregated (P/D, AFD) deployment of
    the ranking, each with its figures, and the reason the one ranked first wins (None when
    the ranking kept only one kind)."""
    agg = next((x for x in ranking.ranked if x.entry.family not in POOLED_FAMILIES
                and x.metrics is not None), None)  # fmt: skip
    dis = next((x for x in ranking.ranked if x.entry.family in POOLED_FAMILIES
                and x.metrics is not None), None)  # fmt: skip
    if agg is None or dis is None:
        return None
    pct = ranking.slo.percentile

    def row(x: Served) -> dict[str, Any]:
        m = x.metrics
        assert m is not None
        ttft, tpot = m.at_percentile(pct)
        return {
            "family": x.entry.family,
            "deployment": x.entry.layout_label,
            "gpus": x.entry.gpus,
            "meets_slo": x.result.meets_slo,
            "max_rate_meeting_slo_rps": x.result.max_rate_meeting_slo_rps,
            "output_tokens_per_s_per_gpu": m.output_tokens_per_s_per_gpu,
            "tokens_per_s_per_user": 1.0 / m.tpot_p50_s if m.tpot_p50_s > 0 else 0.0,
            f"ttft_p{pct:g}_s": ttft,
            f"tpot_p{pct:g}_s": tpot,
            "limited_by": x.result.bound,
        }

    first = ranking.ranked.index(agg) < ranking.ranked.index(dis)
    win, lose = (agg, dis) if first else (dis, agg)
    a, b = row(win), row(lose)
    if not lose.result.meets_slo:
        why = f"{b['deployment']} misses the SLOs at every rate simulated"
    else:
        ratio = a["output_tokens_per_s_per_gpu"] / max(b["output_tokens_per_s_per_gpu"], 1e-12)
        why = (
            f"{a['deployment']} serves {ratio:.2f}x the output tokens/s per GPU of "
            f"{b['deployment']} at their largest SLO-meeting rates "
            f"({a['output_tokens_per_s_per_gpu']:,.0f} against "
            f"{b['output_tokens_per_s_per_gpu']:,.0f}); the other is limited by "
            f"{b['limited_by']}"
        )
    return {
        "aggregated": row(agg),
        "disaggregated": row(dis),
        "winner": "aggregated" if first else "disaggregated",
        "reason": why,
    }


def _fraction(result: Any) -> str:
    """`` (memory fraction F)`` of the engine's KV pool the winner was sized at, if any."""
    f = result.engine.mem_fraction if result.engine is not None else None
    return "" if f is None else f" (pool at engine memory fraction {f:g})"


def _capacity_sentences(ranking: ServeRanking, result: PlanResult) -> list[str]:
    """The winner's confidence interval, the copies that fill the cluster, the certificate."""
    out = []
    rec = ranking.search.get("winner_capacity") or {}
    w = ranking.winner
    if rec and rec.get("layout") == w.entry.layout.label and not ranking.rate_given:
        lo, hi = rec["ci95_rps_per_instance"]
        unit = (  # a pooled deployment is fed as one: its rate is all its pools' together
            "per deployment (its pools together)"
            if w.entry.family in POOLED_FAMILIES
            else "per instance"
        )
        out.append(
            f"Capacity: {rec['rate_rps_per_instance']:.2f} req/s {unit} (95 % interval "
            f"{lo:.2f}..{hi:.2f}, +/-{rec['ci95_half_width_rel']:.1%})."
        )
    n = result.cluster.num_gpus
    g = w.entry.gpus
    m = w.metrics
    if m is not None and g < n:
        k = n // g
        fill = (
            f"one copy fits: {m.output_tokens_per_s:,.0f} output tokens/s for the cluster, "
            f"{n - g} GPU{'' if n - g == 1 else 's'} stay idle"
            if k == 1
            else f"{k} copies fill it: {k * g} GPUs, {k * m.output_tokens_per_s:,.0f} output "
            f"tokens/s in all{f', {n - k * g} GPU(s) idle' if n > k * g else ''}"
        )
        out.append(f"It uses {g} of the cluster's {n} GPUs ({fill}).")
    if ranking.certificate_sentence:
        out.append(ranking.certificate_sentence)
    return out


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
) -> dict[str, Any]:
    """Per-request TTFT/TPOT of the ``top`` simulated plans at their operating point
    (``latency``); the load sweep of every simulated plan (``sweep``,
    :mod:`moeplan.search.ranking.sweep`: steady runs at fractions of its SLO-bound capacity
    and its verdict run at the capacity), its Pareto ``front``, and the ``top`` plans'
    latency-vs-rate curves drawn from those same points (``rate``): at the capacity a curve
    shows the verdict's own figures. Open-loop workloads at SLO-bound capacity only have a
    sweep; a given rate or concurrency keeps ``rate`` and ``sweep`` empty and ``front`` of
    the ranking's own runs at that load (:func:`given_load_points`)."""

    work: dict[str, Callable[[], dict[str, list[float]]]] = {}
    done = [x for x in ranking.ranked if x.result.engine is not None][:top]
    for x in done:
        kept = operating_run(x)
        work[label_of(x)] = (
            partial(_latencies, kept)
            if kept is not None
            else partial(_rerun_latencies, x, _operating_workload(ranking, x), model, cluster, cost)
        )
    # each plan's runs together (they price the same deployment: one process prices its new
    # shapes once), the plans side by side when the caller runs workers
    latency = dict(zip(work, fan_out(list(work.values())), strict=True))
    swept = sweep(ranking, model, cluster, cost)
    return {
        "latency": latency,
        "rate": {
            label: [_curve_point(p) for p in swept[label]] for label in work if label in swept
        },
        "sweep": swept,
        "front": front(all_points(swept) if swept else given_load_points(ranking)),
    }


def _curve_point(p: dict[str, Any]) -> dict[str, Any]:
    """One point of a latency-vs-rate curve: a sweep point's rate, p90s and tokens/s per
    GPU, and whether it is the verdict's run."""
    return {
        "rate_rps": p["rate_rps"],
        "ttft_p90_s": p["ttft_p90_s"],
        "tpot_p90_s": p["tpot_p90_s"],
        "output_tokens_per_s_per_gpu": p["tokens_per_s_per_gpu"],
        "verdict": p["source"].startswith("capacity"),
    }


def _latencies(res: SimResult) -> dict[str, list[float]]:
    """Per-request TTFT and TPOT of ``res`` (TPOT of requests with one output token left
    out)."""
    from moeplan.serve.metrics import request_latencies

    ttft, tpot, _ = request_latencies(res)
    return {"ttft_s": [float(v) for v in ttft], "tpot_s": [float(v) for v in tpot if v == v]}


def _rerun_latencies(
    x: Served, wl: ServeWorkload, model: ModelSpec, cluster: ClusterSpec, cost: CostModel
) -> dict[str, list[float]]:
    """:func:`_latencies` of ``x`` simulated again on ``wl``."""
    return _latencies(_rerun(x, wl, model, cluster, cost))


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
    probe = r.run
    if probe is not None:  # the steady run the metrics came from (warm-up and drain included)
        meta["rate_rps_per_instance"] = probe.rate
        meta["requests"] = len(probe.res.arrival_s)
        meta["measured_requests"] = len(probe.res.arrival_s[probe.window])
        return serve_trace(probe.res, label=w.entry.layout_label, metadata=meta)
    wl = ranking.workload
    if not ranking.rate_given and r.max_rate_meeting_slo_rps:
        wl = wl.with_rate(r.max_rate_meeting_slo_rps)
    meta["rate_rps"] = wl.rate
    meta["requests"] = wl.num_requests
    res = _rerun(w, wl, model, cluster, cost)
    return serve_trace(res, label=w.entry.layout_label, metadata=meta)


def operating_run(x: Served) -> SimResult | None:
    """The measured window of the steady run ``x``'s metrics came from (one instance), or
    None when the result keeps no run (a disaggregated deployment reruns its pools)."""
    probe = x.result.run
    if probe is None:
        return None
    r, w = probe.res, probe.window
    return replace(r, arrival_s=r.arrival_s[w], admit_s=r.admit_s[w],
                   first_token_s=r.first_token_s[w], finish_s=r.finish_s[w], isl=r.isl[w],
                   osl=r.osl[w])  # fmt: skip


def _rerun(
    x: Served, wl: ServeWorkload, model: ModelSpec, cluster: ClusterSpec, cost: CostModel
) -> SimResult:
    """Simulate ``x``'s deployment on ``wl`` again (disaggregated pools run their own pools:
    :class:`moeplan.search.disagg.pools.DisaggResult`)."""
    r = x.result
    pools = r.rerun(wl)
    if pools is not None:
        return pools
    assert r.engine is not None
    wl = _per_replica(wl, x.entry.replicas)  # one instance of a replicated deployment
    return simulate(generate(wl), r.engine, rerun_evaluator(x, model, cluster, cost))


def served_plan(s: Served, ranking: ServeRanking) -> Plan:
    """The winner's :class:`Plan` with its serving prediction in ``predicted.serving``."""
    serving = {"objective": ranking.objective, "slo": ranking.slo.to_dict(), **s.summary()}
    return replace(s.entry.plan, predicted={**s.entry.plan.predicted, "serving": serving})
