"""Search the colocated deployment space by SLO-bound capacity, with a certificate.

Every layout of :mod:`moeplan.search.colocated.space`, with each instance-knob variant the
engine allows (:func:`moeplan.serve.knobs.knob_variants`: a candidate per variant, as
``serve-sim`` would run it), gets an upper bound of its capacity
(:func:`moeplan.search.capacity.bound.capacity_bound`, over every engine configuration the knob search
may pick). The layout with the best analytic estimate
(:func:`moeplan.search.colocated.evaluate.analytic_rate`, capped by its bound; its engine knobs are the
ones a layout runs with, computed only for layouts not pruned by bound) is simulated first,
then the rest in decreasing bound order. For each, with an incumbent of capacity ``C`` per GPU:

- its bound is at most ``C``: it cannot win — *pruned by bound*;
- else one steady run at the rate that would give it ``C`` per GPU — the very run its
  capacity search would make there, same probe geometry: a shorter warm-up read a queue
  still filling as growth (DeepSeek-V2-Lite on 8 A100, attn TP1xDP2 / MoE TP2 x 4: "queue
  growth" at 17.2 req/s with two lifetimes of warm-up at that rate, stable and within the
  SLOs with the search's, whose capacity was 18.4) — if the SLOs miss there, its capacity is
  below ``C`` (capacity is the largest rate below which every rate meets the SLOs,
  :mod:`moeplan.search.capacity.slo`) — *beaten at the incumbent's rate*;
- else its capacity is searched (:func:`moeplan.search.capacity.slo.slo_capacity`) and it may
  become the incumbent.

A layout the engine's launch options cannot express
(:meth:`moeplan.backends.EngineBackend.layout_blocker`, e.g. TensorRT-LLM's attention TP x
DP) is not priced: its reason names the rule.

:class:`Certificate` records the proof: how many layouts the space holds, how many were
simulated, beaten or pruned, the largest bound left unsimulated and the winner's capacity.
The winner's capacity is then re-estimated with its 95 % interval.

**What the certificate costs.** Every layout whose bound exceeds the winner's capacity needs
its one run at the incumbent's rate, and that run's cost is its warm-up (sized from the
layout's slots, :mod:`moeplan.search.capacity.slo`, "Probe geometry"): on DeepSeek-V3 over
one GB200 NVL72 rack (``plan``'s default question, ``--jobs 1``), 119 such runs took 32 and
46 s of CPU in two runs, each stopped on a certain miss 28 to 56 simulated seconds into its
measured window, after 440 to 1,650 simulated seconds of warm-up. The bound is loosest for
attention DP under SGLang's prefill-first scheduler, whose prefill part takes the prompts in
their cheapest arrangement, every DP rank prefilling at once (bound over simulated capacity
per GPU on the six layouts simulated there: 5.2 at DP8, 3.8 and 2.1 at DP4, 2.9 and 1.7 at
DP2, 1.3 at DP1).

**Decision: the runs at the incumbent's rate are made one at a time.** Made two at a time
in forked workers (as the disaggregated search's look-ahead makes its own), the same GB200
plan took 116.7 s wall and 162 s CPU against 95.9 s and 120 s one at a time (one run each,
the same box within minutes, two cores): each look-ahead forks the planning process anew,
a worker prices its layout's iterations again in its own memo, and the disaggregated
search's first deployments already hold the second core.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from moeplan.backends import backend
from moeplan.cost import CostModel
from moeplan.errors import MoeplanError
from moeplan.planners.layout import Layout
from moeplan.search.capacity.bound import Bound, capacity_bound
from moeplan.search.capacity.slo import (
    DEFAULT_REQUESTS,
    WINDOW_LIFETIMES,
    Capacity,
    CapacitySearch,
    Lifetime,
    SteadyProbe,
    in_service,
    saturated_lifetime,
    slo_capacity,
    steady_probe,
)
from moeplan.search.colocated.evaluate import Estimate, analytic_rate
from moeplan.search.colocated.space import copies, layouts
from moeplan.search.job.memo_cost import memo_cost
from moeplan.serve.engine.run import EngineConfig
from moeplan.serve.iteration.batch_grid import GridEvaluator
from moeplan.serve.iteration.instance_knobs import InstanceKnobs
from moeplan.serve.iteration.model import IterationModel
from moeplan.serve.knobs import candidates, mem_fraction_values
from moeplan.serve.metrics import SLO
from moeplan.serve.workload.arrivals import ServeWorkload
from moeplan.specs import ClusterSpec, ModelSpec, RoutingProfile


@dataclass(kw_only=True)
class SpaceCandidate:
    """One layout of the space and what the search learned of it (per instance rates)."""

    layout: Layout
    replicas: int
    spare_gpus: int
    reason: str = ""
    bound: Bound | None = None
    cfg: EngineConfig | None = None
    estimate: Estimate | None = None
    evaluate: GridEvaluator | None = None
    capacity: Capacity | None = None
    probe: SteadyProbe | None = None
    knobs: InstanceKnobs | None = None
    """Instance knobs pricing its iterations (all-to-all backend, two-batch overlap, KV dtype)."""
    beaten_at: float = 0.0
    """Rate (per instance) of the one steady run at the incumbent's capacity (0: none)."""
    runs: dict = field(default_factory=dict)
    """Steady runs of its capacity search, reused by the interval search (same runs)."""
    cfgs: list[EngineConfig] = field(default_factory=list)
    """The engine configurations its bound covers (the knob search's candidates)."""

    def bound_per_gpu(self, osl: float) -> float:
        return 0.0 if self.bound is None else self.bound.per_gpu(osl, self.layout.gpus)

    def capacity_per_gpu(self, osl: float) -> float:
        return 0.0 if self.capacity is None else self.capacity.per_gpu(osl, self.layout.gpus)


