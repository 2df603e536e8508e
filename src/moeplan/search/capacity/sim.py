"""The SLO-bound capacity of one given layout: what ``moeplan serve-sim`` reports, by the
same steps as the deployment-space search (:mod:`moeplan.search.colocated.search`): engine knobs
by the analytic estimate (or as given), the same starting rate and warm-up
(:func:`~moeplan.search.colocated.search.search_capacity`), then the 95 % interval."""

from __future__ import annotations

from moeplan.cost import CostModel
from moeplan.errors import MoeplanError
from moeplan.search.colocated.search import SpaceCandidate, prepare, search_capacity, with_interval
from moeplan.search.job.memo_cost import memo_cost
from moeplan.serve.iteration.instance_knobs import InstanceKnobs
from moeplan.serve.layout import ServeLayout
from moeplan.serve.metrics import SLO
from moeplan.serve.workload.arrivals import ServeWorkload
from moeplan.specs import ClusterSpec, ModelSpec, RoutingProfile


def layout_capacity(
    model: ModelSpec,
    cluster: ClusterSpec,
    cost: CostModel,
    layout: ServeLayout,
    workload: ServeWorkload,
    slo: SLO,
    *,
    engine: str,
    requests: int,
    replicas: int = 1,
    chunk_tokens: int | None = None,
    max_running: int | None = None,
    knobs: InstanceKnobs | None = None,
    routing: RoutingProfile | None = None,
) -> SpaceCandidate:
    """``layout`` with its knobs, bound and capacity (raises when it cannot serve)."""
    c = SpaceCandidate(layout=layout, replicas=replicas, spare_gpus=0, knobs=knobs)
    prepare(
        c,
        model,
        cluster,
        memo_cost(cost),
        workload,
        slo,
        engine,
        chunk_tokens,
        max_running,  # type: ignore[arg-type]
        routing=routing,
    )
    if c.bound is None:
        raise MoeplanError(c.reason)
    search_capacity(c, workload, slo, requests)
    assert c.capacity is not None
    if c.capacity.rate_rps > 0:
        with_interval(c, workload, slo, requests)
    return c
