"""Expert load on the busiest EP rank: token-expert pairs it computes and experts it touches.

A fused-MoE layer's time on an EP rank is set by the rank's routed pairs (compute) and by the
number of *distinct* local experts that received a token (weight reads at small batches).
The layer waits for the busiest rank, so that rank is the one priced.

- ``balanced``: every rank gets ``N k / ep`` pairs spread over distinct experts (the tables'
  balanced router): ``hit = min(E / ep, N k / ep)``.
- ``random``: uniform independent routing: ``hit = (E / ep) (1 - (1 - k / E)^N)``.
- ``power_law_<alpha>``: expert loads drawn from ``x^-alpha`` on ``[1, 0.8 N]`` (``[0.01, 2]``
  when ``N k <= E``) and scaled to ``N k`` pairs, contiguous experts per rank, busiest rank
  taken — the generator NVIDIA's tables were collected with (aiconfigurator
  ``power_law_logits_v3``, which swaps the busiest rank to rank 0). The expectation is a
  seeded average over :data:`DRAWS` draws, so it is deterministic.
- explicit per-expert counts (a routing trace), optionally with EPLB redundant experts: the
  hottest experts get replicas (load split evenly), replicas go to ranks by longest-processing-
  time-first under equal slot counts (DeepSeek EPLB's greedy packing, Sec. "EPLB").
"""

from __future__ import annotations

import math
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


def power_law_alpha(distribution: str) -> float:
    """``alpha`` of ``power_law_<alpha>``; one-line error otherwise."""
    if distribution.startswith("power_law_"):
        try:
            alpha = float(distribution.removeprefix("power_law_"))
        except ValueError:
            alpha = float("nan")
        if alpha > 0 and alpha != 1.0 and math.isfinite(alpha):
            return alpha
    raise MoeplanError(
        f"distribution ({distribution!r}) must be balanced, random or "
        "power_law_<alpha> with alpha > 0, alpha != 1"
    )


@lru_cache(maxsize=65536)
def _power_law(n: int, e: int, k: int, ep: int, alpha: float) -> tuple[float, float]:
    rng = np.random.default_rng([SEED, n, e, k, ep, int(alpha * 1000)])
    lo, hi = (1.0, n * 0.8) if n * k > e else (0.01, 2.0)
    hi = max(hi, lo * 1.0001)
    u = rng.random((DRAWS, e))
    a = 1.0 - alpha
    x = ((hi**a - lo**a) * u + lo**a) ** (1.0 / a)
    loads = np.round(x / x.sum(axis=1, keepdims=True) * n * k)
    per_rank = loads.reshape(DRAWS, ep, e // ep)
    busiest = per_rank.sum(axis=2).argmax(axis=1)
    chosen = per_rank[np.arange(DRAWS), busiest]
    return float(chosen.sum(axis=1).mean()), float((chosen > 0).sum(axis=1).mean())


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
