"""Searches over the serving simulator: engine knobs per layout, and the largest SLO rate.

- Engine defaults and the knob candidates: :mod:`moeplan.serve.knobs`.
- :func:`max_rate_meeting_slo`: bisection on the arrival rate of a simulated open workload,
  same seed at every rate (common random numbers), until the bracket is within ``rel_tol``.
- :func:`evaluate_layouts`: for each layout, candidate ``(max_running, chunk_tokens)`` pairs
  are ranked by an analytic estimate (:func:`analytic_rate`) and the best ``top_k`` are
  simulated (rate bisection under the SLO); the winner is then simulated on the user's
  workload. Every search takes an evaluator factory so tests can pass fakes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from moeplan.cost import CostModel
from moeplan.errors import MoeplanError
from moeplan.planners.layout import Layout
from moeplan.serve.engine.run import EngineConfig, Evaluator, SimResult, simulate, tokens_per_step
from moeplan.serve.iteration.instance_knobs import InstanceKnobs
from moeplan.serve.iteration.model import Batch, IterationModel
from moeplan.serve.knobs import candidates, default_chunk, engine_config, mem_fraction_values
from moeplan.serve.metrics import SLO, Probe, ServeMetrics, run_stable, summarize
from moeplan.serve.workload.arrivals import ServeWorkload, generate

__all__ = [
    "ServeResult",
    "analytic_rate",
    "default_chunk",
    "engine_config",
    "evaluate_layout",
    "evaluate_layouts",
    "max_rate_meeting_slo",
    "rank_results",
    "run_workload",
]
from moeplan.specs import ClusterSpec, ModelSpec, RoutingProfile

SEARCH_REQUESTS = 400
# A rate probe must outlast the requests it sends: its arrival window covers at least this
# many request lifetimes (TTFT SLO + osl x TPOT SLO), so an overloaded rate shows a growing
# queue instead of a batch that never filled (capped at MAX_PROBE_REQUESTS).
PROBE_LIFETIMES = 3.0
MAX_PROBE_REQUESTS = 3000


def probe_requests(rate: float, workload: ServeWorkload, slo: SLO, floor: int) -> int:
    """Requests in a rate probe at ``rate`` (see ``PROBE_LIFETIMES``); at least ``floor``."""
    life = (slo.ttft_s or 0.0) + workload.osl.mean * (slo.tpot_s or 0.0)
    want = math.ceil(PROBE_LIFETIMES * rate * life)
    return max(floor, min(MAX_PROBE_REQUESTS, want))


EvaluatorFactory = Callable[[Layout], Evaluator]


def max_rate_meeting_slo(
    run: Callable[[float], ServeMetrics | Probe],
    slo: SLO,
    *,
    hi: float,
    rel_tol: float = 0.03,
    max_steps: int = 40,
) -> float:
    """Largest rate ``r`` with ``run(r).meets(slo)``, assuming it is monotone in ``r``: the
    bracket is found by doubling / halving from ``hi`` (at most ``max_steps`` times each;
    0 when nothing passes, the last rate tried when everything does), then bisected until
    ``(hi - lo) <= rel_tol * lo``."""
    if run(hi).meets(slo):
        lo = hi
        for _ in range(max_steps):
            hi = 2.0 * lo
            if not run(hi).meets(slo):
                break
            lo = hi
        else:
            return lo
    else:
        for _ in range(max_steps):
            lo = hi / 2.0
            if run(lo).meets(slo):
                break
            hi = lo
        else:
            return 0.0
    while hi - lo > rel_tol * lo:
        mid = 0.5 * (lo + hi)
        if run(mid).meets(slo):
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True, kw_only=True, slots=True)
class Estimate:
    """Analytic steady state at ``batch`` concurrent requests (seconds, requests/s)."""

    batch: int
    tpot_s: float
    ttft_s: float
    rate_rps: float


def analytic_rate(evaluate: Evaluator, cfg: EngineConfig, isl: int, osl: int, slo: SLO) -> Estimate:
    """Closed-form estimate: with ``B`` requests in flight each request costs ``osl`` decode
    steps of the batch and its share of prefill batches, so ``rate = B / (osl d(B) + B p)``
    and ``TPOT = d(B) + B p / osl``; ``B`` is the largest power of two (<= the cap and the
    KV bound) whose TPOT meets the SLO."""
    chunk = cfg.chunk_tokens or isl
    per_chunk = max(1, chunk // isl)
    q = min(isl, chunk)
    p = evaluate(Batch(0, 0, ((q, q),) * per_chunk)) / per_chunk * math.ceil(isl / q)
    kv_bound = max(1, int(cfg.kv_tokens / (isl + osl / 2)))
    top = min(cfg.max_running, kv_bound)
    best = None
    b = 1
    tau = tokens_per_step(evaluate)  # MTP: tau tokens per decode step
    while b <= top:
        d = evaluate(Batch(b, isl + osl // 2, ())) / tau
        tpot = d + b * p / max(1, osl)
        est = Estimate(batch=b, tpot_s=tpot, ttft_s=p, rate_rps=b / (osl * d + b * p))
        if best is None or slo.tpot_s is None or tpot <= slo.tpot_s:
            best = est
        b = b * 2 if b * 2 <= top or b == top else top
    assert best is not None
    return best


@dataclass(frozen=True, kw_only=True, slots=True)
class ServeResult:
    """The serving answer for one layout (``metrics`` None when infeasible)."""

    layout: Layout
    feasible: bool
    reason: str = ""
    engine: EngineConfig | None = None
    metrics: ServeMetrics | None = None
    max_rate_meeting_slo_rps: float | None = None
    meets_slo: bool = False
    bound: str = ""
    estimate: Estimate | None = None
    breakdown: dict[str, float] = field(default_factory=dict)
    knobs: InstanceKnobs | None = None  # the instance knobs the iterations were priced with
    run: Any = field(default=None, repr=False, compare=False)
    """The steady run the metrics were taken from (:class:`moeplan.search.capacity.slo.SteadyProbe`:
    the run and its measured window), kept so its curves and trace need no second run."""
    overloaded: bool = False
    """The steady run's queue grows: the rate offered exceeds what the deployment serves, and
    the metrics' throughput is what it served (:func:`moeplan.search.capacity.slo.window_metrics`)."""

    @property
    def label(self) -> str:
        return self.layout.label

    def rerun(self, workload: ServeWorkload) -> SimResult | None:
        """This deployment simulated again on ``workload`` when the result carries what it
        takes (a disaggregated result runs its pools); None: one colocated instance, which the
        caller reruns with the iteration prices it chooses
        (:func:`moeplan.search.ranking.views.rerun_evaluator`)."""
        return None

    def to_dict(self) -> dict[str, Any]:
        m: dict[str, Any] = self.metrics.to_dict() if self.metrics is not None else {}
        if m:
            m["max_rate_meeting_slo_rps"] = self.max_rate_meeting_slo_rps
        e = self.engine
        return {
            "label": self.label,
            "gpus": self.layout.gpus,
            "layout": self.layout.to_dict(),
            "feasible": self.feasible,
            "reason": self.reason,
            "meets_slo": self.meets_slo,
            "bound": self.bound,
            "engine": None
            if e is None
            else {
                "policy": e.policy,
                "chunk_tokens": e.chunk_tokens,
                "max_running": e.max_running,
                "kv_tokens": e.kv_tokens,
                "mem_fraction": e.mem_fraction,
            },
            "metrics": m,
        }