@dataclass(frozen=True, kw_only=True, slots=True)
class Certificate:
    """Why no unsimulated layout can beat the winner (output tokens/s per GPU)."""

    layouts: int
    simulated: int
    beaten_at_incumbent_rate: int
    pruned_by_bound: int
    infeasible: int
    best_remaining_bound: float
    winner_capacity: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "layouts": self.layouts,
            "simulated": self.simulated,
            "beaten_at_incumbent_rate": self.beaten_at_incumbent_rate,
            "pruned_by_bound": self.pruned_by_bound,
            "infeasible": self.infeasible,
            "best_remaining_bound": self.best_remaining_bound,
            "winner_capacity": self.winner_capacity,
            "units": "output tokens/s per GPU",
        }

    def sentence(self) -> str:
        return (
            f"Search: of {self.layouts} colocated layouts and knob variants ({self.infeasible} "
            "infeasible), "
            f"{self.simulated} had their capacity simulated, {self.beaten_at_incumbent_rate} "
            f"missed the SLOs at the best capacity found so far (one steady run each), and "
            f"{self.pruned_by_bound} were pruned because an upper bound of their capacity "
            f"(at most {self.best_remaining_bound:,.0f} output tokens/s per GPU) is below "
            f"the best colocated capacity simulated, {self.winner_capacity:,.0f}: no colocated "
            "layout left out can beat it."
        )


#: estimated rates within this relative difference are one rate in :func:`pick_knobs` (float
#: noise: configurations differing only in an unused KV pool price the same steps through
#: sums whose last bits differ)
KNOB_RATE_TIE = 1e-9


