"""Disaggregated deployments (P/D pools, AFD decode) on the same steady footing as the rest.

:mod:`moeplan.search.disagg` picks each disaggregated family's rate-matched candidates by its
analytic estimate and simulates them; this module replaces that simulation's figure by the
SLO-bound capacity of :mod:`moeplan.search.capacity` — the same definition, request count and
seed as every colocated layout (the whole P/D deployment is one unit: one arrival stream,
dealt round-robin over its prefill instances by :func:`moeplan.serve.pd.simulate_pd`).
"""

from __future__ import annotations

from dataclasses import replace

from moeplan.search.capacity import slo_capacity, steady_probe, window_metrics
from moeplan.search.entries import Served
from moeplan.serve.metrics import SLO
from moeplan.serve.pd import simulate_pd
from moeplan.serve.workload import Requests, ServeWorkload


def steady_disaggregated(
    served: list[Served], workload: ServeWorkload, slo: SLO, *, requests: int, rate_given: bool
) -> tuple[list[Served], dict[int, dict]]:
    """``served`` with each deployment's capacity, metrics and SLO verdict re-taken in
    steady state (at the given rate when there is one), and the capacity record (with its
    95 % interval, :func:`moeplan.search.capacity.slo_capacity`) of the one with the largest
    capacity per GPU, keyed by ``id`` of its result: it may win the ranking, and a winner's
    figure states its interval."""
    out: list[Served] = []
    searched = []
    for s in served:
        r = s.result
        setup = getattr(r, "setup", None)
        if setup is None or not r.feasible or workload.rate is None:
            out.append(s)
            continue

        def run(reqs: Requests, stop: float | None, setup=setup):  # type: ignore[no-untyped-def]
            return simulate_pd(reqs, setup, horizon_s=stop).result

        gpus = setup.layout.gpus
        guess = r.max_rate_meeting_slo_rps or s.estimate_tokens_per_s_per_gpu * gpus / max(
            1, workload.osl.mean
        )
        runs: dict = {}
        cap, probe = slo_capacity(
            None,
            None,
            workload,
            slo,
            guess_rps=max(guess, 1e-3),
            requests=requests,
            runner=run,
            interval=False,
            cache=runs,
        )
        if rate_given:
            probe = steady_probe(
                None, None, workload, slo, workload.rate, requests=requests, runner=run
            )
        metrics = r.metrics if probe is None else window_metrics(probe, gpus, slo)
        res = replace(
            r,
            metrics=metrics,
            max_rate_meeting_slo_rps=cap.rate_rps,
            meets_slo=probe is not None and probe.meets(slo),
            reason=r.reason if probe is not None else "no rate meets the SLOs in steady state",
        )
        out.append(replace(s, result=res))
        searched.append((cap.rate_rps / gpus, cap, res, run, guess, runs))
    if not searched:
        return out, {}
    _, cap, res, run, guess, runs = max(searched, key=lambda t: t[0])
    if cap.rate_rps <= 0:
        return out, {}
    full, _ = slo_capacity(
        None,
        None,
        workload,
        slo,
        guess_rps=max(guess, 1e-3),
        requests=requests,
        runner=run,
        known=(cap.rate_rps, cap.point_high_rps),
        cache=runs,
        full=False,
    )
    gpus = res.setup.layout.gpus  # type: ignore[attr-defined]
    record = {
        **full.to_dict(workload.osl.mean, gpus),
        "layout": res.setup.layout.label,  # type: ignore[attr-defined]
        "replicas": 1,
    }
    return out, {id(res): record}
