"""MixServe automatic analyzer: enumerate, evaluate, filter, rank (paper §III-B).

Entry point :func:`analyze` — a pure function over specs and a cost model: it enumerates the
strategy grammar (:mod:`strategy_space`), evaluates each with an evaluator
(default :class:`~moeplan.planners.strategy.cost.StrategyEvaluator`: Eqs. 4-11 and the fused
Algs. 1-2), drops what breaks divisibility or memory (Eq. 8), applies the TTFT/ITL SLOs,
ranks, and evaluates the named baselines of §IV-A on the same footing. :func:`pareto_front`
gives the throughput-per-GPU vs TTFT front; :func:`to_plan` the :class:`Plan` of family
``strategy`` (docs/API.md).

Ranking (the paper names no single objective): stable queues first, then the chosen metric —
``throughput`` (default, higher is better), ``ttft`` or ``itl`` (lower is better) — with the
other metrics and the strategy key as deterministic tie-breaks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from moeplan.errors import MoeplanError, require
from moeplan.planners.layout import Layout
from moeplan.planners.plan import Plan
from moeplan.planners.strategy.cost import CostLike, StrategyEvaluator, StrategyResult
from moeplan.planners.strategy.space import enumerate_strategies, mixserve_default, named_baselines
from moeplan.specs import ClusterSpec, ModelSpec, RoutingProfile, Workload
from moeplan.units import GIB

RANK_BY = ("throughput", "ttft", "itl")

Evaluate = Callable[[Layout], StrategyResult | None]


@dataclass(frozen=True, kw_only=True, slots=True)
class Analysis:
    """What :func:`analyze` found: ranked strategies, baselines and bookkeeping."""

    strategies: tuple[StrategyResult, ...]
    baselines: dict[str, StrategyResult | None]
    evaluated: int
    rejected_shape: int
    rejected_memory: int
    rejected_slo: int
    search_s: float
    pareto: tuple[StrategyResult, ...] = field(default=())

    @property
    def best(self) -> StrategyResult | None:
        return self.strategies[0] if self.strategies else None


def rank_key(rank_by: str) -> Callable[[StrategyResult], tuple]:
    """Sort key: stable first, then the metric, then deterministic tie-breaks."""
    require(rank_by in RANK_BY, f"rank_by ({rank_by!r}) must be one of {RANK_BY}")

    def key(r: StrategyResult) -> tuple:
        metric = {"throughput": -r.throughput_tokens_per_s, "ttft": r.ttft_s, "itl": r.itl_s}[
            rank_by
        ]
        return (
            not r.stable,
            metric,
            r.ttft_s,
            r.itl_s,
            -r.throughput_tokens_per_s,
            r.mem_bytes_per_gpu,
            r.strategy.key(),
        )

    return key


def meets_slo(r: StrategyResult, ttft_slo_s: float | None, itl_slo_s: float | None) -> bool:
    """Whether ``r`` meets both SLOs (``None`` = no bound)."""
    return (ttft_slo_s is None or r.ttft_s <= ttft_slo_s) and (
        itl_slo_s is None or r.itl_s <= itl_slo_s
    )


def pareto_front(results: Sequence[StrategyResult]) -> list[StrategyResult]:
    """Results not dominated in (lower TTFT, higher throughput per GPU), by TTFT."""
    ordered = sorted(results, key=lambda r: (r.ttft_s, -r.throughput_per_gpu))
    front: list[StrategyResult] = []
    best = -math.inf
    for r in ordered:
        if r.throughput_per_gpu > best:
            front.append(r)
            best = r.throughput_per_gpu
    return front


def _no_fit_error(model: ModelSpec, cluster: ClusterSpec, fitted: list[StrategyResult]) -> str:
    least = min(fitted, key=lambda r: r.mem_bytes_per_gpu)
    return (
        f"model {model.name} needs at least {least.mem_bytes_per_gpu / GIB:.1f} GiB per GPU "
        f"({least.strategy.label}) but cluster {cluster.name} has "
        f"{cluster.gpu.mem_bytes / GIB:.1f} GiB per GPU: fits no strategy"
    )


def analyze(
    model: ModelSpec,
    cluster: ClusterSpec,
    workload: Workload,
    cost_model: CostLike | None,
    *,
    any_divisor: bool = False,
    ttft_slo_s: float | None = None,
    itl_slo_s: float | None = None,
    rank_by: str = "throughput",
    evaluate: Evaluate | None = None,
    node_counts: Sequence[int] | None = None,
) -> Analysis:
    """Rank every strategy of the grammar for ``model`` on ``cluster`` under ``workload``.

    ``node_counts`` (e.g. ``[1, 2, 4]``) also enumerates smaller deployments of the same
    machines, which is what gives the throughput-per-GPU vs TTFT Pareto front its shape;
    the named baselines always use the whole cluster.

    Raises :class:`MoeplanError` when no strategy fits memory (naming the per-GPU bytes the
    most frugal strategy needs) or no strategy fits the model's shape.
    """
    key = rank_key(rank_by)
    t0 = time.perf_counter()
    ev: Evaluate
    if evaluate is not None:
        require(node_counts is None, "analyze: node_counts needs the built-in evaluator")
        ev = evaluate
    elif cost_model is None:
        raise MoeplanError("analyze: cost_model (None) is needed when no evaluate is given")
    else:
        ev = StrategyEvaluator(model, cluster, workload, cost_model)
    results: list[StrategyResult] = []
    shape_bad = 0
    for n in node_counts or [cluster.num_nodes]:
        require(
            1 <= n <= cluster.num_nodes, f"node count ({n}) must be in [1, {cluster.num_nodes}]"
        )
        ev_n = ev
        if n != cluster.num_nodes:  # node_counts needs the built-in evaluator (checked above)
            assert cost_model is not None
            ev_n = StrategyEvaluator(model, cluster.with_nodes(n), workload, cost_model)
        for s in enumerate_strategies(n, cluster.gpus_per_node, any_divisor):
            r = ev_n(s)
            if r is None:
                shape_bad += 1
            else:
                results.append(r)
    if not results:
        raise MoeplanError(
            f"model {model.name} fits no strategy shape on {cluster.name} "
            f"(heads {model.num_attention_heads}, experts {model.num_experts})"
        )
    fitting = [r for r in results if r.fits]
    if not fitting:
        raise MoeplanError(_no_fit_error(model, cluster, results))
    kept = sorted((r for r in fitting if meets_slo(r, ttft_slo_s, itl_slo_s)), key=key)
    search_s = time.perf_counter() - t0
    baselines = {
        name: ev(s) for name, s in named_baselines(cluster.num_nodes, cluster.gpus_per_node).items()
    }
    return Analysis(
        strategies=tuple(kept),
        baselines=baselines,
        evaluated=len(results),
        rejected_shape=shape_bad,
        rejected_memory=len(results) - len(fitting),
        rejected_slo=len(fitting) - len(kept),
        search_s=search_s,
        pareto=tuple(pareto_front(kept)),
    )


def zipf_routing(num_experts: int, top_k: int, skew: float, seed: int = 0) -> RoutingProfile:
    """Static top-k routing whose expert loads follow Zipf(``skew``), experts shuffled by
    ``seed`` (0 = balanced). One load row, applied to every MoE layer."""
    require(skew >= 0, f"expert skew ({skew}) must be >= 0")
    load = 1.0 / np.arange(1, num_experts + 1, dtype=float) ** skew
    load = np.random.default_rng(seed).permutation(load)
    return RoutingProfile(
        top_k=top_k,
        expert_load=(tuple(float(v) for v in load),),
        source=f"zipf({skew}, seed={seed})",
    )


def evaluate_mixserve_default(
    model: ModelSpec, cluster: ClusterSpec, workload: Workload, cost_model: CostLike
) -> StrategyResult | None:
    """The paper's TP-intra / EP-inter fused hybrid, evaluated (None if shape breaks)."""
    ev = StrategyEvaluator(model, cluster, workload, cost_model)
    return ev(mixserve_default(cluster.num_nodes, cluster.gpus_per_node))


