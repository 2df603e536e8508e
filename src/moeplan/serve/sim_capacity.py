"""The SLO-bound capacity of one given layout: what ``moeplan serve-sim`` reports, by the
same steps as the deployment-space search (:mod:`moeplan.serve.space_search`): engine knobs
by the analytic estimate (or as given), the capacity upper bound as the search's starting
rate, :func:`moeplan.serve.capacity.slo_capacity` with its 95 % interval."""

from __future__ import annotations

from moeplan.cost import CostModel
from moeplan.errors import MoeplanError
from moeplan.serve.capacity import slo_capacity
from moeplan.serve.layout import ServeLayout
from moeplan.serve.memo_cost import MemoCost
from moeplan.serve.metrics import SLO
from moeplan.serve.space_search import SpaceCandidate, prepare
from moeplan.serve.workload import ServeWorkload
from moeplan.specs import ClusterSpec, ModelSpec


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
) -> SpaceCandidate:
    """``layout`` with its knobs, bound and capacity (raises when it cannot serve)."""
    c = SpaceCandidate(layout=layout, replicas=replicas, spare_gpus=0)
    prepare(c, model, cluster, MemoCost(cost), workload, slo, engine, chunk_tokens, max_running)  # type: ignore[arg-type]
    if c.bound is None:
        raise MoeplanError(c.reason)
    c.capacity, c.probe = slo_capacity(
        c.cfg,
        c.evaluate,
        workload,
        slo,
        guess_rps=c.bound.rate_rps,
        requests=requests,
        replicas=replicas,
        ref_rps=c.bound.rate_rps,
    )
    return c
