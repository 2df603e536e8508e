"""Every family's deployments ranked on one serving footing: tokens/s per GPU under SLOs.

``moeplan plan`` first runs each family's own search (:func:`moeplan.planners.rank.plan`:
MixServe's strategy analysis, SMIDT's pipeline partition, FinDEP's disaggregated schedule —
each scored by its paper's own analytic figure). This module then answers the question a user
asks of all of them on the same footing: serving a stream of requests with continuous batching
(:mod:`moeplan.serve.engine.run`), how many output tokens/s per GPU does each deployment deliver
while its TTFT and TPOT stay within the SLOs?

Steps (decisions the papers leave open, pinned by tests):

1. **Proposals.** Each family's layouts (:mod:`moeplan.search.ranking.family_layouts`: MixServe's
   ranked strategies, SMIDT's pipeline and its DPMoE replicas) name and plan the layouts of
   the deployment space they propose; they do not decide what is simulated.
2. **Search the space** (:mod:`moeplan.search.colocated.rank`): every colocated layout of
   :mod:`moeplan.search.colocated.space` (and any proposal outside it), replicated to fill the cluster,
   ranked by SLO-bound capacity (:mod:`moeplan.search.capacity.slo`: the largest steady rate
   meeting the SLO percentiles, warm-up and drain excluded, replicas fed round-robin), with
   pruning by an upper bound of capacity and a certificate
   (:mod:`moeplan.search.colocated.search`). Disaggregated serving is ranked as two more families
   (:mod:`moeplan.search.disagg.rank`): ``pd`` and ``afd``, their capacity taken the same way
   (:mod:`moeplan.search.disagg.capacity`).
3. **Rank** by the objective (default: output tokens/s per GPU at SLO-bound capacity); plans
   that meet the SLOs come first. With a given rate each deployment is also run at it in
   steady state: an unstable one (rho >= 1) never meets the SLOs.

Split by concern, every name still importable from here: step 1 is
:mod:`moeplan.search.ranking.family_layouts`, the result type and replica arithmetic
:mod:`moeplan.search.ranking.result`, and what the CLI and report show of a ranking (explanation,
error line, curves, trace, served plan) :mod:`moeplan.search.ranking.views`; this module holds
steps 2–4 (:func:`serve_rank`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from moeplan.cost import CostModel
from moeplan.errors import MoeplanError
from moeplan.planners.rank import PlanResult
from moeplan.search.capacity.slo import DEFAULT_REQUESTS
from moeplan.search.colocated.evaluate import (
    ServeResult,
    evaluate_layout,  # noqa: F401 (re-exported)
    rank_results,
)
from moeplan.search.job.fanout import begin, fan_out, sharing, width
from moeplan.search.ranking.entries import Entry, Served  # noqa: F401 (re-exported)
from moeplan.search.ranking.family_layouts import (  # noqa: F401 (re-exported)
    entries_of,
    pipeline_entries,
    strategy_entries,
)
from moeplan.search.ranking.result import (  # noqa: F401 (re-exported)
    ServeRanking,
    _per_replica,
    all_replicas,
)
from moeplan.search.ranking.views import (  # noqa: F401 (re-exported)
    _operating_workload,
    _rerun,
    describe,
    no_plan_meets,
    serve_explanation,
    served_plan,
    serving_curves,
    serving_trace,
)
from moeplan.serve.iteration.instance_knobs import InstanceKnobs
from moeplan.serve.metrics import SLO
from moeplan.serve.workload.arrivals import ServeWorkload
from moeplan.specs import ClusterSpec, ModelSpec

if TYPE_CHECKING:
    from moeplan.search.disagg.pools import Context

OBJECTIVES = ("throughput-per-gpu", "goodput", "min-gpus", "latency")


def serve_rank(
    result: PlanResult,
    cost: CostModel,
    workload: ServeWorkload,
    slo: SLO,
    *,
    objective: str = "throughput-per-gpu",
    engine: str = "sglang",
    keep: int | None = None,
    rate_given: bool = True,
    progress: Callable[[str], None] | None = None,
    requests: int = DEFAULT_REQUESTS,
    knob_search: KnobSearch | None = None,
    early: Early | None = None,
) -> ServeRanking:
    """Rank every family's deployments by the serving answer (module docstring). ``keep`` is
    accepted for callers of the earlier top-``keep`` pruning and ignored: the search now
    decides what to simulate, with a certificate. ``early``: the first disaggregated
    searches started before the planners ran (:func:`begin_first`), taken when they searched
    what this ranking would."""
    del keep
    if objective not in OBJECTIVES:
        raise MoeplanError(f"objective ({objective!r}) must be one of {', '.join(OBJECTIVES)}")
    from moeplan.search.job.memo_cost import memo_cost

    cost = memo_cost(cost)  # one memo for the colocated and disaggregated searches
    model, cluster = result.model, result.cluster
    cost.pin(model, cluster)  # answers about them priced in a worker come back (fanout.sharing)
    with sharing(cost):
        return _serve_rank(result, cost, workload, slo, objective, engine, rate_given, progress,
                           requests, knob_search, early)  # fmt: skip


def _serve_rank(
    result: PlanResult,
    cost: CostModel,
    workload: ServeWorkload,
    slo: SLO,
    objective: str,
    engine: str,
    rate_given: bool,
    progress: Callable[[str], None] | None,
    requests: int,
    knob_search: KnobSearch | None,
    early: Early | None,
) -> ServeRanking:
    """:func:`serve_rank`'s search, ``cost`` a memo shared with its workers."""
    from moeplan.search.colocated.rank import served_space
    from moeplan.search.disagg.rank import disagg_setup, search_pools
    from moeplan.search.disagg.search import first_searches, space

    model, cluster = result.model, result.cluster
    mtp = (0, 0.0) if knob_search is None else (knob_search.base.mtp, knob_search.base.mtp_accept)
    frac = None if knob_search is None else knob_search.base.mem_fraction
    ctx, fams, _ = disagg_setup(
        result, cost, workload, slo, engine=engine, mtp=mtp, mem_fraction=frac,
        knob_search=knob_search,
    )  # fmt: skip
    # the colocated search and each pooled family's first deployment depend on nothing of
    # each other: side by side (moeplan.search.job.fanout; the colocated one reports progress)
    coloc = partial(_timed, served_space, result, cost, workload, slo, engine=engine,
                    requests=requests, rate_given=rate_given, progress=progress,
                    knob_search=knob_search)  # fmt: skip
    if early is not None and early.matches(ctx, fams):
        found = [coloc(), early.join()]
    else:
        if early is not None:
            early.cancel()
        found = fan_out([
            coloc,
            # beside the colocated search (workers), the best one's interval searched ahead
            *([partial(_timed, first_searches, ctx, fams, requests, interval=width() > 1)]
              if ctx and fams else []),
        ])  # fmt: skip
    # the disaggregated space again here, its pools' bounds from the first searches
    t_space = time.perf_counter()
    bounds, first, ahead = found[1][0] if len(found) > 1 else ({}, None, None)
    cands = space(ctx, fams, bounds) if ctx is not None and fams else None
    t_space = time.perf_counter() - t_space
    served, pruned_list, not_served, cert, record = found[0][0]
    pruned = tuple(pruned_list)
    t0 = time.perf_counter()
    steady, why, disagg_cert, disagg_records = search_pools(
        result, cost, workload, slo, engine=engine, rate_given=rate_given, progress=progress,
        mtp=mtp, mem_fraction=frac, knob_search=knob_search, requests=requests,
        incumbent=cert.winner_capacity,
        first_found=first, cands=cands, ahead=ahead,
    )  # fmt: skip
    # its own time: the first deployments' searches (wherever they ran) and the rest
    disagg_s = time.perf_counter() - t0 + t_space + (found[1][1] if len(found) > 1 else 0.0)
    served += steady
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
    if objective == "throughput-per-gpu" and not rate_given:  # rank by SLO-bound capacity
        order = sorted(order, key=lambda r: (not r.meets_slo, -_capacity_per_gpu(r, workload)))
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
        search={
            "certificate": cert.to_dict(),
            # the winner's capacity record: a disaggregated winner's own, else the colocated
            "winner_capacity": disagg_records.get(id(ranked[0].result), record),
            "colocated_capacity": record,
            "disaggregated": None
            if disagg_cert is None
            else {
                **disagg_cert.to_dict(),
                "seconds": disagg_s,
            },
        },
        certificate_sentence=" ".join(
            [cert.sentence()] + ([] if disagg_cert is None else [disagg_cert.sentence()])
        ),
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class Early:
    """The first disaggregated searches of a context, started in a worker
    (:func:`begin_first`); ``handle``: their :func:`moeplan.search.job.fanout.begin` handle."""

    ctx: Context
    fams: list[str]
    handle: Any

    def matches(self, ctx: Context | None, fams: list[str]) -> bool:
        """Whether they search what the ranking's own ``ctx`` and ``fams`` would."""
        return ctx == self.ctx and fams == self.fams

    def join(self) -> Any:
        return self.handle.join()[0]

    def cancel(self) -> None:
        self.handle.cancel()


