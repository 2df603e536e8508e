"""The power-law busiest-rank expectation (``kerneldb.load``) is memoised per key: the memo
must never change an answer."""

from __future__ import annotations

import numpy as np

from moeplan.cost.kerneldb import load


def test_power_law_memo_returns_what_a_cold_computation_does() -> None:
    """``load.power_law_many`` memoises per key: a warm call, in another order and mixed with
    new keys, returns exactly what the memo-free computation of each key returns."""
    rng = np.random.default_rng(3)
    m = 300
    n = rng.choice([1.0, 2.0, 8.0, 64.0, 512.0, 4096.0], m)
    e = rng.choice([8.0, 64.0, 128.0, 256.0], m)
    k = np.minimum(rng.choice([1.0, 2.0, 4.0, 8.0], m), e)
    ep = rng.choice([1.0, 2.0, 4.0, 8.0], m)
    alpha = rng.choice([1.01, 1.2, 1.5], m)
    legacy = rng.choice([0.0, 1.0], m)
    cold = load._power_law_unique(n, e, k, ep, alpha, legacy)
    load._MEMO.clear()
    half = slice(0, m // 2)
    load.power_law_many(n[half], e[half], k[half], ep[half], alpha[half], legacy[half])
    order = rng.permutation(m)
    warm = load.power_law_many(n[order], e[order], k[order], ep[order], alpha[order], legacy[order])
    np.testing.assert_array_equal(warm[0], cold[0][order])
    np.testing.assert_array_equal(warm[1], cold[1][order])
