"""The busiest EP rank under the power-law load with EPLB that TRT-LLM's wide-EP table was
collected with (aiconfigurator ``power_law_logits_v3(use_eplb=True, num_slots=S)``, the
``power_law_<alpha>_eplb`` rows of ``moe/trtllm/1.3.0rc10/wideep_moe_perf``).

Per draw (the same seeded uniforms as :mod:`.load`'s power-law rows, :data:`.load.DRAWS`
draws averaged):

1. expert loads ``x^-alpha`` on ``[1, 0.8 N]`` (``[0.01, 2]`` when ``N k <= E``), scaled to
   ``N k`` pairs and rounded; each expert capped at ``N`` tokens; the pairs the cap and the
   rounding lost are added one at a time to the least loaded experts below the cap, a surplus
   taken from the least loaded non-empty ones (the generator's fix);
2. replication: each of the ``S - E`` redundant slots goes to the expert with the highest
   load per replica, a replica carrying its expert's load over its replica count;
3. placement: slots in descending load, each to the least loaded rank with a free slot
   (``S / ep`` slots per rank; ties to the lower rank);
4. the generator moves the most loaded rank to rank 0, the rank the table times: its pairs
   and its slots holding a pair are the busiest rank's (pairs, hit).

Departure: the generator floors the slots' fractional loads and deals the remainder by the
largest fractions (at most one pair per slot); the expectation keeps the fractions. Pure.
"""

from __future__ import annotations

import numpy as np

from moeplan.cost.kerneldb.load import _uniforms

#: computed expectations per (n, e, k, ep, alpha, slots): every fold of a held-out evaluation
#: featurises the same rows again (a pure function of the key)
_MEMO: dict[tuple[float, ...], tuple[float, float]] = {}
MEMO_KEYS = 200_000


def _loads(n: int, e: int, k: int, alpha: float) -> np.ndarray:
    """(draws, e) integer expert loads after the generator's rounding and cap fix."""
    u = _uniforms(e)
    a = 1.0 - alpha
    lo, hi = (1.0, max(n * 0.8, 1.0001)) if n * k > e else (0.01, 2.0)
    x = ((hi**a - lo**a) * u + lo**a) ** (1.0 / a)
    loads = np.minimum(np.round(x / x.sum(axis=1, keepdims=True) * n * k), n)
    for d in range(loads.shape[0]):
        row = loads[d]
        delta = int(n * k - row.sum())
        while delta > 0:  # one pair each to the least loaded experts below the cap
            room = np.flatnonzero(row < n)
            order = room[np.argsort(row[room], kind="stable")][:delta]
            row[order] += 1
            delta -= len(order)
        while delta < 0:  # a surplus: one from each of the least loaded non-empty experts
            full = np.flatnonzero(row > 0)
            order = full[np.argsort(row[full], kind="stable")][:-delta]
            row[order] -= 1
            delta += len(order)
    return loads


def _busiest_after_eplb(loads: np.ndarray, ep: int, slots: int) -> tuple[float, float]:
    """Mean over draws of the busiest rank's (pairs, slots hit) after replication + LPT."""
    draws, e = loads.shape
    reps = np.ones((draws, e))
    rows = np.arange(draws)
    for _ in range(slots - e):
        j = np.argmax(loads / reps, axis=1)
        reps[rows, j] += 1
    per = slots // ep
    slot_load = np.stack([np.repeat(loads[d] / reps[d], reps[d].astype(int)) for d in range(draws)])
    slot_load = -np.sort(-slot_load, axis=1)  # descending: the placement's order
    load, used, got = np.zeros((draws, ep)), np.zeros((draws, ep)), np.zeros((draws, ep))
    for s in range(slots):  # each slot to the least loaded rank with a free slot
        j = np.argmin(np.where(used < per, load, np.inf), axis=1)
        load[rows, j] += slot_load[:, s]
        used[rows, j] += 1
        got[rows, j] += slot_load[:, s] > 0
    b = np.argmax(load, axis=1)
    return float(load[rows, b].mean()), float(got[rows, b].mean())


def eplb_power_law_many(
    n: np.ndarray,
    e: np.ndarray,
    k: np.ndarray,
    ep: np.ndarray,
    alpha: np.ndarray,
    slots: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Busiest rank's (pairs, slots hit) per row (module docstring); memoised per shape."""
    out = np.empty((len(n), 2))
    keys = np.stack([np.round(n), e, k, ep, alpha, slots], axis=1).astype(float)
    for i, key in enumerate(map(tuple, keys.tolist())):
        hit = _MEMO.get(key)
        if hit is None:
            nn, ee, kk, pp, aa, ss = key
            if nn <= 0:
                hit = (0.0, 0.0)
            else:
                loads = _loads(int(nn), int(ee), int(kk), aa)
                hit = _busiest_after_eplb(loads, int(pp), int(ss))
            if len(_MEMO) >= MEMO_KEYS:
                _MEMO.clear()
            _MEMO[key] = hit
        out[i] = hit
    return out[:, 0], out[:, 1]