def prepare(
    c: SpaceCandidate,
    model: ModelSpec,
    cluster: ClusterSpec,
    cost: CostModel,
    workload: ServeWorkload,
    slo: SLO,
    engine: str,
    chunk_tokens: int | None = None,
    max_running: int | None = None,
    routing: RoutingProfile | None = None,
    *,
    knobs: bool = True,
    configs: dict | None = None,
) -> None:
    """Bound and engine knobs of ``c`` (``reason`` set when it cannot serve the workload);
    a given knob is fixed (:func:`moeplan.serve.knobs.candidates`); ``c.knobs`` price it.
    ``knobs=False``: the bound only; :func:`pick_knobs` adds the knobs and the estimate.
    ``configs``: the engine configurations already made for the same model, cluster, engine
    and caps, by what else they depend on (the layout and the knobs that enter them: the
    knob variants of one layout differing only in two-batch overlap share them)."""
    kv_scale = c.knobs.kv_scale if c.knobs is not None else 1.0
    mtp = c.knobs.mtp if c.knobs is not None else 0
    given = c.knobs.mem_fraction if c.knobs is not None else None
    deepep = c.knobs is not None and c.knobs.a2a == "deepep"
    key = (c.layout, kv_scale, mtp, given, deepep)
    try:
        made = None if configs is None else configs.get(key)
        if made is None:
            made = candidates(
                engine, model, cluster, c.layout, chunk_tokens, max_running, kv_scale=kv_scale,
                mtp=mtp, mem_fraction=given, deepep=deepep,
                fractions=tuple(f for f in mem_fraction_values(engine, given) if f is not None),
            )  # fmt: skip
            if configs is not None:
                configs[key] = made
        cfgs = list(made)
        ev = GridEvaluator(IterationModel(model, cluster, cost, c.layout, routing, knobs=c.knobs))
    except MoeplanError as err:
        c.reason = str(err)
        return
    big = workload.isl.max + workload.osl.max
    cfgs = [k for k in cfgs if big <= k.kv_tokens_per_rank]
    if not cfgs:
        c.reason = f"request isl+osl ({big}) must fit one rank's KV pool"
        return
    c.evaluate, c.cfgs = ev, cfgs
    c.bound = capacity_bound(ev, cfgs, workload, slo)
    if knobs:
        pick_knobs(c, workload, slo)


def pick_knobs(c: SpaceCandidate, workload: ServeWorkload, slo: SLO) -> None:
    """``c.cfg`` and ``c.estimate``: of the configurations at the engine's default chunk,
    the one with the best analytic estimate (:func:`analytic_rate`); once per candidate."""
    if c.cfg is not None:
        return
    assert c.evaluate is not None and c.cfgs
    isl, osl = workload.isl.mean, workload.osl.mean
    base = c.cfgs[0].chunk_tokens  # the engine's default chunk: caps are what the estimate sees
    ev = c.evaluate
    scored = [(analytic_rate(ev, k, isl, osl, slo), k) for k in c.cfgs if k.chunk_tokens == base]
    top = max(e.rate_rps for e, _ in scored)
    # the first within KNOB_RATE_TIE of the best: the engine's defaults win a tie, whatever
    # the last bits of the pricing's sums (which differ by BLAS build and CPU)
    c.estimate, c.cfg = next((e, k) for e, k in scored if e.rate_rps >= top * (1 - KNOB_RATE_TIE))
    if c.knobs is not None and c.cfg.mem_fraction is not None:  # the launch files carry it
        c.knobs = replace(c.knobs, mem_fraction=c.cfg.mem_fraction)


def _start(c: SpaceCandidate) -> float:
    """The capacity search's start: the layout's bound (nondecreasing in each SLO, so the
    capacity is monotone in each SLO: :mod:`moeplan.search.capacity.slo`, "Search")."""
    assert c.bound is not None
    return c.bound.rate_rps


def _geometry(c: SpaceCandidate, workload: ServeWorkload) -> tuple[int, Lifetime]:
    """The requests ``c``'s engine holds in service at saturation and a request's lifetime
    there: what sizes every probe of its capacity search
    (:func:`moeplan.search.capacity.slo.in_service`,
    :func:`~moeplan.search.capacity.slo.saturated_lifetime`; never the SLO)."""
    assert c.cfg is not None and c.evaluate is not None
    return in_service(c.cfg, workload), saturated_lifetime(c.cfg, c.evaluate, workload)


