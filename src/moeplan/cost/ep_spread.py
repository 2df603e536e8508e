"""The busiest EP rank of one batch: its routed copies over the mean, at the batch's token count.

A placement (EPLB's, or the engines' contiguous one) balances the *expected* load of the EP
ranks: rank ``g`` receives a share ``p_g`` of the routed copies (``sum p_g = 1``; ``1 / ep``
each when the placement is balanced). One batch of ``n`` tokens is a draw from the routing:
each token picks ``k`` distinct experts, and a replicated expert's copies split evenly over
its replicas. The step waits for the rank that received the most copies, so the price of the
routed experts' GEMM and of DeepEP's busiest receiver is the expected maximum over ranks, not
the mean. This module computes that expectation; nothing in it is fitted.

Decision (what is modelled, from what):

- Counts: rank ``g`` receives ``X_g`` copies with mean ``n k p_g`` and variance
  ``n k p_g (1 - p_g) (E - k) / (E - 1)`` over ``E`` logical experts: per token, the number
  of its ``k`` distinct experts that land on a rank holding ``m`` of ``E`` experts is
  hypergeometric, variance ``k (m/E) (1 - m/E) (E - k) / (E - 1)`` (``p_g = m / E``); the
  same expression in ``p_g`` stands for uneven shares (exact for ``k = 1``, the multinomial).
  Tokens are independent draws; the ranks' counts are taken as independent normals (the
  multinomial's negative correlation between ranks is left out: it lowers the maximum by
  less than the Monte-Carlo spread of ``tests/test_wideep_spread.py``).
- ``E[max_g X_g] = L + integral_L^U (1 - prod_g Phi((x - mu_g) / sigma_g)) dx`` on a grid
  from ten standard deviations below the smallest mean to ten above the largest; divided by
  the mean ``n k / ep``.
- The placement's own imbalance (a routing profile's per-expert loads after EPLB,
  :mod:`moeplan.serve.iteration.balance`) multiplies this factor: the spread is computed at balanced
  shares. Balanced routing (no per-expert loads: DeepSeek's own profile and the lmsys blog's
  "simulated perfect EPLB", random experts under group-limited routing) is the spread alone.

Departures: group-limited routing (DeepSeek-V3: a token's experts lie in 4 of 8 groups)
correlates the experts of one group; it is left out. Sampled on EPLB's placements of equal
per-expert loads (``bench/bench_ep_spread.py``, mean +- standard error): EP72 + 32 replicas,
128 tokens per GPU, group-limited 1.1669 +- 0.0028, uniform 1.1719 +- 0.0025, computed on the
placement's shares 1.1712; EP32 + 32 replicas, 2,048 tokens per GPU, 1.0174 +- 0.0005,
1.0160 +- 0.0004 and 1.0157: group-limited routing adds about a tenth to the excess over
the mean at EP32, none measurable at EP72. Correlated tokens (the tokens of one prompt prefer
the same experts) would raise the spread further; no public statistic of DeepSeek-V3's
per-prompt routing exists to charge it (a routing trace with per-expert loads enters
through the placement factor instead). Pure: no I/O.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

GRID = 4097  # trapezoid points of the expectation integral
SIGMAS = 10.0  # the integral's range beyond the extreme means, in standard deviations


def count_moments(
    tokens: float, shares: np.ndarray, k: int, num_experts: int
) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of each rank's routed copies (module docstring)."""
    p = np.asarray(shares, float)
    mu = tokens * k * p
    fpc = (num_experts - k) / (num_experts - 1) if num_experts > 1 else 0.0
    sd = np.sqrt(np.maximum(tokens * k * p * (1.0 - p) * fpc, 0.0))
    return mu, sd


def expected_max(mu: np.ndarray, sd: np.ndarray) -> float:
    """E[max_g X_g] for independent normals ``X_g ~ N(mu_g, sd_g^2)`` (module docstring)."""
    from scipy.special import ndtr  # here: `moeplan` starts without scipy

    mu, sd = np.asarray(mu, float), np.asarray(sd, float)
    if not np.any(sd > 0):
        return float(mu.max())
    s = float(sd.max())
    lo, hi = float(mu.min()) - SIGMAS * s, float(mu.max()) + SIGMAS * s
    x = np.linspace(lo, hi, GRID)
    live = sd > 0
    z = (x[:, None] - mu[None, live]) / sd[None, live]
    cdf = np.exp(np.sum(np.log(np.maximum(ndtr(z), 1e-300)), axis=1))
    if not np.all(live):  # ranks with a certain count: a step in the CDF
        cdf = cdf * (x >= mu[~live].max())
    return lo + float(np.trapezoid(1.0 - cdf, x))


def spread(tokens: float, shares: np.ndarray, k: int, num_experts: int) -> float:
    """The busiest rank's copies over the mean in a batch of ``tokens`` tokens entering the
    EP group, the ranks' expected ``shares`` of the copies (module docstring)."""
    if tokens <= 0:
        return 1.0
    p = np.asarray(shares, float)
    mu, sd = count_moments(tokens, p, k, num_experts)
    return expected_max(mu, sd) / (tokens * k / len(p))


@lru_cache(maxsize=1024)
def max_of_normals(n: int) -> float:
    """E[max] of ``n`` independent standard normals (:func:`expected_max`)."""
    return expected_max(np.zeros(n), np.ones(n))


def balanced_spread(tokens: float, ep: int, k: int, num_experts: int) -> float:
    """:func:`spread` at balanced shares (``1 / ep`` each): the ranks' counts are identically
    distributed, so the maximum is ``mu + sd * E[max of ep standard normals]``."""
    if ep <= 1 or tokens <= 0:
        return 1.0
    mu, sd = count_moments(tokens, np.array([1.0 / ep]), k, num_experts)
    return 1.0 + float(sd[0] / mu[0]) * max_of_normals(ep)
