"""Expert load on the busiest EP rank: token-expert pairs it computes and experts it touches.

A fused-MoE layer's time on an EP rank is set by the rank's routed pairs (compute) and by the
number of *distinct* local experts that received a token (weight reads at small batches).
The layer waits for the busiest rank, so that rank is the one priced.

- ``balanced``: every rank gets ``N k / ep`` pairs spread over distinct experts (the tables'
  balanced router): ``hit = min(E / ep, N k / ep)``.
- ``random``: uniform independent routing: ``hit = (E / ep) (1 - (1 - k / E)^N)``.
- ``power_law_<alpha>``: expert loads drawn from ``x^-alpha`` on ``[1, 0.8 N]`` (``[0.01, 2]``
  when ``N k <= E``), scaled to ``N k`` pairs and rounded, contiguous experts per rank,
  busiest rank taken — the generator NVIDIA's tables were collected with (aiconfigurator
  ``power_law_logits_v3``, which swaps the busiest rank to rank 0). Rounding loses pairs (all
  of them at ``N k << E``: every expert rounds to 0); the generator restores exactly ``N k``:
  the current one caps each expert at ``N`` tokens and deals the deficit round-robin over the
  ranks, each step to the rank's least loaded expert (:func:`_round_robin_fix`); the earlier
  one (A100 vLLM 0.14 and TRT-LLM 1.0 tables, ``families.LEGACY_LOAD_KERNELS``) gives one
  pair each to the most loaded experts in turn, ties in expert order, so at ``N k << E`` a
  token's ``k`` pairs land on experts ``0..k-1``, one rank (:func:`_legacy_fix`). The
  expectation is an average over :data:`DRAWS` draws of common random numbers (the same
  seeded uniforms for every shape with the same expert count), so it is deterministic and
  vectorised.
- explicit per-expert counts (a routing trace), optionally with EPLB redundant experts: the
  hottest experts get replicas (load split evenly), replicas go to ranks by longest-processing-
  time-first under equal slot counts (DeepSeek EPLB's greedy packing, Sec. "EPLB").
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from moeplan.errors import MoeplanError, require

DRAWS = 16  # power-law draws averaged per shape (seeded)
SEED = 20240601


def busiest_rank(
    num_tokens: float, num_experts: int, topk: int, ep: int, distribution: str = "balanced"
) -> tuple[float, float]:
    """(token-expert pairs, distinct experts hit) on the busiest of ``ep`` ranks."""
    require(
        ep >= 1 and num_experts % ep == 0,
        f"moe_ep_size ({ep}) must divide num_experts ({num_experts})",
    )
    local = num_experts / ep
    pairs = num_tokens * topk / ep
    if num_tokens <= 0:
        return 0.0, 0.0
    if distribution in ("balanced", "uniform"):
        return pairs, min(local, pairs)
    if distribution == "random":
        return pairs, local * (1.0 - (1.0 - topk / num_experts) ** num_tokens)
    alpha = power_law_alpha(distribution)
    return _power_law(int(round(num_tokens)), int(num_experts), int(topk), int(ep), alpha)


def experts_hit(tokens: float, shares: np.ndarray | list[float]) -> float:
    """Expected distinct experts receiving at least one of ``tokens`` tokens, each routed
    independently to expert ``e`` with probability ``shares[e]`` (``sum shares = k``: a
    token's ``k`` distinct experts): ``sum_e 1 - (1 - p_e)^T``. Balanced random routing
    (``p_e = k / E``) gives ``E (1 - (1 - k / E)^T)``; a routing profile's per-expert loads
    give their own ``p_e``. Linearity of expectation: exact for any joint law of one token's
    ``k`` experts with these marginals, tokens independent."""
    p = np.clip(np.asarray(shares, dtype=float), 0.0, 1.0)
    if tokens <= 0 or p.size == 0:
        return 0.0
    sure = p >= 1.0
    miss = np.exp(float(tokens) * np.log1p(-np.where(sure, 0.0, p)))
    return float(np.sum(np.where(sure, 1.0, 1.0 - miss)))


#: Largest power-law exponent: at alpha = 100, 99 % of the loads drawn on [1, b] lie within 5 %
#: of the smallest (inverse CDF (1 - u)^(-1/99) at u = 0.99 is 1.047), i.e. balanced; far
#: larger values overflow the sampler (alpha = 1e308 ended in non-finite loads).
MAX_ALPHA = 100.0


def power_law_alpha(distribution: str) -> float:
    """``alpha`` of ``power_law_<alpha>``; one-line error otherwise."""
    if distribution.startswith("power_law_"):
        try:
            alpha = float(distribution.removeprefix("power_law_"))
        except ValueError:
            alpha = float("nan")
        if 0 < alpha <= MAX_ALPHA and alpha != 1.0:
            return alpha
    raise MoeplanError(
        f"distribution ({str(distribution)!r}) must be balanced, random or "
        f"power_law_<alpha> with 0 < alpha <= {MAX_ALPHA:g}, alpha != 1"
    )


@lru_cache(maxsize=65536)
def _power_law(n: int, e: int, k: int, ep: int, alpha: float) -> tuple[float, float]:
    p, h = power_law_many(
        np.array([n], float), np.array([e]), np.array([k], float), np.array([ep]), np.array([alpha])
    )
    return float(p[0]), float(h[0])


@lru_cache(maxsize=64)
def _uniforms(e: int) -> np.ndarray:
    """Common random numbers: the same seeded ``DRAWS x e`` uniforms for every shape with
    ``e`` experts, so the expectation is a smooth, deterministic function of the shape."""
    return np.random.default_rng([SEED, e]).random((DRAWS, e))


CHUNK_ELEMS = 4_000_000  # shapes x draws x experts evaluated at once
#: computed expectations per ``(n, e, k, ep, alpha, legacy)``: every fold of a held-out
#: evaluation and every variant build featurises the same table rows again (pure function of
#: the key, so memoising cannot change an answer); cleared when it outgrows MEMO_KEYS
_MEMO: dict[tuple[float, ...], tuple[float, float]] = {}
MEMO_KEYS = 1_000_000


def power_law_many(
    n: np.ndarray,
    e: np.ndarray,
    k: np.ndarray,
    ep: np.ndarray,
    alpha: np.ndarray,
    legacy: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised power-law busiest rank (see module docstring) for many shapes; ``legacy``
    rows use the earlier generator's rounding fix (:func:`_legacy_fix`)."""
    old = np.zeros(len(n)) if legacy is None else np.asarray(legacy, float)
    keys = np.stack([n, e, k, ep, alpha, old], axis=1).astype(float)
    uniq, back = np.unique(keys, axis=0, return_inverse=True)
    known = [_MEMO.get(tuple(row)) for row in uniq.tolist()]
    todo = np.array([i for i, v in enumerate(known) if v is None], dtype=int)
    if len(todo):
        p, h = _power_law_unique(*uniq[todo].T)
        if len(_MEMO) + len(todo) > MEMO_KEYS:
            _MEMO.clear()
        for i, pi, hi in zip(todo.tolist(), p.tolist(), h.tolist(), strict=True):
            known[i] = (pi, hi)
            _MEMO[tuple(uniq[i].tolist())] = (pi, hi)
    vals = np.array(known, dtype=float).reshape(len(uniq), 2)
    b = back.ravel()
    return vals[b, 0], vals[b, 1]


def _power_law_unique(
    n: np.ndarray, e: np.ndarray, k: np.ndarray, ep: np.ndarray, alpha: np.ndarray, old: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`power_law_many` on distinct keys, grouped by expert count, EP and generator."""
    pairs, hit = np.empty(len(n)), np.empty(len(n))
    groups: dict[tuple[int, int, bool], list[int]] = {}
    for i, key in enumerate(
        zip(e.astype(int).tolist(), ep.astype(int).tolist(), (old > 0).tolist(), strict=True)
    ):
        groups.setdefault(key, []).append(i)
    for (ee, pp, lg), rows in groups.items():
        u = _uniforms(ee)
        step = max(1, CHUNK_ELEMS // (DRAWS * ee))
        for start in range(0, len(rows), step):
            j = np.array(rows[start : start + step])
            pairs[j], hit[j] = _busiest(u, n[j], k[j], alpha[j], pp, bool(lg))
    return pairs, hit


def _busiest(
    u: np.ndarray, n: np.ndarray, k: np.ndarray, alpha: np.ndarray, ep: int, legacy: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    ee = u.shape[1]
    nn, kk, a = n[:, None, None], k[:, None, None], 1.0 - alpha[:, None, None]
    big = nn * kk > ee
    lo = np.where(big, 1.0, 0.01)
    hi = np.maximum(np.where(big, nn * 0.8, 2.0), lo * 1.0001)
    x = ((hi**a - lo**a) * u[None] + lo**a) ** (1.0 / a)
    loads = np.round(x / x.sum(axis=2, keepdims=True) * nn * kk)
    delta = (nn * kk)[..., 0] - loads.sum(axis=2)  # (shapes, draws): pairs rounding lost
    if legacy:
        pairs_r, hit_r = _legacy_fix(loads, delta, ep)
    else:
        pairs_r, hit_r = _round_robin_fix(loads, delta, nn[..., 0], ep)
    best = pairs_r.argmax(axis=2)[..., None]
    pairs = np.take_along_axis(pairs_r, best, 2)[..., 0]
    hit = np.take_along_axis(hit_r, best, 2)[..., 0]
    return pairs.mean(axis=1), hit.mean(axis=1)


def _spread(m: np.ndarray, ep: int) -> np.ndarray:  # (shapes, draws) -> (..., ep)
    """``m`` unit steps dealt round-robin over ``ep`` ranks starting at rank 0: per rank."""
    m = np.maximum(m, 0.0)[..., None]
    r = np.arange(ep)
    return np.floor(m / ep) + (r < np.mod(m, ep))


def _round_robin_fix(
    loads: np.ndarray, delta: np.ndarray, n: np.ndarray, ep: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per-rank (pairs, experts hit) after the current generator's fix: each expert capped at
    ``n`` tokens, the overflow and then the rounding deficit dealt round-robin over the ranks
    from rank 0, each step to the rank's least loaded expert (an empty one while there is
    one); a surplus taken round-robin from the ranks' largest experts (a rank loses a hit only
    when its experts hold one pair each). Ranks whose experts are all capped are not skipped
    (the collector skips them; it needs ``N`` near ``k``)."""
    over = np.maximum(loads - n[..., None], 0.0).sum(axis=2)
    loads = np.minimum(loads, n[..., None])
    s, d, ee = loads.shape
    per = loads.reshape(s, d, ep, ee // ep)
    pairs_r, hit_r = per.sum(axis=3), (per > 0).sum(axis=3).astype(float)
    inc = _spread(over, ep) + _spread(delta, ep)
    dec = _spread(-delta, ep)
    hit_r = np.minimum(hit_r + inc, ee // ep)
    hit_r = np.maximum(hit_r - np.where(per.max(axis=3) <= 1, dec, 0.0), 0.0)
    return pairs_r + inc - dec, hit_r


def _legacy_fix(loads: np.ndarray, delta: np.ndarray, ep: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-rank (pairs, experts hit) after the earlier generator's fix: a deficit adds one
    pair to each expert in descending load order (ties in expert order), a surplus takes one
    from each of the least loaded non-empty experts, the rest from the largest one (the
    collector: one at a time from the then-largest); no per-expert cap."""
    s, d, ee = loads.shape
    key = (loads.max() - loads).astype(np.int64) * ee + np.arange(ee)  # distinct: load desc, index
    order = np.argsort(key, axis=2)
    pos = np.empty_like(order)
    np.put_along_axis(pos, order, np.arange(ee)[None, None, :], axis=2)
    plus = np.maximum(delta, 0.0)[..., None]
    loads = loads + np.floor(plus / ee) + (pos < np.mod(plus, ee))
    minus = np.maximum(-delta, 0.0)[..., None]
    small = (pos >= ee - minus) & (loads > 0)
    loads = loads - small
    rest = (minus[..., 0] - small.sum(axis=2))[..., None]
    top = loads.argmax(axis=2)[..., None]
    np.put_along_axis(loads, top, np.maximum(np.take_along_axis(loads, top, 2) - rest, 0.0), axis=2)
    per = loads.reshape(s, d, ep, ee // ep)
    return per.sum(axis=3), (per > 0).sum(axis=3).astype(float)


def busiest_rank_many(
    n: np.ndarray,
    e: np.ndarray,
    k: np.ndarray,
    ep: np.ndarray,
    dist: np.ndarray,
    legacy: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`busiest_rank` over arrays (power-law rows vectorised; ``legacy``: per row, the
    earlier power-law generator)."""
    bad = (ep < 1) | (np.mod(e, np.maximum(ep, 1)) != 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        require(False, f"moe_ep_size ({ep[i]:g}) must divide num_experts ({e[i]:g})")
    local, pairs = e / ep, n * k / ep
    hit = np.minimum(local, pairs)
    rnd = dist == "random"
    hit = np.where(rnd, local * (1.0 - (1.0 - k / e) ** n), hit)
    pl = ~(rnd | np.isin(dist, ["balanced", "uniform"]))
    if pl.any():
        alpha = np.array([power_law_alpha(d) for d in dist[pl]])
        old = None if legacy is None else np.asarray(legacy)[pl]
        p, h = power_law_many(np.round(n[pl]), e[pl], k[pl], ep[pl], alpha, old)
        pairs, hit = pairs.copy(), hit.copy()
        pairs[pl], hit[pl] = p, h
    zero = n <= 0
    return np.where(zero, 0.0, pairs), np.where(zero, 0.0, hit)


def contiguous_busiest(counts: np.ndarray, ep: int) -> tuple[float, float]:
    """Busiest rank's (pairs, experts hit) when rank ``r`` holds experts
    ``[r E/ep, (r+1) E/ep)`` — the engines' placement without EPLB."""
    c = np.asarray(counts, dtype=float)
    require(
        len(c) > 0 and len(c) % ep == 0,
        f"num_experts ({len(c)}) must be divisible by moe_ep_size ({ep})",
    )
    per_rank = c.reshape(ep, -1)
    j = int(np.argmax(per_rank.sum(axis=1)))
    return float(per_rank[j].sum()), float((per_rank[j] > 0).sum())


def eplb_busiest(counts: np.ndarray, ep: int, redundant: int = 0) -> tuple[float, float]:
    """Busiest rank's (pairs, replicas hit) for per-expert ``counts`` and ``redundant`` extra
    expert replicas (EPLB): replicate the hottest, then pack replicas on ranks (LPT)."""
    c = np.asarray(counts, dtype=float)
    slots = len(c) + redundant
    require(
        len(c) > 0 and slots % ep == 0,
        f"num_experts + redundant ({slots}) must be divisible by moe_ep_size ({ep})",
    )
    reps = np.ones(len(c), dtype=int)
    for _ in range(redundant):
        reps[int(np.argmax(c / reps))] += 1
    replica_load = np.repeat(c / reps, reps)
    order = np.argsort(-replica_load, kind="stable")
    cap = slots // ep
    load, used, hit = np.zeros(ep), np.zeros(ep, dtype=int), np.zeros(ep)
    for r in order:
        open_ranks = np.flatnonzero(used < cap)
        j = open_ranks[np.argmin(load[open_ranks])]
        load[j] += replica_load[r]
        used[j] += 1
        hit[j] += replica_load[r] > 0
    j = int(np.argmax(load))
    return float(load[j]), float(hit[j])