def search_capacity(c: SpaceCandidate, workload: ServeWorkload, slo: SLO, requests: int) -> None:
    """``c.capacity`` and ``c.probe`` (no interval), from a start that depends on ``c`` only
    (:func:`_start`); a run its search makes that it already made at the incumbent's rate
    is reused (the same run)."""
    assert c.cfg is not None and c.evaluate is not None and c.bound is not None
    slots, life = _geometry(c, workload)
    search = CapacitySearch(
        guess_rps=_start(c),
        requests=requests,
        interval=False,
        slots=slots,
        life_s=life,
        cap_rps=c.bound.rate_rps,
        window_lifetimes=WINDOW_LIFETIMES,
    )
    c.capacity, c.probe = slo_capacity(
        c.cfg, c.evaluate, workload, slo, search, replicas=c.replicas, cache=c.runs
    )


def with_interval(w: SpaceCandidate, workload: ServeWorkload, slo: SLO, requests: int) -> None:
    """The winner's capacity again, its point bracket kept, with its 95 % interval."""
    assert w.cfg is not None and w.evaluate is not None
    assert w.bound is not None and w.capacity is not None
    pt = (w.capacity.rate_rps, w.capacity.point_high_rps)
    slots, life = _geometry(w, workload)
    search = CapacitySearch(
        guess_rps=pt[0], requests=requests, known=pt, slots=slots, life_s=life,
        cap_rps=w.bound.rate_rps, window_lifetimes=WINDOW_LIFETIMES,
    )  # fmt: skip
    w.capacity, w.probe = slo_capacity(
        w.cfg, w.evaluate, workload, slo, search, replicas=w.replicas, cache=w.runs
    )


def _beaten(c: SpaceCandidate, rate: float, workload: ServeWorkload, slo: SLO, n: int) -> bool:
    """Whether ``c`` misses the SLOs at ``rate``: the very run its capacity search would make
    there (same probe geometry, :func:`_geometry`), stopped once the miss is certain; a run
    that meets them is kept for the search (it ran to its horizon)."""
    slots, life = _geometry(c, workload)
    p = steady_probe(
        c.cfg, c.evaluate, workload, slo, rate, requests=n, replicas=c.replicas, slots=slots,
        life_s=life, horizon=True, stop_on_miss=True, window_lifetimes=WINDOW_LIFETIMES,
    )  # fmt: skip
    c.beaten_at = rate
    if p.meets(slo):
        c.runs[rate, slots] = p
        return False
    return True


def _by_estimate(
    order: list[SpaceCandidate], workload: ServeWorkload, slo: SLO
) -> list[SpaceCandidate]:
    """Simulation order: the best analytic estimate first (a strong incumbent early), then
    decreasing bound. The key is the estimate capped by the layout's bound (an estimate
    exceeds no nonzero bound: both price the same iterations and the bound drops no cost the
    estimate counts; a zero bound — a lone request misses an SLO — caps it to 0). ``order``
    is by decreasing bound, so estimates are computed down it only until the best key
    exceeds the next bound: no layout below can hold the best key."""
    if not order:
        return order
    osl = workload.osl.mean
    first, top = order[0], -1.0
    for c in order:
        if top > c.bound_per_gpu(osl):
            break
        pick_knobs(c, workload, slo)
        assert c.estimate is not None
        key = min(c.estimate.rate_rps * osl / c.layout.gpus, c.bound_per_gpu(osl))
        if key > top:
            first, top = c, key
    return [first] + [c for c in order if c is not first]


