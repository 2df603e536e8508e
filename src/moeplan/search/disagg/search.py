"""Search the disaggregated deployments by SLO-bound capacity, with a certificate.

The space (:mod:`moeplan.search.disagg.space`): every P/D and attention–FFN deployment that
fits the cluster, up to :data:`MAX_INSTANCES` instances, each with an upper bound of its
capacity from its pools alone and an analytic estimate. Then, as the
colocated search (:mod:`moeplan.search.colocated.search`):

1. each family's best estimate is simulated first (what that family proposes; it is the
   family's entry in the ranking);
2. the rest in decreasing bound order, against an incumbent = the best capacity per GPU
   found so far, the colocated winner's included: a bound at most the incumbent is *pruned
   by bound*; else one steady run at the incumbent's rate that misses the SLOs is *beaten at
   the incumbent's rate*; else its capacity is searched.

Capacity is :func:`moeplan.search.capacity.slo.slo_capacity` on the whole deployment (one arrival
stream dealt round-robin over the prefill instances, :func:`moeplan.serve.pools.pd.simulate_pd`),
with a measured window of at least :data:`WINDOW_LIFETIMES` lifetimes of arrivals (a
lifetime's arrivals from the deployment's slots: :meth:`PoolCandidate.slots`); its search
starts at the deployment's bound and never runs past it.

**Side by side** (:mod:`moeplan.search.job.fanout`, when the caller runs workers): step 1's
searches depend on no incumbent, so they run beside each other and beside the colocated
search (:func:`first_searches`); in step 2 the next deployments' runs at the incumbent's rate
are made together (:func:`_look_ahead`), and a deployment whose incumbent moved meanwhile is
probed again at the new rate. What is decided is what one-at-a-time probing decides.

**Decision: the rest of the search waits for the colocated winner.** Step 2 depends on the
colocated winner only through its start, ``max(colocated, the first deployments' best)``, so
it could run in a worker beside the colocated search from the first deployments' best
whenever that is the larger. Measured (one run each, two cores, the same box within
minutes): DeepSeek-V3 on one GB200 NVL72 rack 101.4 s wall against 95.9 s, on nine DGX B200
73.3 s against 53.9 s. The worker prices every deployment again in its own memo (what the
colocated search priced in the planning process is not in it) and takes the core the
colocated search's own capacity probes use.

**Decision: pool capacities simulated alone are not used as the bound.** Measured on
Qwen3-30B-A3B, 8 H100, ISL 1024 / OSL 256, TTFT 2 s / TPOT 50 ms: a prefill instance's
TTFT-bound capacity alone costs 0.2-0.4 s, but a decode instance's TPOT-bound capacity alone
1-35 s (12-23 runs of a KV-bound pool), as much as the deployment's own search, and it is
not an upper bound: fed Poisson instead of the prefill pool's departures, with one or two
round-robin replicas, the same decode layout gave 110.5 and 61.9 req/s. The analytic pool
bounds cost nothing to simulate and are never below the simulated capacity.

**Decision: the measured window spans two lifetimes.** A deployment's arrival rate is every
instance's together (178 req/s for the AFD deployment above), so 500 measured requests
arrived in 2.8 s, a fifth of one request's 14.8 s lifetime: a KV-bound decode pool's slowly
growing queue did not show and the capacity was 178 req/s with 500 requests, 156 with 5,000.
With a window of at least one lifetime, 500 requests gave 123 (a growth test over one
lifetime still mistakes noise for growth); with two, 500 and 5,000 both give 156 req/s.
(Those lifetimes were the SLO's; a capacity probe's lifetime is now the deployment's own,
:mod:`moeplan.search.capacity.slo`, "Probe geometry".)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from moeplan.planners.families import FAMILY
from moeplan.search.capacity.slo import (
    WINDOW_LIFETIMES,  # noqa: F401 (re-exported)
    CapacitySearch,
    SteadyProbe,
    slo_capacity,
    steady_probe,
)
from moeplan.search.disagg.pools import (
    Context,
)
from moeplan.search.disagg.space import (  # noqa: F401 (re-exported: the space's names)
    MAX_INSTANCES,
    PoolCandidate,
    copies,
    pool_candidate,
    space,
)
from moeplan.search.job.fanout import fan_out, width
from moeplan.serve.pools.pd import prefill_view
from moeplan.serve.workload.arrivals import Requests


@dataclass(frozen=True, kw_only=True, slots=True)
class DisaggCertificate:
    """Why no disaggregated deployment left unsimulated can beat the best one found."""

    deployments: int
    simulated: int
    beaten_at_incumbent_rate: int
    pruned_by_bound: int
    best_remaining_bound: float
    best_capacity: float
    incumbent_at_start: float
    #: the pooled families searched (those the engine launches and whose base was planned)
    families: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "deployments": self.deployments,
            "simulated": self.simulated,
            "beaten_at_incumbent_rate": self.beaten_at_incumbent_rate,
            "pruned_by_bound": self.pruned_by_bound,
            "best_remaining_bound": self.best_remaining_bound,
            "best_capacity": self.best_capacity,
            "colocated_capacity": self.incumbent_at_start,
            "families": list(self.families),
            "units": "output tokens/s per GPU",
        }

    def sentence(self) -> str:
        return (
            f"Of {self.deployments} disaggregated deployments (prefill pools with "
            f"{' or '.join(FAMILY[f].decode for f in self.families)} decode pools, "
            f"any prefill:decode counts within the cluster, up to {MAX_INSTANCES} instances), "
            f"{self.simulated} had their "
            f"capacity simulated, {self.beaten_at_incumbent_rate} missed the SLOs at the best "
            f"capacity found so far, and {self.pruned_by_bound} were pruned because an upper "
            "bound of their capacity from their pools alone (at most "
            f"{self.best_remaining_bound:,.0f} output tokens/s per GPU) is below the best "
            f"capacity simulated (colocated {self.incumbent_at_start:,.0f}, disaggregated "
            f"{self.best_capacity:,.0f})."
        )


def _start(pc: PoolCandidate) -> float:
    """The capacity search's start: the deployment's bound from its pools (nondecreasing in
    each SLO, so the capacity is monotone in each SLO: :mod:`moeplan.search.capacity.slo`,
    "Search")."""
    return pc.bound_rps


def _probe_run(
    pc: PoolCandidate, c: Context, rate: float, requests: int
) -> tuple[SteadyProbe, bool]:
    """One steady run at ``rate``, the very run the capacity search would make there (same
    probe geometry), and True — unless the prefill pool alone already misses the SLOs there
    (:func:`moeplan.serve.pools.pd.prefill_view`: the same prefill runs, TTFT never above the
    deployment's): that run, and False."""
    setup = pc.candidate(c).setup
    slots = pc.slots(c)

    def prefill_only(reqs: Requests, stop: float | None) -> Any:
        return prefill_view(reqs, setup, horizon_s=stop)

    pre = steady_probe(
        None, None, c.workload, c.slo, rate, requests=requests, runner=prefill_only,
        slots=slots, horizon=True, window_lifetimes=WINDOW_LIFETIMES,
    )  # fmt: skip
    if not pre.meets(c.slo):
        return pre, False
    return steady_probe(
        None, None, c.workload, c.slo, rate, requests=requests, runner=pc.runner(c),
        slots=slots, horizon=True, window_lifetimes=WINDOW_LIFETIMES,
    ), True  # fmt: skip


def _probe(pc: PoolCandidate, c: Context, rate: float, requests: int) -> SteadyProbe:
    """:func:`_probe_run`, kept: a whole deployment's run in ``pc.runs`` (the capacity search
    reuses it), a prefill pool's in ``pc.prefill_runs``."""
    key = (rate, pc.slots(c))
    if key not in pc.runs and rate not in pc.prefill_runs:
        _keep(pc, c, rate, _probe_run(pc, c, rate, requests))
    return pc.runs[key] if key in pc.runs else pc.prefill_runs[rate]


def _keep(pc: PoolCandidate, c: Context, rate: float, run: tuple[SteadyProbe, bool]) -> None:
    p, whole = run
    if whole:
        pc.runs[rate, pc.slots(c)] = p
    else:
        pc.prefill_runs[rate] = p


def _known(pc: PoolCandidate, c: Context, rate: float) -> bool:
    return (rate, pc.slots(c)) in pc.runs or rate in pc.prefill_runs


def _look_ahead(ahead: list[PoolCandidate], c: Context, best: float, requests: int) -> None:
    """The steady runs at the incumbent's capacity ``best`` of the next deployments the
    search will probe, side by side (:func:`moeplan.search.job.fanout.fan_out`), kept for
    :func:`_probe`: if the incumbent moves first, the search probes them at the new rate, so
    what it decides is what probing one at a time decides."""
    osl = c.workload.osl.mean
    todo = [(k, best * k.gpus / osl) for k in ahead]
    todo = [(k, r) for k, r in todo if not _known(k, c, r)]
    runs = fan_out([partial(_probe_run, k, c, r, requests) for k, r in todo])
    for (k, r), run in zip(todo, runs, strict=True):
        _keep(k, c, r, run)


def search_capacity(pc: PoolCandidate, c: Context, requests: int, *, full: bool = True) -> None:
    """``pc.capacity`` (no interval) and ``pc.probe``, from :func:`_start`."""
    search = CapacitySearch(
        guess_rps=_start(pc), requests=requests, interval=False, slots=pc.slots(c), full=full,
        window_lifetimes=WINDOW_LIFETIMES, cap_rps=pc.bound_rps,
    )  # fmt: skip
    pc.capacity, pc.probe = slo_capacity(
        None, None, c.workload, c.slo, search, runner=pc.runner(c), cache=pc.runs
    )


def _searched(pc: PoolCandidate, c: Context, requests: int) -> tuple:
    """What :func:`search_capacity` learns of ``pc``, returned (a fan-out thunk's result)."""
    search_capacity(pc, c, requests)
    return pc.capacity, pc.probe, pc.runs


def with_interval(pc: PoolCandidate, c: Context, requests: int) -> None:
    """``pc``'s capacity again, its point bracket kept, with its 95 % interval."""
    assert pc.capacity is not None
    pt = (pc.capacity.rate_rps, pc.capacity.point_high_rps)
    search = CapacitySearch(
        guess_rps=pt[0], requests=requests, known=pt, slots=pc.slots(c),
        window_lifetimes=WINDOW_LIFETIMES, cap_rps=pc.bound_rps,
    )  # fmt: skip
    pc.capacity, pc.probe = slo_capacity(
        None, None, c.workload, c.slo, search, runner=pc.runner(c), cache=pc.runs
    )


def _first(cands: list[PoolCandidate], families: list[str]) -> list[PoolCandidate]:
    """Each family's best analytic estimate (fewest GPUs on a tie), in family order."""
    out = []
    for fam in families:
        mine = [k for k in cands if k.family == fam and k.bound > 0]
        if mine:
            out.append(min(mine, key=lambda k: (-k.estimate, k.gpus)))
    return out


def first_searches(
    c: Context, families: list[str], requests: int, *, interval: bool = False
) -> tuple[dict, list[tuple], tuple | None]:
    """The pools' rate bounds of :func:`space` and what the capacity searches of each
    family's first deployment (step 1 of the module docstring) learn, in :func:`_first`'s
    order: they depend on no incumbent, so they can run beside the colocated search.
    ``interval``: then the best one's 95 % interval, searched ahead of knowing whether it
    wins (:func:`interval_ahead`; else None)."""
    bounds: dict[str, list[float]] = {}
    first = _first(space(c, families, bounds), families)
    found = fan_out([partial(_searched, k, c, requests) for k in first])
    return bounds, found, interval_ahead(first, found, c, requests) if interval else None


def interval_ahead(
    first: list[PoolCandidate], found: list[tuple], c: Context, requests: int
) -> tuple | None:
    """The 95 % interval of the first deployment of the best capacity per GPU, searched
    before the rest of the search says whether it wins (a worker that would otherwise wait
    runs it): ``(its point capacity, then its capacity, steady run and runs after
    :func:`with_interval`)`` for :func:`moeplan.search.disagg.capacity.capacity_record`.
    ``found``: :func:`first_searches`'s
    searches of ``first`` (their runs are copied: the interval adds to them)."""
    osl = c.workload.osl.mean
    for k, (cap, probe, runs) in zip(first, found, strict=True):
        k.capacity, k.probe, k.runs = cap, probe, dict(runs)
    k = max(first, key=lambda k: k.capacity_per_gpu(osl), default=None)
    if k is None or k.capacity is None or k.capacity.rate_rps <= 0:
        return None
    point = k.capacity
    with_interval(k, c, requests)
    return point, k.capacity, k.probe, k.runs


def search_disaggregated(
    c: Context,
    families: list[str],
    *,
    incumbent: float,
    requests: int,
    progress: Callable[[str], None] | None = None,
    first_found: list[tuple] | None = None,
    cands: list[PoolCandidate] | None = None,
) -> tuple[list[PoolCandidate], DisaggCertificate]:
    """The simulated deployments, best capacity per GPU first, and the certificate
    (module docstring); ``incumbent``: the colocated winner's capacity per GPU;
    ``first_found``: the searches of :func:`first_searches` of the same arguments, when
    already run;
    ``cands``: :func:`space` of the same arguments, when already built."""
    osl = c.workload.osl.mean
    cands = space(c, families) if cands is None else cands
    first = _first(cands, families)
    rest = sorted((k for k in cands if k not in first), key=lambda k: -k.bound)
    if first_found is None:
        if progress and first:
            progress(f"serving simulation ({', '.join(k.family for k in first)}): "
                     f"{len(first)}/{len(cands)}")  # fmt: skip
        first_found = fan_out([partial(_searched, k, c, requests) for k in first])
    for k, (cap, run, runs) in zip(first, first_found, strict=True):
        k.capacity, k.probe, k.runs = cap, run, runs
    best = max([incumbent] + [k.capacity_per_gpu(osl) for k in first])
    simulated, beaten = len(first), 0
    for i, k in enumerate(rest):
        if k.bound <= best:
            continue  # pruned by bound (counted below)
        if progress:
            progress(f"serving simulation ({k.family}) {len(first) + i + 1}/{len(cands)}: "
                     f"{k.candidate(c).layout.label}")  # fmt: skip
        if best > 0:
            r = best * k.gpus / osl  # the incumbent's capacity per GPU, as this rate
            if width() > 1 and not _known(k, c, r):
                _look_ahead([j for j in rest[i:] if j.bound > best][: width()], c, best, requests)
            k.beaten_at = r
            if not _probe(k, c, r, requests).meets(c.slo):
                beaten += 1
                continue
        search_capacity(k, c, requests)
        simulated += 1
        best = max(best, k.capacity_per_gpu(osl))
    done = sorted(
        (k for k in cands if k.capacity is not None), key=lambda k: -k.capacity_per_gpu(osl)
    )
    pruned = [k for k in cands if k.capacity is None and k.beaten_at == 0.0]
    cert = DisaggCertificate(
        deployments=len(cands),
        simulated=simulated,
        beaten_at_incumbent_rate=beaten,
        pruned_by_bound=len(pruned),
        best_remaining_bound=max((k.bound for k in pruned), default=0.0),
        best_capacity=done[0].capacity_per_gpu(osl) if done else 0.0,
        incumbent_at_start=incumbent,
        families=tuple(families),
    )
    return done, cert