KV_FULL = 0.95  # peak KV use above which the pool, not the GPUs, bounds the batch


def limiting_part(
    bd: dict[str, float],
    metrics: ServeMetrics,
    model: ModelSpec,
    cluster: ClusterSpec,
    layout: Layout,
    batch: int,
) -> str:
    """What limits the layout at its operating point: the KV pool when it preempts or fills,
    else the largest part of the decode step of ``batch`` sequences. Compute vs memory
    bandwidth by the roofline ridge: a GEMM over ``m`` tokens with ``w``-byte weights is
    memory-bound when ``2 m / w < peak FLOP/s / bandwidth``; communication is inter-node
    when a stage spans nodes."""
    if metrics.preemptions > 0 or metrics.kv_peak_utilisation > KV_FULL:
        return "KV capacity"
    parts = {
        "attention": bd.get("attention", 0.0),
        "experts": bd.get("moe", 0.0) + bd.get("dense", 0.0),
        "communication": bd.get("comm", 0.0) + bd.get("p2p", 0.0),
        "pipeline bubbles": max(0.0, bd.get("bubble_s", 0.0)),
        "engine host work": bd.get("host_exposed_s", 0.0),  # moeplan.cost.host
    }
    top = max(parts, key=lambda k: parts[k])
    ridge = cluster.gpu.flops_bf16 / cluster.gpu.mem_bw
    m: float
    w: float
    if top == "attention":
        m, w = math.ceil(batch / layout.attn_dp), model.weight_bytes
    elif top == "experts":
        m, w = batch * model.top_k / model.num_experts, model.expert_weight_bytes
    elif top == "communication":
        inter = layout.stage_gpus > cluster.nvlink_domain
        return ("inter" if inter else "intra") + "-node communication"
    else:
        return top
    return ("memory bandwidth" if 2 * m / w < ridge else "compute") + f" ({top})"


