"""Trace statistics that Sem-MoE reports (paper 002, App. A.2, Fig. 6(b)-(c)).

- ``kurtosis``: Pearson kurtosis (normal = 3) of each token's activation-count vector over the
  E experts of a layer, for tokens seen at least ``min_occurrences`` times; the paper finds
  most values above 8 in DeepSeek-V2-Lite.
- static token -> top-k predictor on a held-out split by request: from the train split, a
  token's predicted set is its experts with empirical P(e | token) >= ``min_prob`` (at most k);
  on the test split, micro precision / recall / F1 of that set against the routed set. The
  paper reports 96.3 % precision and 78.8 % F1 but does not say how its set is sized; a
  probability threshold is the reading that makes precision and F1 differ.
- next-layer device prediction looking back n = 1..5 layers: the device of an occurrence at a
  layer is the device holding most of its k experts under contiguous EP placement; a table
  from the previous n devices to the most frequent next device is fitted on train and scored
  on test (the paper reports ~70 % at n = 5). The table is sparse (only the keys seen in
  training), so memory is O(occurrences), not O(ep^n); an unseen key predicts device 0.
"""

from __future__ import annotations

import numpy as np

from moeplan.errors import check_int, require
from moeplan.traces.format import RoutingTrace, split

MAX_LOOKBACK = 5  # Sem-MoE Fig. 6(c) looks back 1..5 layers


def _counts(trace: RoutingTrace, layer: int, rows: np.ndarray, num_rows: int) -> np.ndarray:
    e = trace.num_experts
    ex = trace.experts[:, layer, :].astype(np.int64)
    valid = ex >= 0
    flat = (np.repeat(rows, ex.shape[1]).reshape(ex.shape) * e + ex)[valid]
    return np.bincount(flat, minlength=num_rows * e).reshape(num_rows, e).astype(np.float64)


def activation_kurtosis(trace: RoutingTrace, min_occurrences: int = 20) -> np.ndarray:
    """Pearson kurtosis per (frequent token, layer), flattened."""
    uniq, inv, cnt = np.unique(trace.token_id, return_inverse=True, return_counts=True)
    keep = cnt >= min_occurrences
    if not keep.any():
        return np.zeros(0)
    out = []
    for layer in range(trace.num_layers):
        c = _counts(trace, layer, inv, len(uniq))[keep]
        mu = c.mean(axis=1, keepdims=True)
        var = ((c - mu) ** 2).mean(axis=1)
        m4 = ((c - mu) ** 4).mean(axis=1)
        out.append(np.where(var > 0, m4 / np.maximum(var, 1e-300) ** 2, 0.0))
    return np.concatenate(out)


def static_predictor_scores(
    train: RoutingTrace, test: RoutingTrace, min_prob: float = 0.5
) -> dict[str, float]:
    """Micro precision / recall / F1 of the static token -> expert-set predictor."""
    uniq, inv_tr, cnt = np.unique(train.token_id, return_inverse=True, return_counts=True)
    k, e = train.top_k, train.num_experts
    pos = np.searchsorted(uniq, test.token_id).clip(max=len(uniq) - 1)
    known = uniq[pos] == test.token_id
    tp = fp = fn = 0
    for layer in range(train.num_layers):
        prob = _counts(train, layer, inv_tr, len(uniq)) / cnt[:, None]
        rank = np.argsort(-prob, axis=1, kind="stable")[:, :k]
        pred = np.zeros_like(prob, dtype=bool)
        np.put_along_axis(pred, rank, True, axis=1)
        pred &= prob >= min_prob
        actual = np.zeros((test.num_tokens, e), dtype=bool)
        ex = test.experts[:, layer, :].astype(np.int64)
        r = np.repeat(np.arange(test.num_tokens), ex.shape[1]).reshape(ex.shape)
        actual[r[ex >= 0], ex[ex >= 0]] = True
        p = pred[pos] & known[:, None]
        tp += int((p & actual).sum())
        fp += int((p & ~actual).sum())
        fn += int((~p & actual).sum())
    precision = tp / max(tp + fp, 1)
    recall = tp / max(tp + fn, 1)
    f1 = 2 * precision * recall / max(precision + recall, 1e-12)
    return {"precision": precision, "recall": recall, "f1": f1}


