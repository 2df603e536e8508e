"""The load sweep of every deployment a ranking kept: steady operating points, the Pareto
front in (output tokens/s per user, output tokens/s per GPU), and the latency-vs-load curves.

Every point is a steady run of the capacity search's own machinery
(:func:`moeplan.search.capacity.slo.steady_probe`: warm-up and drain excluded, round-robin
feed, queue stability checked), so each equals a ``serve-sim`` rerun of that point:

- at a fraction of a deployment's SLO-bound capacity (:data:`SWEEP_FRACTIONS`), the run
  ``serve-sim --rate R`` makes (:func:`point_probe`: the probe's warm-up and drain sized at
  ``R`` itself, the plan's measured requests and seed);
- at the capacity itself, the ranking's verdict run (``serve-sim`` without ``--rate``
  reports the same run): the point the explanation and the JSON ``winner`` state.

Load is swept by arrival rate (open loop); in steady state the concurrency is the rate x the
mean request lifetime (Little's law), given with each point as ``concurrency``.
:data:`OVERLOAD_FRACTION` adds one point above capacity to the curves only (it misses the
SLOs: where the curve crosses them).

Tokens/s per user is 1 / median TPOT of the measured requests (a user's decode speed);
tokens/s per GPU is the steady output rate over the deployment's GPUs. The front keeps the
points of stable queues that no other stable point beats on both axes.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from moeplan.cost import CostModel
from moeplan.search.capacity.slo import (
    WINDOW_LIFETIMES,
    SteadyProbe,
    steady_probe,
    window_metrics,
)
from moeplan.search.job.fanout import fan_out
from moeplan.search.ranking.entries import Served
from moeplan.search.ranking.result import ServeRanking
from moeplan.serve.iteration.batch_grid import GridEvaluator
from moeplan.serve.iteration.model import iteration_model
from moeplan.serve.metrics import SLO, ServeMetrics
from moeplan.serve.workload.arrivals import ServeWorkload
from moeplan.specs import ClusterSpec, ModelSpec

#: fractions of each deployment's SLO-bound capacity the sweep runs (this module's choice:
#: from a lightly loaded engine, fast per user, to the capacity, dense per GPU)
SWEEP_FRACTIONS = (0.1, 0.25, 0.5, 0.75, 0.9)
#: the curves' one point above capacity, where the SLOs break (not an operating point)
OVERLOAD_FRACTION = 1.25
OVERLOAD = "overload"  # the source of the point above capacity


def point_probe(
    x: Served,
    workload: ServeWorkload,
    slo: SLO,
    rate: float,
    model: ModelSpec,
    cluster: ClusterSpec,
    cost: CostModel,
) -> SteadyProbe:
    """The steady run ``serve-sim --rate RATE`` makes of ``x``'s deployment (``rate``: into
    the whole deployment): one colocated instance at its share of a round-robin feed over
    its replicas, or the P/D (AFD) pools as one unit; the measured window spans
    :data:`moeplan.search.capacity.slo.WINDOW_LIFETIMES` at least."""
    from moeplan.search.disagg.pools import DisaggResult
    from moeplan.serve.pools.pd import simulate_pd

    r = x.result
    if isinstance(r, DisaggResult):
        setup = r.setup
        assert setup is not None

        def run(reqs: Any, stop: float | None) -> Any:
            return simulate_pd(reqs, setup, horizon_s=stop).result

        return steady_probe(
            None, None, workload, slo, rate, requests=workload.num_requests, runner=run,
            window_lifetimes=WINDOW_LIFETIMES,
        )  # fmt: skip
    assert r.engine is not None
    reps = x.entry.replicas
    return steady_probe(
        r.engine, rerun_evaluator(x, model, cluster, cost), workload, slo, rate / reps,
        requests=workload.num_requests, replicas=reps, window_lifetimes=WINDOW_LIFETIMES,
    )  # fmt: skip


def rerun_evaluator(
    x: Served, model: ModelSpec, cluster: ClusterSpec, cost: CostModel
) -> GridEvaluator:
    """The iteration prices of colocated ``x``'s reruns: as the search priced its runs (its
    instance knobs, decode batches on the batch grid), so a curve point is the deployment
    the ranking measured."""
    return GridEvaluator(
        iteration_model(model, cluster, cost, x.result.layout, knobs=x.result.knobs)
    )


def instance_gpus(x: Served) -> int:
    """GPUs of the unit one probe simulates: one colocated instance, or the whole pools."""
    from moeplan.search.disagg.pools import DisaggResult

    return x.entry.gpus if isinstance(x.result, DisaggResult) else x.result.layout.gpus


def label_of(x: Served) -> str:
    """The deployment's label in the sweep, the curves and the report: family and layout."""
    return f"{x.entry.family}: {x.entry.layout_label}"


