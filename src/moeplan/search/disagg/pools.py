"""The disaggregated families' pools: instance kinds, analytic capacities, rate matching.

Families: ``pd`` — prefill and decode pools of colocated instances; ``afd`` —
the same prefill pool with attention–FFN disaggregated decode instances (FinDEP's schedule
per decode step, :mod:`moeplan.serve.pools.afd`). Both run on :mod:`moeplan.serve.pools.pd`. The search
over deployments (any pool counts, by SLO-bound capacity, with a certificate) is
:mod:`moeplan.search.disagg.search`; this module gives it the pools and their estimates.

1. **Instance capacities (analytic, no simulation).** Prefill instance of layout ``P``
   (its engine's default chunk per attention-DP rank, as SGLang schedules each DP rank):
   ``mu_p`` = requests/s when its prefill batches are full (chunks of the engine's budget),
   and its lone-request TTFT (+ KV transfer) must be within the TTFT SLO. Decode instance
   ``D``: the largest batch ``B`` (powers of two, up to the KV bound and the running cap)
   whose decode step meets ``TPOT_MARGIN`` × the TPOT SLO; ``mu_d = B / ((osl-1) d(B))``.
2. **Rate matching.** For each pair ``(P, D)`` every ``(x, y)`` with ``x·|P| + y·|D|`` within
   the GPU budget is scored by ``min(x mu_p, y mu_d) · osl / gpus`` (output tokens/s per GPU
   at the rate both pools sustain); the best per pair is kept (:func:`candidates`; the
   search scores every ``(x, y)`` this way as its analytic estimate).

Each pool is priced with every instance-knob variant the engine allows — the fused MoE,
DeepEP where it can run, with DeepEP two-batch overlap off or on — as the colocated search
tries them (:func:`moeplan.serve.knobs.knob_variants`), whichever gives the pool more
capacity (:func:`pool_knobs`).

Candidate pool layouts: power-of-two instance sizes below the budget; attention TP within a
node (DP over the rest) with EP over the instance, plus pure TP within a node; where one
NVLink domain spans nodes (a GB200 NVL72 rack), wide-EP decode instances of every multiple of
8 GPUs within the domain too (:func:`domain_decode_layouts`, 48 as SGLang deploys); AFD
instances with ``ag`` in {1/8, 1/4, 3/8, 1/2, 3/4} of the instance. Pipelines are not
tried as pools: with PP2/PP4 prefill instances added, the analytic capacity ranked a PP4
prefill pool first and its simulation gave 35 % less than the non-PP pick (DeepSeek-V3 on
4×8 H200), so PP prefill pools (SMIDT) need their own estimate first.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from moeplan.backends import backend
from moeplan.cost import CostModel
from moeplan.cost.a2a import moe_backend
from moeplan.cost.memory import KVPool
from moeplan.errors import MoeplanError
from moeplan.planners.families import FAMILY
from moeplan.planners.layout import Layout
from moeplan.search.colocated.evaluate import ServeResult
from moeplan.serve.deployment import AFDLayout, Colocated, DecodeLayout, PDLayout, instance
from moeplan.serve.engine.config import EngineConfig, Evaluator, SimResult
from moeplan.serve.engine.run import tokens_per_step
from moeplan.serve.iteration.instance_knobs import InstanceKnobs
from moeplan.serve.iteration.model import Batch, IterationModel, iteration_model
from moeplan.serve.knobs import (
    default_chunk,
    engine_config,
    knob_variants,
    kv_pool,
    mem_fraction_values,
    redundant_for,
    spec_running_cap,
)
from moeplan.serve.layout import kv_capacity_tokens
from moeplan.serve.metrics import SLO, queue_stable
from moeplan.serve.pools.afd import AFDIteration, afd_engine_config, decode_engine_config
from moeplan.serve.pools.pd import (
    DecodeStepEvaluator,
    PDRun,
    PoolSetup,
    kv_transfer_s,
    simulate_pd,
    transfer_inter_node,
)
from moeplan.serve.workload.arrivals import ServeWorkload, generate
from moeplan.specs import ClusterSpec, ModelSpec

TPOT_MARGIN = 0.9  # decode batch sized for 90 % of the TPOT SLO (mixed arrivals, context growth)
#: GPUs between the wide-EP decode sizes tried within a multi-node NVLink domain
#: (:func:`domain_decode_layouts`): an HGX server's 8, so 24, 40, 48, 56 (and 72 past one
#: instance) join the powers of two on a rack of 72 (SGLang's GB200 NVL72 blog, part II:
#: decode on 48 ranks)
WIDE_EP_STEP = 8
AFD_AG_SHARES = (1 / 8, 1 / 4, 3 / 8, 1 / 2, 3 / 4)


@dataclass(frozen=True, kw_only=True)
class Context:
    """Everything the search holds fixed: the serving footing of ``moeplan plan``."""

    model: ModelSpec
    cluster: ClusterSpec
    cost: CostModel
    workload: ServeWorkload
    slo: SLO
    engine: str = "sglang"
    #: MTP draft tokens and acceptance the user gave (``plan --mtp N --mtp-accept P``):
    #: decode pools run them; 0: off
    mtp: int = 0
    mtp_accept: float = 0.0
    #: the engine memory fraction the user gave (``--mem-fraction``; None: the engine's
    #: default for each pool's instance)
    mem_fraction: float | None = None
    #: the instance knobs the user gave (``plan --a2a / --tbo / --kv-dtype``: a
    #: :class:`moeplan.search.ranking.rank.KnobSearch`); the pools search only the others
    knob_search: Any = None

    @property
    def reserve(self) -> float:
        """Share of future output the engine reserves at admission."""
        return backend(self.engine).new_token_ratio


@dataclass(frozen=True, kw_only=True)
class InstanceCapacity:
    """One instance kind a pool could be made of, priced: its analytic capacity (requests/s),
    engine config and iteration evaluator (a launched pool of instances is
    :class:`moeplan.export.deployment.Pool`)."""

    layout: Layout | AFDLayout
    cfg: EngineConfig
    evaluate: Evaluator
    rate: float
    note: str = ""
    knobs: InstanceKnobs | None = None


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A rate-matched deployment with its estimate (output tokens/s per GPU)."""

    layout: PDLayout
    setup: PoolSetup
    estimate: float
    rho: tuple[float, float]  # analytic load of the prefill / decode pool at the matched rate
    decode_note: str
    capacity: tuple[float, float] = (0.0, 0.0)  # requests/s of the prefill / decode pool