def search_space(
    model: ModelSpec,
    cluster: ClusterSpec,
    cost: CostModel,
    workload: ServeWorkload,
    slo: SLO,
    *,
    engine: str = "sglang",
    requests: int = DEFAULT_REQUESTS,
    space: list[Layout] | None = None,
    progress: Callable[[str], None] | None = None,
    knobs_for: Callable[[Layout], Sequence[InstanceKnobs]] | None = None,
) -> tuple[list[SpaceCandidate], Certificate]:
    """Candidates best first (simulated ones by capacity per GPU, then the rest by bound) and
    the certificate (module docstring). ``knobs_for``: the instance-knob variants of a
    layout (:func:`moeplan.serve.knobs.knob_variants`; none: the layout cannot run the given
    knobs); each ``(layout, knobs)`` is a candidate of its own."""
    osl = workload.osl.mean
    cost = memo_cost(cost)  # type: ignore[assignment]  # shared across the layouts
    cands = []
    b = backend(engine)
    configs: dict = {}  # engine configurations by layout and knobs (prepare)
    for lay in space if space is not None else layouts(model, cluster):
        reps, spare = copies(cluster, lay)
        why = b.layout_blocker(lay.attn_tp, lay.attn_dp, lay.moe_tp, lay.moe_ep)
        if why is not None:  # the engine cannot launch it: not priced
            cands.append(SpaceCandidate(layout=lay, replicas=reps, spare_gpus=spare, reason=why))
            continue
        try:
            variants: list[InstanceKnobs | None] = (
                list(knobs_for(lay)) if knobs_for is not None else [None]
            )
        except MoeplanError as err:
            cands.append(SpaceCandidate(layout=lay, replicas=reps, spare_gpus=spare,
                                        reason=str(err)))  # fmt: skip
            continue
        if not variants:
            cands.append(SpaceCandidate(layout=lay, replicas=reps, spare_gpus=spare,
                reason="the given two-batch overlap needs the DeepEP all-to-all on this layout"))  # fmt: skip
            continue
        for kn in variants:  # every knob variant is a candidate of its own, bounded alone
            c = SpaceCandidate(layout=lay, replicas=reps, spare_gpus=spare, knobs=kn)
            prepare(c, model, cluster, cost, workload, slo, engine, knobs=False, configs=configs)
            cands.append(c)
    order = sorted((c for c in cands if c.bound is not None), key=lambda c: -c.bound_per_gpu(osl))
    best: SpaceCandidate | None = None
    simulated = beaten = 0
    remaining = 0.0
    for i, c in enumerate(_by_estimate(order, workload, slo)):
        top = best.capacity_per_gpu(osl) if best is not None else 0.0
        if top >= c.bound_per_gpu(osl):
            continue  # pruned by bound (counted below)
        if progress:
            progress(f"capacity {i + 1}/{len(order)}: {c.layout.label}")
        pick_knobs(c, workload, slo)  # only layouts not pruned by bound need their knobs
        assert c.cfg is not None and c.evaluate is not None and c.bound is not None
        if top > 0 and _beaten(c, top * c.layout.gpus / osl, workload, slo, requests):
            beaten += 1  # it misses at the incumbent's capacity per GPU, as its rate
            continue
        search_capacity(c, workload, slo, requests)
        simulated += 1
        if c.capacity_per_gpu(osl) > top:
            best = c
    top = best.capacity_per_gpu(osl) if best is not None else 0.0
    pruned = [c for c in order if c.capacity is None and c.beaten_at == 0.0]
    remaining = max((c.bound_per_gpu(osl) for c in pruned), default=0.0)
    done = sorted(
        (c for c in order if c.capacity is not None), key=lambda c: -c.capacity_per_gpu(osl)
    )
    rest = [c for c in order if c.capacity is None]
    # an incumbent found later than a layout's probe may beat its bound too: all counted
    if done and done[0].capacity is not None and done[0].capacity.rate_rps > 0:
        with_interval(done[0], workload, slo, requests)
    cert = Certificate(
        layouts=len(cands),
        simulated=simulated,
        beaten_at_incumbent_rate=beaten,
        pruned_by_bound=len(pruned),
        infeasible=len(cands) - len(order),
        best_remaining_bound=remaining,
        winner_capacity=done[0].capacity_per_gpu(osl) if done else 0.0,
    )
    return done + rest + [c for c in cands if c.bound is None], cert
