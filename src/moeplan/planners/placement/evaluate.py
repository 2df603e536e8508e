"""Sem-MoE held-out evaluation: chunk sources, request splits, the source device each method
gives a token, and one streaming pass that tallies every method on every split (paper 002,
§3.1, Algorithms 2-3 for the online scheduling; metrics in :mod:`.metrics`).

Split out of :mod:`.planner` (which plans and decides); pure numpy over chunk sources.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from moeplan.errors import require
from moeplan.planners.placement.affinity import (
    Affinity,
    ChunkSource,
    MarkovTable,
    device_sequence,
    markov_key,
)
from moeplan.planners.placement.guard import RequestTally
from moeplan.planners.placement.metrics import Evaluator, Tally, summarize
from moeplan.planners.placement.result import PlaceConfig, PlacementResult
from moeplan.planners.placement.sched import (
    predict_devices,
    request_scores,
    schedule_requests,
)
from moeplan.traces.format import RoutingTrace, is_test_request


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