def point(
    x: Served, m: ServeMetrics, rate: float, stable: bool, source: str, slo: SLO, lifetime: float
) -> dict[str, Any]:
    """One operating point of ``x`` (``m``: the steady window's metrics at ``rate`` req/s
    into the deployment; ``lifetime``: the window's mean request lifetime, seconds)."""
    cfg = x.result.engine
    ttft, tpot = m.at_percentile(slo.percentile)
    meets = stable and (slo.ttft_s is None or ttft <= slo.ttft_s)
    meets = meets and (slo.tpot_s is None or tpot <= slo.tpot_s)
    return {
        "label": label_of(x),
        "family": x.entry.family,
        "deployment": x.entry.layout_label,
        "gpus": x.entry.gpus,
        "rate_rps": rate,
        "concurrency": rate * lifetime,
        "batch_cap": None if cfg is None else cfg.max_running,
        "tokens_per_s_per_user": 1.0 / m.tpot_p50_s if m.tpot_p50_s > 0 else 0.0,
        "tokens_per_s_per_gpu": m.output_tokens_per_s_per_gpu,
        "ttft_p50_s": m.ttft_p50_s,
        "tpot_p50_s": m.tpot_p50_s,
        "ttft_p90_s": m.ttft_p90_s,
        "tpot_p90_s": m.tpot_p90_s,
        f"ttft_p{slo.percentile:g}_s": ttft,
        f"tpot_p{slo.percentile:g}_s": tpot,
        "stable": stable,
        "meets_slo": meets,
        "source": source,
    }


def _probe_point(
    x: Served,
    workload: ServeWorkload,
    slo: SLO,
    rate: float,
    model: ModelSpec,
    cluster: ClusterSpec,
    cost: CostModel,
    source: str = "serve-sim --rate",
) -> dict[str, Any]:
    """:func:`point` of the ``serve-sim --rate`` run at ``rate``."""
    p = point_probe(x, workload, slo, rate, model, cluster, cost)
    m = window_metrics(p, instance_gpus(x), slo)
    return point(x, m, rate, p.stable, source, slo, _lifetime(p))


def _lifetime(p: SteadyProbe) -> float:
    """Mean arrival-to-finish seconds of a probe's measured requests (nan when none ended)."""
    import numpy as np

    r, w = p.res, p.window
    life = r.finish_s[w] - r.arrival_s[w]
    life = life[np.isfinite(life)]
    return float(life.mean()) if len(life) else float("nan")


def verdict_point(x: Served, slo: SLO) -> dict[str, Any] | None:
    """The ranking's own run of ``x`` at its SLO-bound capacity, as a point (None when the
    deployment meets the SLOs at no rate)."""
    m, rate = x.metrics, x.result.max_rate_meeting_slo_rps
    if m is None or not rate:
        return None
    probe = x.result.run
    life = _lifetime(probe) if probe is not None else m.e2e_p50_s
    return point(x, m, rate, not x.result.overloaded, "capacity (the verdict's run)", slo, life)


def given_load_points(ranking: ServeRanking) -> list[dict[str, Any]]:
    """Each simulated deployment's run at the user's load (a given rate or concurrency), as a
    point: the front of a ranking that has no sweep."""
    out = []
    for x in ranking.ranked:
        m = x.metrics
        if m is None:
            continue
        w = ranking.workload
        rate = w.rate if w.concurrency is None else m.requests / max(m.duration_s, 1e-12)
        probe = x.result.run
        life = _lifetime(probe) if probe is not None else m.e2e_p50_s
        out.append(point(x, m, rate or 0.0, not x.result.overloaded, "the given load",
                         ranking.slo, life))  # fmt: skip
    return out


def sweep(
    ranking: ServeRanking,
    model: ModelSpec,
    cluster: ClusterSpec,
    cost: CostModel,
    *,
    fractions: tuple[float, ...] = (*SWEEP_FRACTIONS, OVERLOAD_FRACTION),
) -> dict[str, list[dict[str, Any]]]:
    """Every simulated deployment's points, by label, in increasing rate: its runs at
    ``fractions`` of its capacity and its verdict run at the capacity (module docstring).
    Open-loop rankings at SLO-bound capacity only (else {}: the points are taken at each
    deployment's own capacity)."""
    if ranking.rate_given or ranking.workload.concurrency is not None:
        return {}
    w, slo = ranking.workload, ranking.slo
    work: dict[str, Callable[[], list[dict[str, Any]]]] = {}
    for x in ranking.ranked:
        v = verdict_point(x, slo)
        if v is None:
            continue
        cap = v["rate_rps"]
        runs = [
            partial(_probe_point, x, w, slo, f * cap, model, cluster, cost,
                    OVERLOAD if f > 1 else "serve-sim --rate")
            for f in fractions
        ]  # fmt: skip
        work[label_of(x)] = partial(_points, runs, v)
    got = fan_out(list(work.values()))
    return dict(zip(work, got, strict=True))


def _points(runs: list[Callable[[], dict[str, Any]]], verdict: dict[str, Any]) -> list[dict]:
    """One deployment's points (its runs, in order, here: they price the same shapes), with
    the verdict's, by rate."""
    return sorted([*(r() for r in runs), verdict], key=lambda p: p["rate_rps"])


def front(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stable points no other stable point beats on both tokens/s per user and tokens/s
    per GPU (ties kept once), by decreasing tokens/s per GPU."""
    pts = [p for p in points if p["stable"] and p["tokens_per_s_per_user"] > 0]
    out = []
    for p in pts:
        a, b = p["tokens_per_s_per_user"], p["tokens_per_s_per_gpu"]
        if any(
            q["tokens_per_s_per_user"] >= a
            and q["tokens_per_s_per_gpu"] >= b
            and (q["tokens_per_s_per_user"], q["tokens_per_s_per_gpu"]) != (a, b)
            for q in pts
        ):
            continue
        if all((a, b) != (o["tokens_per_s_per_user"], o["tokens_per_s_per_gpu"]) for o in out):
            out.append(p)
    return sorted(out, key=lambda p: -p["tokens_per_s_per_gpu"])


def all_points(swept: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every point of the sweep that is an operating point (at or below capacity)."""
    return [p for pts in swept.values() for p in pts if p["source"] != OVERLOAD]