def _run(
    cfg: EngineConfig, workload: ServeWorkload, evaluate: Evaluator, gpus: int, slo: SLO
) -> ServeMetrics:
    return summarize(simulate(generate(workload), cfg, evaluate), gpus, slo)


def run_workload(
    cfg: EngineConfig, workload: ServeWorkload, evaluate: Evaluator, gpus: int, slo: SLO
) -> tuple[SimResult, ServeMetrics]:
    """Simulate ``workload`` on engine ``cfg``: the raw run and its metrics."""
    res = simulate(generate(workload), cfg, evaluate)
    return res, summarize(res, gpus, slo)


def _has_limits(slo: SLO) -> bool:
    return slo.ttft_s is not None or slo.tpot_s is not None


def _best_knobs(
    cands: list[EngineConfig],
    evaluate: Evaluator,
    workload: ServeWorkload,
    slo: SLO,
    gpus: int,
    top_k: int,
    search_requests: int,
) -> tuple[float, Estimate, EngineConfig]:
    """Rank ``cands`` analytically, bisect the SLO rate of the best ``top_k``, keep the best."""
    isl, osl = workload.isl.mean, workload.osl.mean
    ranked = sorted(
        ((analytic_rate(evaluate, c, isl, osl, slo), c) for c in cands),
        key=lambda ec: -ec[0].rate_rps,
    )
    n = min(search_requests, workload.num_requests)
    probe = replace(workload, num_requests=n, rate=1.0, concurrency=None, think_s=0.0)
    best: tuple[float, Estimate, EngineConfig] | None = None
    for est, cfg in ranked[:top_k]:
        rate = est.rate_rps
        if _has_limits(slo):

            def run(r: float, cfg: EngineConfig = cfg) -> Probe:
                wl = replace(probe, num_requests=probe_requests(r, workload, slo, n))
                res = simulate(generate(wl.with_rate(r)), cfg, evaluate)
                return Probe(summarize(res, gpus, slo), run_stable(res, slo))

            rate = max_rate_meeting_slo(run, slo, hi=1.5 * est.rate_rps)
        if best is None or rate > best[0]:
            best = (rate, est, cfg)
    assert best is not None
    return best


