"""The disaggregated families in ``moeplan plan``'s serving ranking (:mod:`moeplan.search.ranking.rank`).

``pd`` is served when the colocated family (MixServe) was planned — its pools are colocated
layouts; ``afd`` when FinDEP was planned — its decode instances run FinDEP's schedule. Both
families' deployments (any pool counts) are searched together by SLO-bound capacity with a
certificate (:mod:`moeplan.search.disagg.search`); each family's best simulated deployment
is its entry in the ranking. Plans: a PD deployment is a ``strategy`` plan of its decode instance
with both pools in ``details.disaggregation`` (the SGLang/vLLM PD launch is built from it
in :mod:`moeplan.export`); an AFD deployment is
a ``dep`` plan of one decode instance (``seq_len`` 1, the decode step's ``ma, r1, r2, order``
at the operating batch) that the runtime's DEP engine can run — no public engine launches
attention–FFN disaggregation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from moeplan.backends import backend
from moeplan.cost import CostModel
from moeplan.planners.families import FAMILY, POOLED_FAMILIES
from moeplan.planners.plan import Plan
from moeplan.planners.rank import PlanResult
from moeplan.search.capacity.slo import DEFAULT_REQUESTS
from moeplan.search.disagg.capacity import capacity_record, result_of
from moeplan.search.disagg.pools import Candidate, Context, why_none
from moeplan.search.disagg.search import DisaggCertificate, PoolCandidate, search_disaggregated
from moeplan.search.ranking.entries import Entry, Served
from moeplan.serve.metrics import SLO
from moeplan.serve.pools.afd import AFDIteration, bucket_up
from moeplan.serve.workload.arrivals import ServeWorkload

NEEDS = {f: FAMILY[f].needs for f in POOLED_FAMILIES}  # pools build on that family's plan


def unlaunchable(engine: str) -> dict[str, str]:
    """The pooled families ``engine`` cannot launch, with its rule: the search skips them
    (a pooled family's name is its deployment's launch kind,
    :func:`moeplan.serve.deployment.launch_kind`)."""
    b = backend(engine)
    return {f: why for f in NEEDS if (why := b.deployment_blocker(f)) is not None}


def pools(k: Candidate) -> dict[str, Any]:
    """Both pools, their analytic loads at the matched rate and their capacities (req/s)."""
    return {
        **k.layout.to_dict(),
        "analytic_load": {"prefill": k.rho[0], "decode": k.rho[1]},
        "capacity_rps": {"prefill": k.capacity[0], "decode": k.capacity[1]},
        "decode_batch": k.decode_note,
    }


def pd_plan(k: Candidate, model: str, cluster: str) -> Plan:
    """Plan of a colocated-decode PD deployment (module docstring); the launch commands
    are built from ``details.disaggregation`` by :mod:`moeplan.export.launch_servers`."""
    lay = k.layout
    return Plan(
        family="strategy",
        model=model,
        cluster=cluster,
        layout=lay.plan_layout(),
        details={"label": lay.label, "disaggregation": pools(k)},
    )


def afd_plan(k: Candidate, model: str, cluster: str, batch: int, ctx: int) -> Plan:
    """``dep`` plan of one AFD decode instance at ``batch`` sequences and ``ctx`` keys."""
    lay = k.layout
    dec = lay.decode_instance.visit(afd=lambda a: a)
    ev = k.setup.decode_eval
    assert isinstance(ev, AFDIteration)
    b = bucket_up(max(1, -(-batch // dec.ag)))
    pick = ev.pick(b, ctx)
    c = pick.config
    # the runtime cuts a micro-batch's ma tokens into r2 chunks: a chunk needs a token (never
    # hit by Algorithm 1 on 90 decode shapes tried, where r2 > 1 only at ma = 128)
    r2 = min(c.r2, c.ma)
    return Plan(
        family="dep",
        model=model,
        cluster=cluster,
        layout={"world_size": dec.gpus, "ag": dec.ag, "eg": dec.eg},
        details={
            "ma": c.ma,
            "r1": c.r1,
            "r2": r2,
            "me": pick.me * c.r2 / r2,
            "order": c.order,
            "seq_len": 1,
            "phase": "decode",
            "context": ctx,
            "label": lay.label,
            "disaggregation": pools(k),
            "launch": "no public engine launches attention-FFN disaggregation; this plan.json "
            "runs on moeplan's runtime DEP engine (moeplan run)",
        },
        predicted={"iteration_s": pick.makespan, "tokens_per_iteration": pick.tokens},
    )


def disagg_setup(
    result: PlanResult,
    cost: CostModel,
    workload: ServeWorkload,
    slo: SLO,
    *,
    engine: str = "sglang",
    mtp: tuple[int, float] = (0, 0.0),
    mem_fraction: float | None = None,
    knob_search: Any = None,
) -> tuple[Context | None, list[str], dict[str, str]]:
    """The search's context (None for a closed loop), the pooled families it searches and
    why each other one is not served."""
    if workload.rate is None:
        return (
            None,
            [],
            {
                f: "a disaggregated deployment is simulated for an open arrival stream (--rate), "
                "not a closed loop (--concurrency)"
                for f in NEEDS
            },
        )
    ctx = Context(
        model=result.model, cluster=result.cluster, cost=cost, workload=workload, slo=slo,
        engine=engine, mtp=mtp[0], mtp_accept=mtp[1], mem_fraction=mem_fraction,
        knob_search=knob_search,
    )  # fmt: skip
    planned = {c.family for c in result.candidates}
    why: dict[str, str] = unlaunchable(engine)
    fams = []
    for fam, need in NEEDS.items():
        if fam in why:
            continue
        if need not in planned:
            why[fam] = f"its pools build on the {need} family, which was not planned"
        else:
            fams.append(fam)
    return ctx, fams, why


def search_pools(
    result: PlanResult,
    cost: CostModel,
    workload: ServeWorkload,
    slo: SLO,
    *,
    engine: str = "sglang",
    rate_given: bool = True,
    mtp: tuple[int, float] = (0, 0.0),
    mem_fraction: float | None = None,
    knob_search: Any = None,
    progress: Callable[[str], None] | None = None,
    requests: int = DEFAULT_REQUESTS,
    incumbent: float = 0.0,
    first_found: list[tuple] | None = None,
    cands: list[PoolCandidate] | None = None,
    ahead: tuple | None = None,
) -> tuple[list[Served], dict[str, str], DisaggCertificate | None, dict[int, dict]]:
    """Served PD and AFD deployments (each family's best), why a family was not served, the
    search's certificate, and the capacity record (with
    its interval) of the best disaggregated deployment when it beats ``incumbent`` (the
    colocated winner's capacity per GPU), keyed by ``id`` of its result. ``first_found``:
    the searches of :func:`moeplan.search.disagg.search.first_searches` of the same setup,
    when already run;
    ``cands``: its space (:func:`moeplan.search.disagg.search.space`), when already built;
    ``ahead``: the interval :func:`first_searches` searched ahead, if any."""
    ctx, fams, why = disagg_setup(
        result, cost, workload, slo, engine=engine, mtp=mtp, mem_fraction=mem_fraction,
        knob_search=knob_search,
    )  # fmt: skip
    if ctx is None:
        return [], why, None, {}
    done, cert = search_disaggregated(
        ctx, fams, incumbent=incumbent, requests=requests, progress=progress,
        first_found=first_found, cands=cands,
    )  # fmt: skip
    out: list[Served] = []
    records: dict[int, dict] = {}
    osl = workload.osl.mean
    for fam in fams:
        mine = [k for k in done if k.family == fam]
        if not mine:
            why[fam] = why_none(ctx, fam)
            continue
        k = mine[0]
        r = result_of(k, ctx, rate_given=rate_given)
        if k is done[0] and k.capacity_per_gpu(osl) > incumbent:
            records[id(r)] = capacity_record(k, ctx, requests, ahead)
        cand = k.candidate(ctx)
        plan = POOL_PLANS[fam](ctx, cand)
        lay: Any = cand.layout  # an Entry's layout: here the P/D deployment
        entry = Entry(family=fam, label=lay.label, layout=lay, plan=plan)
        out.append(Served(entry=entry, result=r, estimate_tokens_per_s_per_gpu=k.estimate))
    return out, why, cert, records


def _afd_plan_at_load(ctx: Context, k: Candidate) -> Plan:
    """:func:`afd_plan` at the decode pool's running cap and mid-generation context."""
    w = ctx.workload
    b = k.setup.decode_cfg.max_running
    return afd_plan(k, ctx.model.name, ctx.cluster.name, b, w.isl.mean + w.osl.mean // 2)


#: The ``plan.json`` of a served deployment of each pooled family, keyed by family name
#: (:data:`moeplan.planners.families.POOLED_FAMILIES`).
POOL_PLANS: dict[str, Callable[[Context, Candidate], Plan]] = {
    "pd": lambda ctx, k: pd_plan(k, ctx.model.name, ctx.cluster.name),
    "afd": _afd_plan_at_load,
}