def begin_first(
    result_of_planners: Callable[[], PlanResult],
    cost: CostModel,
    workload: ServeWorkload,
    slo: SLO,
    *,
    model: ModelSpec,
    cluster: ClusterSpec,
    families: Sequence[str],
    engine: str = "sglang",
    requests: int = DEFAULT_REQUESTS,
    knob_search: KnobSearch | None = None,
) -> tuple[PlanResult, Early | None]:
    """The planners' result, with the first disaggregated searches (the best one's interval
    searched ahead) started in a worker before the planners run, when workers can run them
    (:func:`moeplan.search.job.fanout.width` > 1, an open arrival stream): they assume every
    pooled family whose base family is in ``families`` will be planned; :func:`serve_rank`
    takes them only when the planners' result agrees (else they are cancelled and searched
    as usual). ``cost`` must be the ranking's memo (:func:`memo_cost`)."""
    from moeplan.search.disagg.pools import Context
    from moeplan.search.disagg.rank import NEEDS, unlaunchable
    from moeplan.search.disagg.search import first_searches

    skip = unlaunchable(engine)
    fams = [f for f, need in NEEDS.items() if need in families and f not in skip]
    if width() <= 1 or workload.rate is None or not fams:
        return result_of_planners(), None
    mtp = (0, 0.0) if knob_search is None else (knob_search.base.mtp, knob_search.base.mtp_accept)
    frac = None if knob_search is None else knob_search.base.mem_fraction
    ctx = Context(model=model, cluster=cluster, cost=cost, workload=workload, slo=slo,
                  engine=engine, mtp=mtp[0], mtp_accept=mtp[1], mem_fraction=frac,
                  knob_search=knob_search)  # fmt: skip
    cost.pin(model, cluster)  # type: ignore[attr-defined]
    with sharing(cost):
        handle = begin([partial(_timed, first_searches, ctx, fams, requests, interval=True)])
    early = Early(ctx=ctx, fams=fams, handle=handle)
    try:
        return result_of_planners(), early
    except BaseException:
        early.cancel()
        raise


@dataclass(frozen=True, kw_only=True, slots=True)
class KnobSearch:
    """The instance knobs of a deployment search: ``base`` holds the given ones (and the
    defaults of the others), ``given`` names the :data:`KNOB_ENTRIES` entries not searched."""

    base: InstanceKnobs = InstanceKnobs()
    given: frozenset[str] = frozenset()
    a2a: str | None = None  # the requested backend (auto / deepep / nccl), resolved per layout


def _timed(fn: Callable[..., Any], *args: Any, **kw: Any) -> tuple[Any, float]:
    """``fn``'s result and the seconds it took (a fan-out thunk: timed where it runs)."""
    t0 = time.perf_counter()
    return fn(*args, **kw), time.perf_counter() - t0


def _capacity_per_gpu(r: ServeResult, workload: ServeWorkload) -> float:
    """Output tokens/s per GPU at the largest rate meeting the SLOs (0 when unknown)."""
    rate = r.max_rate_meeting_slo_rps or 0.0
    gpus = r.metrics.gpus if r.metrics is not None else r.layout.gpus
    return rate * workload.osl.mean / gpus
