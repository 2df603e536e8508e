"""Online data scheduling of Sem-MoE (paper 002, §3.3 and App. B.2, Algorithms 2 and 3).

Pure numpy, table look-ups only, so the runtime can call it per batch.

- Attention-DP (Algorithm 2): a request's score for device c is the sum over its tokens of
  P(c | token) (the token-to-device confidence table); requests take, in arrival order, the
  best device not yet masked; a chosen device is masked and the mask resets once all C are
  masked, so every round of C requests covers every device once.
- Attention-TP (Algorithm 3): each token's device at a layer comes from the token table or
  from the device n-gram (Markov) table, whichever is more confident; the batch is argsorted
  by device, grouped and padded to the largest group (the layout the shuffled
  reduce-scatter / all-gather exchange), and the inverse restores the original order.

Departure: Algorithm 2 as printed scores with the hard token -> device table; we use the
soft confidences (same arg-max for confident tokens, better ties); the hard vote is
``soft=False``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def request_scores(
    table: np.ndarray, rows: np.ndarray, request_index: np.ndarray, num_requests: int
) -> np.ndarray:
    """score [R, C] = sum over a request's tokens of table[row] (rows < 0 vote nothing)."""
    ep = table.shape[1]
    known = rows >= 0
    out = np.zeros((num_requests, ep))
    for c in range(ep):
        out[:, c] = np.bincount(
            request_index[known], weights=table[rows[known], c], minlength=num_requests
        )
    return out


def schedule_requests(
    scores: np.ndarray, mask: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Mask-and-reset scheduling; returns (device per request, mask after the last one)."""
    num_r, ep = scores.shape
    mask = np.zeros(ep, dtype=bool) if mask is None else mask.copy()
    out = np.empty(num_r, dtype=np.int64)
    for r in range(num_r):
        if mask.all():
            mask[:] = False
        c = int(np.argmax(np.where(mask, -np.inf, scores[r])))
        out[r] = c
        mask[c] = True
    return out, mask


def token_table(gain: np.ndarray, soft: bool = True) -> np.ndarray:
    """Token -> device table [V, C]: P(c | token) (soft) or one-hot of the arg-max."""
    total = gain.sum(axis=1, keepdims=True)
    prob = np.where(total > 0, gain / np.maximum(total, 1e-300), 1.0 / gain.shape[1])
    if soft:
        return prob
    return np.eye(gain.shape[1])[prob.argmax(axis=1)]


def predict_devices(
    tok_dev: np.ndarray, tok_conf: np.ndarray, mk_dev: np.ndarray, mk_conf: np.ndarray
) -> np.ndarray:
    """Per token: the token-table device unless the Markov table is more confident."""
    return np.where(mk_conf > tok_conf, mk_dev, tok_dev)


@dataclass(frozen=True, kw_only=True, slots=True)
class TokenPlan:
    """Shuffle plan of one batch for attention-TP.

    ``padded[c * width + j]`` is the batch index of the j-th token sent to device c (-1 for
    padding); ``inverse[i]`` is where token i sits in that padded layout, so
    ``shuffled[inverse]`` restores the original order; ``counts[c]`` tokens per device.
    """

    order: np.ndarray  # [n] stable argsort by device
    counts: np.ndarray  # [C]
    width: int
    padded: np.ndarray  # [C * width]
    inverse: np.ndarray  # [n]


def token_plan(devices: np.ndarray, ep: int) -> TokenPlan:
    """Argsort, group and pad (Algorithm 3, lines 3-7) and its inverse (lines 14-18)."""
    order = np.argsort(devices, kind="stable")
    counts = np.bincount(devices, minlength=ep)
    width = int(counts.max(initial=0))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    sorted_dev = devices[order]
    slot = np.arange(len(devices)) - starts[sorted_dev] + sorted_dev * width
    padded = np.full(ep * width, -1, dtype=np.int64)
    padded[slot] = order
    inverse = np.empty(len(devices), dtype=np.int64)
    inverse[order] = slot
    return TokenPlan(order=order, counts=counts, width=width, padded=padded, inverse=inverse)