def gains(best: StrategyResult, baseline: StrategyResult | None) -> dict | None:
    """Speed-ups of ``best`` over ``baseline`` (>1 = better): TTFT, ITL, throughput."""
    if baseline is None:
        return None
    return {
        "ttft": _ratio(baseline.ttft_s, best.ttft_s),
        "itl": _ratio(baseline.itl_s, best.itl_s),
        "throughput": _ratio(best.throughput_tokens_per_s, baseline.throughput_tokens_per_s),
    }


def _ratio(a: float, b: float) -> float | None:
    if not (math.isfinite(a) and math.isfinite(b)) or b <= 0:
        return None
    return a / b


def _num(x: float | None) -> float | None:
    return x if x is None or math.isfinite(x) else None


def result_dict(r: StrategyResult) -> dict:
    """JSON-ready view of one result (``inf`` becomes ``null``)."""
    s = r.strategy
    return {
        "attn": {"tp": s.attn_tp, "dp": s.attn_dp},
        "moe": {"tp": s.moe_tp, "ep": s.moe_ep},
        "pp": s.pp,
        "fused": s.fused,
        "label": s.label,
        "num_gpus": r.num_gpus,
        "ttft_s": _num(r.ttft_s),
        "itl_s": _num(r.itl_s),
        "throughput_tokens_per_s": _num(r.throughput_tokens_per_s),
        "throughput_per_gpu": _num(r.throughput_per_gpu),
        "mem_bytes_per_gpu": r.mem_bytes_per_gpu,
        "fits": r.fits,
        "memory": r.memory,
        "comm_share_prefill": r.prefill.comm_share,
        "comm_share_decode": r.decode.comm_share,
        "prefill_s": {
            "compute": r.prefill.compute_s,
            "comm": r.prefill.comm_s,
            "p2p": r.prefill.p2p_s,
            "comm_unfused": r.prefill.comm_unfused_s,
        },
        "decode_s": {
            "compute": r.decode.compute_s,
            "comm": r.decode.comm_s,
            "p2p": r.decode.p2p_s,
            "comm_unfused": r.decode.comm_unfused_s,
        },
        "rho": _num(r.rho),
        "stable": r.stable,
    }


def to_plan(
    r: StrategyResult,
    *,
    model: str = "",
    cluster: str = "",
    baselines: dict[str, StrategyResult | None] | None = None,
) -> Plan:
    """The :class:`~moeplan.planners.plan.Plan` of family ``strategy`` for result ``r``."""
    d = result_dict(r)
    predicted = {
        k: d[k]
        for k in (
            "ttft_s",
            "itl_s",
            "throughput_tokens_per_s",
            "mem_bytes_per_gpu",
            "comm_share_prefill",
            "comm_share_decode",
            "prefill_s",
            "decode_s",
            "rho",
            "stable",
        )
    }
    base = {
        name: (None if b is None else {**result_dict(b), "gains": gains(r, b)})
        for name, b in (baselines or {}).items()
    }
    return Plan(
        family="strategy",
        model=model,
        cluster=cluster,
        layout=r.strategy.plan_layout(),
        details={"fused": r.strategy.fused, "label": r.strategy.label},
        predicted=predicted,
        baselines=base,
    )