def _powers(limit: int) -> Iterator[int]:
    g = 1
    while g <= limit:
        yield g
        g *= 2


def serve_layouts(model: ModelSpec, cluster: ClusterSpec, max_gpus: int) -> list[Layout]:
    """Candidate colocated instance layouts up to ``max_gpus`` (module docstring)."""
    out = []
    gpn = cluster.nvlink_domain  # attention TP over NVLink peers only
    for g in _powers(max_gpus):
        for tp in _powers(min(g, gpn)):
            out.append(Layout(attn_tp=tp, attn_dp=g // tp, moe_tp=1, moe_ep=g))
        if 1 < g <= gpn:
            out.append(Layout(attn_tp=g, attn_dp=1, moe_tp=g, moe_ep=1))
    return _valid(model, cluster, out)


def _valid(model: ModelSpec, cluster: ClusterSpec, layouts: list[Layout]) -> list[Layout]:
    valid = []
    for lay in layouts:
        try:
            valid.append(lay.validate(model, cluster))
        except MoeplanError:
            continue
    return valid


def domain_decode_layouts(model: ModelSpec, cluster: ClusterSpec, max_gpus: int) -> list[Layout]:
    """Wide-EP decode instances within a multi-node NVLink domain (a GB200 / GB300 NVL72
    rack) past the powers of two of :func:`serve_layouts`: every multiple of
    :data:`WIDE_EP_STEP` GPUs up to the domain (and ``max_gpus``), EP over the instance,
    attention TP a power of two up to :data:`WIDE_EP_STEP` (DP over the rest), with the fewest redundant
    experts that make ``E + R`` divisible by the EP size (at most ``E / 8``, the search's rule,
    :func:`moeplan.serve.knobs.redundant_for`): SGLang's GB200 NVL72 deployment decodes
    DeepSeek-V3 on 48 ranks with 32 redundant experts. Past the node every such group's
    all-to-all runs over NVLink only where the domain spans nodes; on servers of 8 it crosses
    the network, so the powers of two are the space there."""
    if not cluster.mnnvl:
        return []
    out = []
    top = min(cluster.nvlink_domain, max_gpus)
    for g in range(WIDE_EP_STEP, top + 1, WIDE_EP_STEP):
        if g & (g - 1) == 0:  # a power of two: serve_layouts has it
            continue
        r = redundant_for(model, g)
        if r is None:
            continue
        for tp in _powers(WIDE_EP_STEP):  # attention TP within an HGX-sized group
            if g % tp == 0:
                out.append(
                    Layout(attn_tp=tp, attn_dp=g // tp, moe_tp=1, moe_ep=g, redundant_experts=r)
                )
    return _valid(model, cluster, out)


def afd_layouts(max_gpus: int) -> list[AFDLayout]:
    """Candidate AFD instances: power-of-two sizes, ``ag`` a share of it (docstring)."""
    out = []
    for g in _powers(max_gpus):
        ags = sorted({max(1, round(g * s)) for s in AFD_AG_SHARES if 1 <= round(g * s) < g})
        out += [AFDLayout(ag=a, eg=g - a) for a in ags]
    return out


def pool_knobs(c: Context, lay: Layout, phase: str | None = None) -> list[InstanceKnobs]:
    """The instance knobs a ``phase`` pool of ``lay`` (``prefill`` / ``decode``; None: the
    knobs both phases run) is tried with: every variant the engine allows
    (:func:`moeplan.serve.knobs.knob_variants`, the colocated search's own: the fused MoE,
    DeepEP where it can run, and with DeepEP two-batch overlap off and on; the pool keeps
    the one with the higher capacity), at the pool's memory fraction."""
    given = frozenset({"redundant_experts", "mtp"})  # the layout's own; MTP: decode pools
    base = InstanceKnobs(mem_fraction=c.mem_fraction)
    ks = c.knob_search
    if ks is not None:  # the user's knobs hold, as on the colocated layouts
        given |= ks.given
        base = replace(ks.base, mtp=0, mtp_accept=0.0, mem_fraction=c.mem_fraction)
        if ks.a2a is not None:
            a2a = moe_backend(ks.a2a, c.cost.engine, c.model, c.cluster, lay.moe_tp,
                              lay.moe_ep, phase=phase)  # fmt: skip
            if base.tbo and a2a != "deepep":
                return []  # the given two-batch overlap needs DeepEP, which cannot run here
            base = replace(base, a2a=a2a)
    return [kn for _, kn in knob_variants(c.cost.engine, c.model, c.cluster, lay, base,
                                          given, phase)] or [base]  # fmt: skip


def prefill_pool(c: Context, lay: Layout) -> InstanceCapacity | None:
    """Capacity of a prefill instance (None when it does not fit or misses the TTFT SLO),
    with the better of :func:`pool_knobs`."""
    kns = [
        replace(k, mem_fraction=f) for k in pool_knobs(c, lay, "prefill") for f in pool_fractions(c)
    ]
    pools = [p for k in kns if (p := _prefill_pool(c, lay, k)) is not None]
    return max(pools, key=lambda p: p.rate, default=None)


def pool_fractions(c: Context) -> tuple[float | None, ...]:
    """The memory fractions a pool is tried at: the user's, else the engine's default
    (None, first: a tie keeps it) and :data:`moeplan.serve.knobs.MEM_FRACTIONS` — the
    launch files carry the one kept. A prefill pool's capacity does not depend on it (only
    whether a prompt fits); a decode pool's batch may be bounded by its KV pool."""
    return mem_fraction_values(c.engine, c.mem_fraction)


def _prefill_pool(c: Context, lay: Layout, knobs: InstanceKnobs) -> InstanceCapacity | None:
    try:
        chunk = default_chunk(c.engine, c.cluster) * lay.attn_dp  # one budget per DP rank
        cfg = engine_config(
            c.engine, c.model, c.cluster, lay, chunk_tokens=chunk,
            mem_fraction=knobs.mem_fraction, deepep=knobs.a2a == "deepep", role="prefill",
        )  # fmt: skip
        knobs = replace(knobs, mem_fraction=cfg.mem_fraction)  # the launch files carry it
        ev = _model(c, lay, knobs)
    except MoeplanError:
        return None
    isl = c.workload.isl.mean
    if c.workload.isl.max > cfg.kv_tokens_per_rank:
        return None
    chunk = cfg.chunk_tokens or isl  # the instance's budget: attn_dp ranks' worth
    q = min(isl, chunk)
    per_chunk = max(1, chunk // isl)  # prompts in one full iteration, as the engine batches
    full = ev(Batch(0, 0, ((q, q),) * per_chunk)) / per_chunk * math.ceil(isl / q)
    alone = sum(
        ev(Batch(0, 0, ((min(q, isl - s), s + min(q, isl - s)),))) for s in range(0, isl, q)
    )
    if c.slo.ttft_s is not None and alone > c.slo.ttft_s:
        return None
    note = f"{alone * 1e3:.0f} ms{_knob_note(knobs)}"
    return InstanceCapacity(
        layout=lay, cfg=cfg, evaluate=ev, rate=1.0 / full, note=note, knobs=knobs
    )


def _knob_note(knobs: InstanceKnobs | None) -> str:
    if knobs is None:
        return ""
    mtp = f", MTP {knobs.mtp} (accept {knobs.mtp_accept:g})" if knobs.mtp else ""
    if knobs.a2a != "deepep":
        return mtp
    return ", DeepEP" + (" + two-batch overlap" if knobs.tbo else "") + mtp


def _largest_batch(ev: Evaluator, ctx: int, top: int, tpot: float | None) -> tuple[int, float]:
    """Largest power-of-two batch (or ``top``) whose decode step is within ``tpot``."""
    best = (0, 0.0)
    b = 1
    while b <= top:
        d = ev(Batch(b, ctx, ()))
        if tpot is not None and d > tpot:
            break
        best = (b, d)
        b = b * 2 if b * 2 <= top or b == top else top
    return best


def decode_pool(c: Context, lay: DecodeLayout) -> InstanceCapacity | None:
    """Capacity of a decode instance at its TPOT-limited batch (None if it cannot serve),
    with the better of :func:`pool_knobs` (AFD instances: FinDEP's schedule, no knobs)."""
    return instance(lay).visit(
        colocated=lambda d: _colocated_decode_pool(c, d.layout),
        afd=lambda a: _decode_pool(c, a, None),
    )


def _colocated_decode_pool(c: Context, lay: Layout) -> InstanceCapacity | None:
    """:func:`decode_pool` of a colocated instance: the best of its knobs."""
    kns = pool_knobs(c, lay, "decode")
    if c.mtp:  # the user's MTP on every decode pool (its model must ship an MTP layer)
        kns = [replace(k, mtp=c.mtp, mtp_accept=c.mtp_accept) for k in kns]
    kns = [replace(k, mem_fraction=f) for k in kns for f in pool_fractions(c)]
    pools = [p for k in kns if (p := _decode_pool(c, lay, k)) is not None]
    return max(pools, key=lambda p: p.rate, default=None)


def _model(c: Context, lay: Layout, knobs: InstanceKnobs) -> IterationModel:
    """The pool's iteration model, one for every memory fraction (it prices no memory)."""
    return iteration_model(c.model, c.cluster, c.cost, lay, knobs=replace(knobs, mem_fraction=None))


def _decode_pool(
    c: Context, lay: DecodeLayout, knobs: InstanceKnobs | None
) -> InstanceCapacity | None:
    w, md = c.workload, c.model
    big = w.isl.max + w.osl.max + 1
    ctx = w.isl.mean + w.osl.mean // 2
    tpot = None if c.slo.tpot_s is None else TPOT_MARGIN * c.slo.tpot_s

    def colocated(d: Colocated) -> tuple[Evaluator, int, int]:
        lay = d.layout
        ev = DecodeStepEvaluator(_model(c, lay, knobs or InstanceKnobs()))
        return ev, _decode_kv(c, lay, lay.attn_dp, knobs), lay.attn_dp

    def afd(a: AFDLayout) -> tuple[Evaluator, int, int]:
        per_rank = afd_engine_config(md, c.cluster, a, a.ag, c.reserve).kv_tokens_per_rank
        return AFDIteration(md, c.cluster, c.cost, a), per_rank, a.ag

    try:
        ev, per_rank, ranks = instance(lay).visit(colocated=colocated, afd=afd)
    except MoeplanError:
        return None
    if big > per_rank:
        return None
    kv_bound = max(1, int(per_rank * ranks / (w.isl.mean + w.osl.mean)))
    # the launch files set no running cap: each rank runs at most its engine's default
    # (SGLang's request pool, vLLM's max_num_seqs per DP engine rank)
    running = backend(c.engine).rank_running_limit(c.cluster.gpu) * ranks
    tau = tokens_per_step(ev)  # MTP: tau tokens per step; TPOT = step / tau
    spec = spec_running_cap(c.engine, ranks, knobs.mtp if knobs is not None else 0)
    cap = min(running, spec) if spec is not None else running  # the engine's cap under MTP
    b, d = _largest_batch(ev, ctx, min(kv_bound, cap), None if tpot is None else tpot * tau)
    if b == 0:
        return None
    try:
        cfg = _decode_cfg(c, lay, b, knobs)
    except MoeplanError:
        return None
    if knobs is not None:  # the launch files carry the fraction the pool was sized at
        knobs = replace(knobs, mem_fraction=cfg.mem_fraction)
    why = "KV capacity" if b == kv_bound else "running cap" if tpot is None else "TPOT SLO"
    rate = b * tau / (max(1, w.osl.mean - 1) * d)
    note = f"batch {b} ({why}){_knob_note(knobs)}"
    return InstanceCapacity(layout=lay, cfg=cfg, evaluate=ev, rate=rate, note=note, knobs=knobs)


def _decode_pool_rule(c: Context, lay: Layout, knobs: InstanceKnobs | None) -> KVPool | None:
    """The engine's KV pool of a decode instance (its ``decode`` role's default fraction
    unless the knobs fix one)."""
    k = knobs or InstanceKnobs()
    return kv_pool(c.engine, c.model, c.cluster, lay, 0, k.mem_fraction,
                   deepep=k.a2a == "deepep", role="decode", mtp=k.mtp)  # fmt: skip


def _decode_kv(c: Context, lay: Layout, budget: int, knobs: InstanceKnobs | None) -> int:
    """KV tokens per rank of a decode instance stepping ``budget`` tokens."""
    pool = _decode_pool_rule(c, lay, knobs)
    scale = knobs.kv_scale if knobs is not None else 1.0  # the KV dtype the time prices
    return kv_capacity_tokens(c.model, c.cluster, lay, budget, scale, pool=pool)


def _decode_cfg(
    c: Context, lay: DecodeLayout, cap: int, knobs: InstanceKnobs | None = None
) -> EngineConfig:
    def colocated(d: Colocated) -> EngineConfig:
        cfg = decode_engine_config(
            cap, _decode_kv(c, d.layout, cap + 1, knobs), d.layout.attn_dp, c.reserve
        )
        pool = _decode_pool_rule(c, d.layout, knobs)
        return replace(cfg, mem_fraction=None if pool is None else pool.fraction)

    return instance(lay).visit(
        colocated=colocated,
        afd=lambda a: afd_engine_config(c.model, c.cluster, a, cap, c.reserve),
    )


def rate_match(
    mu_p: float, gp: int, mu_d: float, gd: int, budget: int
) -> tuple[int, int, float] | None:
    """``(x, y, rate)`` maximising ``min(x mu_p, y mu_d) / (x gp + y gd)`` within ``budget``
    GPUs (ties: fewer GPUs); None when one instance of each does not fit."""
    best: tuple[float, int, int, int, float] | None = None
    for x in range(1, (budget - gd) // gp + 1):
        for y in range(1, (budget - x * gp) // gd + 1):
            rate = min(x * mu_p, y * mu_d)
            gpus = x * gp + y * gd
            key = (rate / gpus, -gpus)
            if best is None or key > best[:2]:
                best = (key[0], key[1], x, y, rate)
    return None if best is None else (best[2], best[3], best[4])


def prefill_pools(c: Context) -> list[InstanceCapacity]:
    """Every prefill instance kind that fits and meets the TTFT SLO on its own."""
    n = c.cluster.num_gpus
    return [p for lay in serve_layouts(c.model, c.cluster, n - 1) if (p := prefill_pool(c, lay))]


def decode_pools(c: Context, family: str) -> list[InstanceCapacity]:
    """Every decode instance kind of ``family`` that fits and meets the TPOT SLO alone."""
    n = c.cluster.num_gpus
    decs_l: list[DecodeLayout] = (
        list(afd_layouts(n - 1))
        if FAMILY[family].decode != "colocated"
        else serve_layouts(c.model, c.cluster, n - 1)
        + domain_decode_layouts(c.model, c.cluster, n - 1)
    )
    return [d for lay in decs_l if (d := decode_pool(c, lay))]


def pools(c: Context, family: str) -> tuple[list[InstanceCapacity], list[InstanceCapacity]]:
    """Every prefill and decode instance kind that fits and meets its SLO on its own."""
    return prefill_pools(c), decode_pools(c, family)


def why_none(c: Context, family: str) -> str:
    """Why ``family`` has no rate-matched candidate on the cluster (one sentence)."""
    n = c.cluster.num_gpus
    pres, decs = pools(c, family)
    kind = FAMILY[family].decode
    if not pres:
        return (
            f"no prefill instance of at most {n - 1} GPUs holds the weights and meets the "
            "TTFT SLO with a lone request"
        )
    if not decs:
        return (
            f"no {kind} decode instance of at most {n - 1} GPUs holds the weights, the KV of "
            "a request and meets the TPOT SLO"
        )
    gp, gd = min(p.layout.gpus for p in pres), min(d.layout.gpus for d in decs)
    return (
        f"the smallest prefill ({gp} GPUs) and decode ({gd} GPUs) instances need "
        f"{gp + gd} GPUs; the cluster has {n}"
    )


def make_candidate(
    c: Context, p: InstanceCapacity, d: InstanceCapacity, x: int, y: int
) -> Candidate:
    """The deployment of ``x`` instances of pool ``p`` and ``y`` of ``d``, ready to simulate."""
    pd = PDLayout(prefill=p.layout, decode=d.layout, x=x, y=y,  # type: ignore[arg-type]
                  prefill_knobs=p.knobs, decode_knobs=d.knobs,
                  prefill_chunk=p.cfg.chunk_tokens)  # fmt: skip
    inter = transfer_inter_node(c.cluster, pd)
    setup = PoolSetup(
        layout=pd,
        prefill_cfg=p.cfg,
        decode_cfg=d.cfg,
        prefill_eval=p.evaluate,
        decode_eval=d.evaluate,
        transfer=_transfer_fn(c, pd.prefill, inter),
    )
    rate = min(x * p.rate, y * d.rate)
    return Candidate(
        layout=pd,
        setup=setup,
        estimate=rate * c.workload.osl.mean / pd.gpus,
        rho=(rate / (x * p.rate), rate / (y * d.rate)),
        decode_note=d.note,
        capacity=(x * p.rate, y * d.rate),
    )


def candidates(c: Context, family: str) -> list[Candidate]:
    """Every rate-matched (prefill layout, decode layout, x, y), best estimate first."""
    n = c.cluster.num_gpus
    pres, decs = pools(c, family)
    out = []
    for p in pres:
        for d in decs:
            m = rate_match(p.rate, p.layout.gpus, d.rate, d.layout.gpus, n)
            if m is not None:
                out.append(make_candidate(c, p, d, m[0], m[1]))
    out.sort(key=lambda k: (-k.estimate, k.layout.gpus))
    return out


def _transfer_fn(c: Context, prefill: Layout, inter: bool) -> Callable[[int], float]:
    memo: dict[int, float] = {}

    def seconds(isl: int) -> float:
        t = memo.get(isl)
        if t is None:
            t = memo[isl] = kv_transfer_s(c.model, c.cost, prefill, isl, inter)
        return t

    return seconds


def stable(run: PDRun, slo: SLO) -> bool:
    """Neither pool's queue grows (:func:`queue_stable` of both pools' waits)."""
    return queue_stable(run.waits(), slo)


@dataclass(frozen=True, kw_only=True, slots=True)
class DisaggResult(ServeResult):
    """A :class:`ServeResult` of a disaggregated deployment; :meth:`rerun` simulates its pools
    on another workload (the report's curves and timeline)."""

    setup: PoolSetup | None = None
    rho: tuple[float, float] = (0.0, 0.0)

    def rerun(self, workload: ServeWorkload) -> SimResult:
        """Its prefill and decode pools simulated on ``workload``."""
        assert self.setup is not None
        return simulate_pd(generate(workload), self.setup).result


def bound(k: Candidate) -> str:
    """Which pool limits the matched rate, and what caps it."""
    rp, rd = k.rho
    if rp >= rd:
        n = k.layout.x
        return f"prefill pool compute ({n} instance{'' if n == 1 else 's'} at the TTFT SLO)"
    return f"decode pool: {k.decode_note}"
