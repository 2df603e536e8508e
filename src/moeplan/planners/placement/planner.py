"""Sem-MoE expert placement and data scheduling, with baselines (paper 002, §3, App. B).

Entry point :func:`place`: a routing trace (arrays, or a re-iterable source of chunks) and an
EP degree in; the placement of every method and its metrics on a held-out split out.

Pipeline (all pure numpy; the chunk source is the only thing that touches files):
1. split by request (seeded): ``fit`` / ``val`` (inside train) / ``test``;
2. affinity model on ``fit`` (:mod:`.placement_affinity`);
3. co-clustering of tokens and experts into C = ep groups with exact subproblem solvers
   (:mod:`.placement_cocluster`), then load balancing by swap repair (max/mean <= tol);
4. tables: token -> device confidences (attention-DP request scheduling, Algorithm 2),
   per-layer token -> device and the device n-gram Markov table (attention-TP, Algorithm 3);
5. guard: on ``val`` the Sem-MoE plan must beat contiguous placement's predicted MoE-layer
   time in a paired bootstrap over requests at a stated confidence, with its load balance
   within a margin (:mod:`.guard`), else it falls back to contiguous (so a trace without
   structure never gets worse);
6. metrics of every method on ``test`` in one streaming pass (:mod:`.placement_metrics`).

Departures from the paper: exact assignment / transportation steps instead of greedy passes;
attention-TP uses the token clustering shared across layers (one co-clustering for all
layers) and per-layer token tables derived from it, rather than a separate clustering per
layer; the validation guard is ours.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from moeplan.errors import require
from moeplan.planners.placement import baselines as base
from moeplan.planners.placement import cocluster as cc
from moeplan.planners.placement.affinity import (
    Affinity,
    ChunkSource,
    MarkovTable,
    device_sequence,
    fit_affinity,
    fit_markov,
    markov_key,
)
from moeplan.planners.placement.guard import RequestTally, decide
from moeplan.planners.placement.metrics import Evaluator, Tally, summarize
from moeplan.planners.placement.sched import (
    predict_devices,
    request_scores,
    schedule_requests,
    token_table,
)
from moeplan.traces.format import RoutingTrace, is_test_request

METHODS = ("contiguous", "eplb", "transition", "semmoe")


@dataclass(frozen=True, kw_only=True, slots=True)
class PlaceConfig:
    """Knobs of :func:`place` (defaults are the CLI's)."""

    ep: int
    mode: str = "dp"
    baselines: bool = True
    test_fraction: float = 0.25
    val_fraction: float = 0.2
    seed: int = 0
    max_tokens: int = 4096
    slack: float = 0.05
    balance_tol: float = 1.03
    step_tokens: int = 8192
    lookback: int = 1
    guard: bool = True
    redundant: int = 0  # extra expert slots per device (Sem-MoE and EPLB)

    def __post_init__(self) -> None:
        require(self.ep >= 1, f"ep ({self.ep}) must be >= 1")
        require(self.mode in ("dp", "tp"), f"mode ({self.mode!r}) must be 'dp' or 'tp'")
        require(self.balance_tol >= 1.0, f"balance_tol ({self.balance_tol}) must be >= 1")
        require(self.lookback in (1, 2), f"lookback ({self.lookback}) must be 1 or 2")
        require(self.redundant >= 0, f"redundant ({self.redundant}) must be >= 0")


@dataclass(frozen=True, kw_only=True, slots=True)
class MethodResult:
    name: str
    y: np.ndarray  # [L, E] device of each logical expert (its primary copy)
    metrics: dict[str, Any]
    replicas: np.ndarray | None = None  # [L, E, C] copies per device with redundant slots


@dataclass(frozen=True, kw_only=True, slots=True)
class PlacementResult:
    """Placements, tables and metrics of every method."""

    ep: int
    mode: str
    methods: dict[str, MethodResult]
    solve_s: float
    token_ids: np.ndarray  # [V]
    token_conf: np.ndarray  # [V, C] P(device | token): the request-scheduling table
    layer_device: np.ndarray  # [L, V] token -> device per layer (attention-TP)
    layer_conf: np.ndarray  # [L, V]
    markov: MarkovTable | None
    objective: dict[str, float]
    fallback: bool
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON summary (``moeplan place --json``)."""
        return {
            "ep": self.ep,
            "mode": self.mode,
            "solve_s": self.solve_s,
            "fallback": self.fallback,
            "objective": self.objective,
            "methods": {k: v.metrics for k, v in self.methods.items()},
            **self.extra,
        }


def physical_to_logical(y: np.ndarray, ep: int) -> np.ndarray:
    """[L, P] physical slot -> logical expert: device 0's experts (ascending), device 1's...

    ``y`` is [L, E] (one copy each, P = E) or replica counts [L, E, C] (P = E + redundant)."""
    if y.ndim == 2:
        return np.stack(
            [np.argsort(yl * yl.shape[0] + np.arange(len(yl)), kind="stable") for yl in y]
        )
    rep = y.astype(np.int64)
    per = rep.sum(axis=1)  # [L, C]
    require(
        bool((per == per[0, 0]).all()),
        f"replicas per device ({per.min()}..{per.max()}) must be equal on every device",
    )
    return np.stack(
        [
            np.concatenate(
                [np.repeat(np.arange(rep.shape[1]), rep[layer, :, c]) for c in range(ep)]
            )
            for layer in range(rep.shape[0])
        ]
    )


# ---------------------------------------------------------------- sources and validation
def as_source(
    trace: RoutingTrace | ChunkSource, *, num_layers: int, num_experts: int
) -> ChunkSource:
    """A re-iterable, validated chunk source from arrays or a chunk factory."""

    def check(chunk: RoutingTrace) -> RoutingTrace:
        require(
            chunk.num_layers == num_layers,
            f"trace layers ({chunk.num_layers}) must equal the model's MoE layers ({num_layers})",
        )
        hi = int(chunk.experts.max(initial=-1))
        require(
            hi < num_experts,
            f"trace expert ids (max {hi}) must be < the model's num_experts ({num_experts})",
        )
        return chunk

    def source() -> Iterator[RoutingTrace]:
        chunks = [trace] if isinstance(trace, RoutingTrace) else trace()
        empty = True
        for c in chunks:
            if c.num_tokens:
                empty = False
                yield check(c)
        require(not empty, "trace (0 occurrences) must not be empty")

    return source


def _subset(src: ChunkSource, pick: Callable[[RoutingTrace], np.ndarray]) -> ChunkSource:
    def source() -> Iterable[RoutingTrace]:
        for c in src():
            m = pick(c)
            if m.any():
                yield c.take(m)

    return source


def _split_masks(cfg: PlaceConfig) -> dict[str, Callable[[RoutingTrace], np.ndarray]]:
    """fit / val (inside train) / test masks by request, seeded."""

    def test(c: RoutingTrace) -> np.ndarray:
        return is_test_request(c.request_id, cfg.seed, cfg.test_fraction)

    def val(c: RoutingTrace) -> np.ndarray:
        return ~test(c) & is_test_request(c.request_id, cfg.seed + 7919, cfg.val_fraction)

    def fit(c: RoutingTrace) -> np.ndarray:
        return ~test(c) & ~val(c)

    return {"fit": fit, "val": val, "test": test}


# ---------------------------------------------------------------- source devices per method
def _request_order(rid: np.ndarray) -> tuple[np.ndarray, int]:
    _, first, inv = np.unique(rid, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inv], len(first)


@dataclass(kw_only=True, slots=True)
class _DPState:
    """Carry-over between chunks: Algorithm 2's mask and the round-robin counter."""

    mask: np.ndarray
    rr: int = 0


def _dp_sources(
    chunk: RoutingTrace, aff: Affinity, table: np.ndarray, st: _DPState, ep: int
) -> tuple[np.ndarray, np.ndarray]:
    """(Sem-MoE device, round-robin device) per occurrence."""
    req, num_r = _request_order(chunk.request_id)
    scores = request_scores(table, aff.rows_of(chunk.token_id), req, num_r)
    dev, st.mask = schedule_requests(scores, st.mask)
    rr = (st.rr + np.arange(num_r)) % ep
    st.rr += num_r
    return dev[req], rr[req]


def _tp_sources(
    chunk: RoutingTrace,
    aff: Affinity,
    res: PlacementResult,
    y: np.ndarray,
    markov: MarkovTable | None,
    ep: int,
) -> np.ndarray:
    """Per occurrence and layer: token table or Markov table, whichever is more confident."""
    n, num_l = chunk.num_tokens, chunk.num_layers
    rows = aff.rows_of(chunk.token_id)
    known = rows >= 0
    split = (np.arange(n) * ep) // max(n, 1)
    actual = device_sequence(chunk.experts, y, ep)
    src = np.empty((n, num_l), dtype=np.int64)
    for layer in range(num_l):
        tok_dev = np.where(known, res.layer_device[layer][np.maximum(rows, 0)], split)
        tok_conf = np.where(known, res.layer_conf[layer][np.maximum(rows, 0)], 0.0)
        if markov is None or layer == 0:
            src[:, layer] = tok_dev
            continue
        key = markov_key(actual, layer, markov.lookback, ep)
        src[:, layer] = predict_devices(
            tok_dev, tok_conf, markov.next[layer][key], markov.conf[layer][key]
        )
    return src


def _position_split(n: int, num_l: int, ep: int) -> np.ndarray:
    return np.repeat(((np.arange(n) * ep) // max(n, 1))[:, None], num_l, axis=1)


# ---------------------------------------------------------------- evaluation
def _sources_for(
    name: str,
    chunk: RoutingTrace,
    res: PlacementResult,
    aff: Affinity,
    cfg: PlaceConfig,
    markovs: dict[str, MarkovTable | None],
    dp: tuple[np.ndarray, np.ndarray] | None,
) -> np.ndarray:
    n, num_l = chunk.num_tokens, chunk.num_layers
    y = res.methods[name].y
    if dp is not None:
        s = dp[0] if name == "semmoe" and not res.fallback else dp[1]
        return np.repeat(s[:, None], num_l, axis=1)
    if name == "semmoe" and markovs.get(name) is not None:
        return _tp_sources(chunk, aff, res, y, markovs[name], cfg.ep)
    if name == "transition" and markovs.get(name) is not None:
        return _markov_only(chunk, y, markovs[name], cfg.ep)
    return _position_split(n, num_l, cfg.ep)


def _evaluate(
    src: ChunkSource,
    splits: dict[str, Callable[[RoutingTrace], np.ndarray]],
    res: PlacementResult,
    aff: Affinity,
    cfg: PlaceConfig,
    markovs: dict[str, MarkovTable | None],
    num_experts: int,
    hidden_bytes: int,
    evaluate: Evaluator,
    per_request: dict[str, RequestTally] | None = None,
) -> dict[str, dict[str, dict[str, Any]]]:
    """One streaming pass; metrics per split (e.g. val, test) and method; ``per_request``
    tallies (by method) the ``val`` split request by request for the guard."""
    tallies: dict[str, dict[str, Tally]] = {k: {} for k in splits}
    states = {k: _DPState(mask=np.zeros(cfg.ep, dtype=bool)) for k in splits}
    for full in src():
        for split_name, pick in splits.items():
            m = pick(full)
            if not m.any():
                continue
            chunk = full.take(m)
            dp = (
                _dp_sources(chunk, aff, res.token_conf, states[split_name], cfg.ep)
                if cfg.mode == "dp"
                else None
            )
            for name in res.methods:
                srcs = _sources_for(name, chunk, res, aff, cfg, markovs, dp)
                meth = res.methods[name]
                tallies[split_name].setdefault(
                    name, Tally(num_layers=chunk.num_layers, ep=cfg.ep)
                ).add(chunk.experts, meth.y if meth.replicas is None else meth.replicas, srcs)
                if per_request is not None and split_name == "val" and name in per_request:
                    per_request[name].add(chunk.request_id, chunk.experts, meth.y, srcs)

    def slots(name: str) -> int:  # physical experts of the method (replicas included)
        rep = res.methods[name].replicas
        return num_experts if rep is None else int(round(rep[0].sum()))

    return {
        s: {
            k: summarize(
                t,
                num_experts=slots(k),
                hidden_bytes=hidden_bytes,
                step_tokens=cfg.step_tokens,
                evaluate=evaluate,
            )
            for k, t in tl.items()
        }
        for s, tl in tallies.items()
    }


def _markov_only(
    chunk: RoutingTrace, y: np.ndarray, markov: MarkovTable | None, ep: int
) -> np.ndarray:
    """ExFlow-style: a token goes where its previous layer's experts mostly were."""
    src = _position_split(chunk.num_tokens, chunk.num_layers, ep)
    if markov is None:
        return src
    actual = device_sequence(chunk.experts, y, ep)
    for layer in range(1, chunk.num_layers):
        src[:, layer] = markov.next[layer][markov_key(actual, layer, markov.lookback, ep)]
    return src


# ---------------------------------------------------------------- the planner
def _semmoe(aff: Affinity, cfg: PlaceConfig) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """(row clusters x, balanced placement y, objectives normalised by train activations)."""
    w = aff.counts
    ours, greedy = cc.solve(w, aff.freq, cfg.ep, slack=cfg.slack, seed=cfg.seed)
    y = cc.balance_experts(w, ours.x, aff.hotness, cfg.ep, tol=cfg.balance_tol)
    total = float(w.sum()) or 1.0
    obj = {
        "cocluster": ours.objective / total,
        "greedy": greedy.objective / total,
        "balanced": cc.objective(w, ours.x, y) / total,
    }
    return ours.x, y, obj


def _layer_tables(aff: Affinity, y: np.ndarray, ep: int) -> tuple[np.ndarray, np.ndarray]:
    num_l, v = aff.counts.shape[0], aff.counts.shape[1]
    dev = np.zeros((num_l, v), dtype=np.int64)
    conf = np.zeros((num_l, v))
    for layer in range(num_l):
        g = aff.counts[layer] @ np.eye(ep, dtype=aff.counts.dtype)[y[layer]]
        tot = g.sum(axis=1)
        dev[layer] = g.argmax(axis=1)
        conf[layer] = np.where(tot > 0, g.max(axis=1) / np.maximum(tot, 1e-12), 0.0)
    return dev, conf


def place(
    trace: RoutingTrace | ChunkSource,
    *,
    num_layers: int,
    num_experts: int,
    hidden_bytes: int,
    evaluate: Evaluator,
    cfg: PlaceConfig,
) -> PlacementResult:
    """Plan Sem-MoE and the baselines on ``trace``; metrics on the held-out split."""
    require(
        num_experts % cfg.ep == 0,
        f"model.num_experts ({num_experts}) must be divisible by ep ({cfg.ep})",
    )
    src = as_source(trace, num_layers=num_layers, num_experts=num_experts)
    masks = _split_masks(cfg)
    fit_src = _subset(src, masks["fit"])
    trans = np.zeros((num_layers, num_experts, num_experts))
    budget = [262144]  # transition statistics from the first fit occurrences

    def count_transitions(chunk: RoutingTrace) -> None:
        if cfg.baselines and budget[0] > 0:
            part = chunk.experts[: budget[0]]
            budget[0] -= len(part)
            trans[:] += base.transition_counts(part, num_experts)

    t0 = time.perf_counter()
    aff = fit_affinity(
        fit_src,
        num_layers=num_layers,
        num_experts=num_experts,
        max_tokens=cfg.max_tokens,
        on_chunk=count_transitions,
    )
    require(
        aff.occurrences > 0 and len(aff.token_ids) > 0,
        "trace train split (0 occurrences) must not be empty; add requests",
    )
    x_sem, y_sem, obj = _semmoe(aff, cfg)
    rep_sem = (
        cc.add_replicas(aff.counts, x_sem, y_sem, cfg.ep, cfg.redundant) if cfg.redundant else None
    )
    conf = token_table(cc.gains(aff.counts, y_sem, cfg.ep))
    layer_dev, layer_conf = _layer_tables(aff, y_sem, cfg.ep)
    markovs: dict[str, MarkovTable | None] = {}
    if cfg.mode == "tp":
        markovs["semmoe"] = fit_markov(fit_src, y_sem, cfg.ep, cfg.lookback)
    solve_s = time.perf_counter() - t0
    methods = {
        "contiguous": MethodResult(
            name="contiguous", y=base.contiguous(num_layers, num_experts, cfg.ep), metrics={}
        )
    }
    if cfg.baselines:
        y_e, rep_e = base.eplb_placement(aff.hotness, cfg.ep, redundant=cfg.redundant)
        methods["eplb"] = MethodResult(
            name="eplb", y=y_e, metrics={}, replicas=rep_e if cfg.redundant else None
        )
        y_tr = base.transition_placement(trans, aff.hotness, cfg.ep, tol=cfg.balance_tol)
        methods["transition"] = MethodResult(name="transition", y=y_tr, metrics={})
        if cfg.mode == "tp":
            markovs["transition"] = fit_markov(fit_src, y_tr, cfg.ep, cfg.lookback)
    methods["semmoe"] = MethodResult(name="semmoe", y=y_sem, metrics={}, replicas=rep_sem)
    res = PlacementResult(
        ep=cfg.ep,
        mode=cfg.mode,
        methods=methods,
        solve_s=solve_s,
        token_ids=aff.token_ids,
        token_conf=conf,
        layer_device=layer_dev,
        layer_conf=layer_conf,
        markov=markovs.get("semmoe"),
        objective=obj,
        fallback=False,
    )
    splits = {"test": masks["test"], "val": masks["val"]} if cfg.guard else {"test": masks["test"]}
    per_request = (
        {k: RequestTally(num_layers=num_layers, ep=cfg.ep) for k in ("semmoe", "contiguous")}
        if cfg.guard
        else None
    )
    metrics = _evaluate(
        src,
        splits,
        res,
        aff,
        cfg,
        markovs,
        num_experts=num_experts,
        hidden_bytes=hidden_bytes,
        evaluate=evaluate,
        per_request=per_request,
    )
    test = metrics["test"]
    require(bool(test), "trace test split (0 occurrences) must not be empty; add requests")
    # guard (.guard): a paired bootstrap over validation requests; without a gain at the
    # stated confidence, Sem-MoE is contiguous placement + round robin, whose held-out
    # metrics are the contiguous row's by construction
    verdict = None
    if per_request is not None and per_request["semmoe"].tokens:
        verdict = decide(
            per_request["semmoe"],
            per_request["contiguous"],
            num_experts=num_experts,
            step_tokens=cfg.step_tokens,
            hidden_bytes=hidden_bytes,
            evaluate=evaluate,
            balance_tol=cfg.balance_tol,
            seed=cfg.seed,
        )
        val = metrics.get("val") or {}
        if "semmoe" in val and "contiguous" in val:  # the point estimate the old guard used
            verdict["val_time_ratio"] = (
                val["semmoe"]["moe_layer_time_s"] / val["contiguous"]["moe_layer_time_s"]
            )
        res.extra["guard"] = verdict
    fallback = verdict is not None and not verdict["keep"]
    if fallback:
        methods["semmoe"] = MethodResult(name="semmoe", y=methods["contiguous"].y, metrics={})
        test["semmoe"] = test["contiguous"]
    final = {
        k: MethodResult(name=k, y=m.y, metrics=test[k], replicas=m.replicas)
        for k, m in methods.items()
    }
    return _with_methods(res, final, fallback)


def _with_methods(
    res: PlacementResult, methods: dict[str, MethodResult], fallback: bool
) -> PlacementResult:
    return PlacementResult(
        ep=res.ep,
        mode=res.mode,
        methods=methods,
        solve_s=res.solve_s,
        token_ids=res.token_ids,
        token_conf=res.token_conf,
        layer_device=res.layer_device,
        layer_conf=res.layer_conf,
        markov=res.markov,
        objective=res.objective,
        fallback=fallback,
        extra=res.extra,
    )


def cost_evaluator(cost_model: Any, model: Any, ep: int, nodes: int = 1) -> Evaluator:
    """MoE layer time from :class:`moeplan.cost.CostModel`: expert FFN on the busiest GPU
    plus dispatch and combine all-to-all of the bytes the busiest rank sends."""

    def evaluate(tokens_per_expert: float, num_local_experts: int, send_bytes: float) -> float:
        comp = cost_model.expert_ffn(model, tokens_per_expert, num_local_experts)
        comm = (
            cost_model.collective("all_to_all", max(send_bytes, 1.0), ep, nodes) if ep > 1 else 0.0
        )
        return float(comp + 2.0 * comm)

    return evaluate
