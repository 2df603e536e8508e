"""Disaggregated deployments (P/D pools, AFD decode) on the same steady footing as the rest.

:mod:`moeplan.search.disagg.search` finds each deployment's SLO-bound capacity
(:mod:`moeplan.search.capacity.slo`: the same definition, request count and seed as every
colocated layout; the whole P/D deployment is one unit: one arrival stream, dealt
round-robin over its prefill instances by :func:`moeplan.serve.pools.pd.simulate_pd`). This module
turns a searched deployment into the ranking's result: the metrics of its steady run at
capacity (or at the given rate: a deployment whose queues grow there never meets the SLOs),
and the capacity record (with its 95 % interval) of the one that may win.
"""

from __future__ import annotations

from typing import Any

from moeplan.search.capacity.slo import limit_words, steady_probe, window_metrics
from moeplan.search.disagg.pools import Context, DisaggResult, bound
from moeplan.search.disagg.search import WINDOW_LIFETIMES, PoolCandidate, copies, with_interval


def result_of(pc: PoolCandidate, c: Context, *, rate_given: bool) -> DisaggResult:
    """``pc``'s result (module docstring); ``pc`` has had its capacity searched."""
    k = pc.candidate(c)
    cap = pc.capacity
    assert cap is not None
    w, slo = c.workload, c.slo
    probe = pc.probe
    if rate_given and w.rate is not None:
        # the run at the rate alone (its window sized at that rate, not the search's
        # reference): the same run as the load sweep's point there (moeplan.search.ranking.sweep)
        probe = steady_probe(
            None, None, w, slo, w.rate, requests=w.num_requests, runner=pc.runner(c),
            window_lifetimes=WINDOW_LIFETIMES,
        )  # fmt: skip
    if probe is None:  # no rate meets the SLOs: the metrics of the lowest rate tried
        low = min((r for r in pc.runs if isinstance(r, tuple) and r[0] != "full"),
                  key=lambda r: r[0], default=None)  # fmt: skip
        probe = None if low is None else pc.runs[low]
    return DisaggResult(
        setup=k.setup,
        rho=k.rho,
        layout=k.layout,  # type: ignore[arg-type]
        feasible=True,
        reason="" if cap.rate_rps > 0 else "no rate meets the SLOs in steady state",
        engine=k.setup.decode_cfg,
        metrics=None if probe is None else window_metrics(probe, pc.gpus, slo),
        overloaded=probe is not None and not probe.stable,
        max_rate_meeting_slo_rps=cap.rate_rps,
        meets_slo=probe is not None and cap.rate_rps > 0 and probe.meets(slo),
        bound=limit_words(cap.limited_by, bound(k)),
    )


def capacity_record(
    pc: PoolCandidate, c: Context, requests: int, ahead: tuple | None = None
) -> dict[str, Any]:
    """The capacity record of ``pc`` with its 95 % interval: searched here, or taken from
    ``ahead`` (:func:`moeplan.search.disagg.search.interval_ahead`) when it was searched from ``pc``'s very capacity
    search (the same runs and bracket: the same interval)."""
    if ahead is not None and ahead[0] is pc.capacity:
        pc.capacity, pc.probe, pc.runs = ahead[1:]
    else:
        with_interval(pc, c, requests)
    assert pc.capacity is not None
    n, spare = copies(c, pc)
    return {
        **pc.capacity.to_dict(c.workload.osl.mean, pc.gpus),
        "layout": pc.candidate(c).layout.label,
        "replicas": 1,
        "copies_in_cluster": n,
        "spare_gpus": spare,
    }