def evaluate_layout(
    model: ModelSpec,
    cluster: ClusterSpec,
    cost: CostModel,
    layout: Layout,
    workload: ServeWorkload,
    slo: SLO,
    *,
    engine: str = "sglang",
    top_k: int = 2,
    evaluator_factory: EvaluatorFactory | None = None,
    routing: RoutingProfile | None = None,
    search_requests: int = SEARCH_REQUESTS,
    chunk_tokens: int | None = None,
    max_running: int | None = None,
    knobs: InstanceKnobs | None = None,
) -> ServeResult:
    """Search the engine knobs of ``layout`` and simulate ``workload`` with the best ones;
    ``chunk_tokens`` / ``max_running`` fix a knob instead (both given: no knob search);
    ``knobs`` (all-to-all backend, two-batch overlap, KV dtype) price the iterations."""
    try:
        layout.validate(model, cluster)
        kv_scale = knobs.kv_scale if knobs is not None else 1.0
        mtp = knobs.mtp if knobs is not None else 0
        given = knobs.mem_fraction if knobs is not None else None
        cands = candidates(
            engine, model, cluster, layout, chunk_tokens, max_running, kv_scale=kv_scale, mtp=mtp,
            mem_fraction=given, deepep=knobs is not None and knobs.a2a == "deepep",
            fractions=tuple(f for f in mem_fraction_values(engine, given) if f is not None),
        )  # fmt: skip
        evaluate = (
            evaluator_factory(layout)
            if evaluator_factory is not None
            else IterationModel(model, cluster, cost, layout, routing, knobs=knobs)
        )
    except MoeplanError as err:
        return ServeResult(layout=layout, feasible=False, reason=str(err))
    big = workload.isl.max + workload.osl.max
    cands = [c for c in cands if big <= c.kv_tokens_per_rank]
    if not cands:
        reason = f"request isl+osl ({big}) must fit one rank's KV pool"
        return ServeResult(layout=layout, feasible=False, reason=reason)
    rate, est, cfg = _best_knobs(
        cands, evaluate, workload, slo, layout.gpus, top_k, search_requests
    )
    metrics = _run(cfg, workload, evaluate, layout.gpus, slo)
    ctx = workload.isl.mean + workload.osl.mean // 2
    bd = (
        evaluate.breakdown(Batch(est.batch, ctx, ()))
        if isinstance(evaluate, IterationModel)
        else {}
    )
    if knobs is not None and cfg.mem_fraction is not None:  # the launch files carry it
        knobs = replace(knobs, mem_fraction=cfg.mem_fraction)
    return ServeResult(
        layout=layout,
        feasible=True,
        engine=cfg,
        metrics=metrics,
        max_rate_meeting_slo_rps=rate if _has_limits(slo) else None,
        meets_slo=metrics.meets(slo),
        bound=limiting_part(bd, metrics, model, cluster, layout, est.batch),
        estimate=est,
        breakdown=bd,
        knobs=knobs,
    )


def evaluate_layouts(
    model: ModelSpec,
    cluster: ClusterSpec,
    cost: CostModel,
    layouts: Sequence[Layout],
    workload: ServeWorkload,
    slo: SLO,
    *,
    engine: str = "sglang",
    top_k: int = 2,
    evaluator_factory: EvaluatorFactory | None = None,
    routing: RoutingProfile | None = None,
    search_requests: int = SEARCH_REQUESTS,
) -> list[ServeResult]:
    """:func:`evaluate_layout` for each layout, in the given order (see :func:`rank_results`)."""
    return [
        evaluate_layout(
            model,
            cluster,
            cost,
            lay,
            workload,
            slo,
            engine=engine,
            top_k=top_k,
            evaluator_factory=evaluator_factory,
            routing=routing,
            search_requests=search_requests,
        )
        for lay in layouts
    ]


OBJECTIVES = ("throughput-per-gpu", "goodput", "min-gpus", "latency")


def rank_results(
    results: Sequence[ServeResult], objective: str = "throughput-per-gpu"
) -> list[ServeResult]:
    """Best first: feasible before infeasible, SLO-meeting before not, then the objective
    (output tokens/s per GPU; goodput per GPU; fewest GPUs then throughput; lowest p90 E2E)."""
    if objective not in OBJECTIVES:
        raise MoeplanError(f"objective ({objective!r}) must be one of {OBJECTIVES}")

    def key(r: ServeResult) -> tuple:
        m = r.metrics
        if m is None:
            return (1, 1, 0.0)
        score = {
            "throughput-per-gpu": -m.output_tokens_per_s_per_gpu,
            "goodput": -m.goodput_rps_per_gpu,
            "min-gpus": r.layout.gpus - 1e-9 * m.output_tokens_per_s_per_gpu,
            "latency": m.e2e_p90_s,
        }[objective]
        return (0, 0 if r.meets_slo else 1, score)

    return sorted(results, key=key)