def majority_device(experts: np.ndarray, expert_device: np.ndarray, ep: int) -> np.ndarray:
    """Device holding most of each row's experts (ties: lowest device). experts [..., k]."""
    dev = np.where(experts >= 0, expert_device[np.maximum(experts, 0)], ep)
    votes = np.zeros((*experts.shape[:-1], ep + 1), dtype=np.int32)
    for j in range(experts.shape[-1]):
        np.put_along_axis(
            votes, dev[..., j : j + 1], np.take_along_axis(votes, dev[..., j : j + 1], -1) + 1, -1
        )
    return votes[..., :ep].argmax(axis=-1)


def _fit_table(key: np.ndarray, nxt: np.ndarray, ep: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted seen keys and, per key, the most frequent next device (ties: lowest)."""
    pair, cnt = np.unique(key * ep + nxt, return_counts=True)
    k, dev = pair // ep, pair % ep
    order = np.lexsort((dev, -cnt, k))  # per key: highest count first, then lowest device
    k, dev = k[order], dev[order]
    first = np.r_[True, k[1:] != k[:-1]]
    return k[first], dev[first]


def lookback_accuracy(
    train: RoutingTrace, test: RoutingTrace, ep: int, max_lookback: int = 5
) -> list[float]:
    """Accuracy of predicting the next layer's device from the previous n devices."""
    e = train.num_experts
    check_int("ep", ep, 1, e)
    check_int("max_lookback", max_lookback, 1, MAX_LOOKBACK)
    require(e % ep == 0, f"num_experts ({e}) must be divisible by ep ({ep})")
    dev_of = np.arange(e) // (e // ep)
    d_tr = majority_device(train.experts.astype(np.int64), dev_of, ep)  # [N, L]
    d_te = majority_device(test.experts.astype(np.int64), dev_of, ep)
    out = []
    for n in range(1, max_lookback + 1):
        hits = total = 0
        for layer in range(n, train.num_layers):
            key_tr = np.zeros(len(d_tr), dtype=np.int64)  # ep <= 2^15, n <= 5: < 2^63
            key_te = np.zeros(len(d_te), dtype=np.int64)
            for back in range(1, n + 1):
                key_tr = key_tr * ep + d_tr[:, layer - back]
                key_te = key_te * ep + d_te[:, layer - back]
            keys, best = _fit_table(key_tr, d_tr[:, layer], ep)
            at = np.searchsorted(keys, key_te).clip(max=max(len(keys) - 1, 0))
            seen = (keys[at] == key_te) if len(keys) else np.zeros(len(key_te), bool)
            pred = np.where(seen, best[at] if len(keys) else 0, 0)
            hits += int((pred == d_te[:, layer]).sum())
            total += len(d_te)
        out.append(hits / max(total, 1))
    return out


def trace_stats(
    trace: RoutingTrace, *, ep: int = 8, seed: int = 0, test_fraction: float = 0.25
) -> dict[str, object]:
    """All the statistics above plus sizes, as one JSON-able dict."""
    check_int("--ep", ep, 1, trace.num_experts)
    require(trace.num_tokens > 0, "trace (0 occurrences) must not be empty")
    train, test = split(trace, seed=seed, test_fraction=test_fraction)
    require(
        train.num_tokens > 0 and test.num_tokens > 0,
        f"trace ({len(np.unique(trace.request_id))} requests) needs requests in both "
        "the train and the test split",
    )
    kurt = activation_kurtosis(train)
    out: dict[str, object] = {
        "occurrences": trace.num_tokens,
        "requests": int(len(np.unique(trace.request_id))),
        "distinct_tokens": int(len(np.unique(trace.token_id))),
        "layers": trace.num_layers,
        "experts": trace.num_experts,
        "top_k": trace.top_k,
        # None (JSON null, not NaN) when no token occurs min_occurrences times
        "kurtosis_median": float(np.median(kurt)) if len(kurt) else None,
        "kurtosis_frac_above_8": float((kurt > 8).mean()) if len(kurt) else None,
    }
    out.update({f"static_{k}": v for k, v in static_predictor_scores(train, test).items()})
    if trace.num_experts % ep == 0 and trace.num_layers > 1:
        acc = lookback_accuracy(train, test, ep, max_lookback=min(5, trace.num_layers - 1))
        out["next_layer_accuracy"] = {str(i + 1): a for i, a in enumerate(acc)}
    return out
