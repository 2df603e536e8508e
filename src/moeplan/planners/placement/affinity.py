"""Affinity model of Sem-MoE (paper 002, §3.2 and App. B.1), fitted by streaming a trace.

- token -> expert activation counts per MoE layer, A[l, t, e], kept for the ``max_tokens``
  most frequent tokens (two passes over the chunks: frequencies, then counts); the routing
  probability is P(e | t) = A[l, t, e] / f_t (the paper's token-to-expert confidence table);
- expert hotness h[l, e] (all train activations, rare tokens included);
- n-gram device-transition tables (n = 2 by default, i.e. one previous layer; the paper uses
  2-gram in §3.3 and says "2 looking-back layers" in B.1 — ``lookback`` covers both): counts
  of (devices at the previous ``lookback`` layers) -> device at layer l, with the confidence
  max / sum of each row. The device of an occurrence at a layer is the device holding most
  of its k experts under the placement.

Departure: out-of-vocabulary tokens (the paper matches them by embedding distance, which needs
the model) simply cast no vote; the Markov table covers them in attention-TP mode.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from moeplan.errors import require
from moeplan.traces.format import RoutingTrace
from moeplan.traces.stats import majority_device

ChunkSource = Callable[[], Iterable[RoutingTrace]]


@dataclass(frozen=True, kw_only=True, slots=True)
class Affinity:
    """Token-expert statistics of the train split (rows = kept tokens, sorted by id)."""

    token_ids: np.ndarray  # [V] int64, sorted
    counts: np.ndarray  # [L, V, E] float32 activation counts
    freq: np.ndarray  # [V] float64 occurrences
    hotness: np.ndarray  # [L, E] float64, all train activations
    occurrences: int  # train occurrences, all tokens

    def rows_of(self, token_id: np.ndarray) -> np.ndarray:
        """Row of each token id, -1 when the token is not in the table."""
        if len(self.token_ids) == 0:
            return np.full(len(token_id), -1, dtype=np.int64)
        pos = np.searchsorted(self.token_ids, token_id).clip(max=len(self.token_ids) - 1)
        return np.where(self.token_ids[pos] == token_id, pos, -1)


def _count_layer(experts: np.ndarray, rows: np.ndarray, num_rows: int, e: int) -> np.ndarray:
    valid = (experts >= 0) & (rows[:, None] >= 0)
    flat = (rows[:, None] * e + experts.astype(np.int64))[valid]
    return np.bincount(flat, minlength=num_rows * e).reshape(num_rows, e)


def fit_affinity(
    train: ChunkSource,
    *,
    num_layers: int,
    num_experts: int,
    max_tokens: int = 16384,
    on_chunk: Callable[[RoutingTrace], None] | None = None,
) -> Affinity:
    """Two streaming passes: token frequencies, then counts for the frequent tokens.

    ``on_chunk`` (optional) sees every chunk of the second pass, so callers can gather other
    statistics without a third read of the trace."""
    freq_all = np.zeros(0, dtype=np.int64)  # indexed by token id, grows as ids appear
    hot = np.zeros((num_layers, num_experts))
    occ = 0
    for chunk in train():
        require(
            chunk.token_id.min(initial=0) >= 0,
            f"trace.token_id (min {chunk.token_id.min()}) must be >= 0",
        )
        c = np.bincount(chunk.token_id)
        if len(c) > len(freq_all):
            freq_all = np.concatenate([freq_all, np.zeros(len(c) - len(freq_all), np.int64)])
        freq_all[: len(c)] += c
        occ += chunk.num_tokens
        ex = chunk.experts.reshape(chunk.num_tokens, -1) + (
            np.arange(num_layers) * num_experts
        ).repeat(chunk.top_k)
        ex = ex[chunk.experts.reshape(chunk.num_tokens, -1) >= 0]
        hot += np.bincount(ex, minlength=num_layers * num_experts).reshape(num_layers, -1)
    ids = np.flatnonzero(freq_all)
    cnt = freq_all[ids].astype(np.float64)
    keep = np.argsort(-cnt, kind="stable")[:max_tokens]
    order = np.argsort(ids[keep])
    token_ids, freq = ids[keep][order], cnt[keep][order]
    counts = np.zeros((num_layers, len(token_ids), num_experts), dtype=np.float32)
    aff = Affinity(token_ids=token_ids, counts=counts, freq=freq, hotness=hot, occurrences=occ)
    for chunk in train():
        if on_chunk is not None:
            on_chunk(chunk)
        rows = aff.rows_of(chunk.token_id)
        for layer in range(num_layers):
            counts[layer] += _count_layer(
                chunk.experts[:, layer], rows, len(token_ids), num_experts
            )
    return aff


@dataclass(frozen=True, kw_only=True, slots=True)
class MarkovTable:
    """Device n-gram table: next[l, key] predicted device, conf[l, key] its probability."""

    lookback: int
    next: np.ndarray  # [L, ep**lookback] int64
    conf: np.ndarray  # [L, ep**lookback] float64


def device_sequence(experts: np.ndarray, y: np.ndarray, ep: int) -> np.ndarray:
    """Majority device per occurrence and layer [N, L] under placement y [L, E]."""
    num_l = experts.shape[1]
    out = np.empty(experts.shape[:2], dtype=np.int64)
    for layer in range(num_l):
        out[:, layer] = majority_device(experts[:, layer].astype(np.int64), y[layer], ep)
    return out


def markov_key(devices: np.ndarray, layer: int, lookback: int, ep: int) -> np.ndarray:
    """Key of the previous ``lookback`` devices before ``layer`` (missing layers count as 0)."""
    key = np.zeros(devices.shape[0], dtype=np.int64)
    for back in range(lookback, 0, -1):
        src = layer - back
        key = key * ep + (devices[:, src] if src >= 0 else 0)
    return key


def fit_markov(train: ChunkSource, y: np.ndarray, ep: int, lookback: int = 1) -> MarkovTable:
    """Count device transitions on the train split under placement y."""
    num_l = y.shape[0]
    table = np.zeros((num_l, ep**lookback, ep))
    for chunk in train():
        dev = device_sequence(chunk.experts, y, ep)
        for layer in range(1, num_l):
            key = markov_key(dev, layer, lookback, ep)
            np.add.at(table[layer], (key, dev[:, layer]), 1.0)
    total = table.sum(axis=2)
    nxt = table.argmax(axis=2)
    conf = np.where(total > 0, table.max(axis=2) / np.maximum(total, 1.0), 0.0)
    return MarkovTable(lookback=lookback, next=nxt, conf=conf)
