"""Service metrics (MixServe Eqs. 7, 9-11): M/M/1 wait against a Lindley-recursion
simulation and against hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest

from moeplan.errors import MoeplanError
from moeplan.planners.strategy.queueing import mm1_wait, service_metrics


def test_mm1_wait_hand_computation():
    """rate 1, mu 2: rho = 0.5, W_q = rho / (mu (1 - rho)) = 0.5."""
    assert mm1_wait(1.0, 2.0) == pytest.approx(0.5)


def test_mm1_wait_matches_simulation():
    """Lindley recursion W_{n+1} = max(0, W_n + S_n - A_{n+1}) with exponential times."""
    rng = np.random.default_rng(7)
    lam, mu, n = 3.0, 4.0, 400_000
    service = rng.exponential(1 / mu, n)
    gaps = rng.exponential(1 / lam, n)
    w, total = 0.0, 0.0
    for i in range(n - 1):
        w = max(0.0, w + service[i] - gaps[i + 1])
        total += w
    assert total / (n - 1) == pytest.approx(mm1_wait(lam, mu), rel=0.08)


def test_unstable_queue_is_reported():
    m = service_metrics(prefill_s=1.0, decode_s=0.1, batch=2, isl=100, osl=10, rate=5.0)
    assert not m.stable and m.rho == pytest.approx(5.0) and math.isinf(m.ttft_s)
    assert m.throughput_tokens_per_s == pytest.approx(2 * 110 / 2.0)


def test_ttft_itl_throughput_hand_computation():
    """Eqs. 9-11 with b = 4: busy = 0.5 + 100 * 0.02 = 2.5 s, mu = 1.6 req/s, rate 0.8."""
    m = service_metrics(prefill_s=0.5, decode_s=0.02, batch=4, isl=1000, osl=100, rate=0.8)
    mu = 4 / 2.5
    wq = 0.8 / (mu * (mu - 0.8))
    assert m.rho == pytest.approx(0.5)
    assert m.ttft_s == pytest.approx(wq + 0.5)
    assert m.itl_s == 0.02
    assert m.throughput_tokens_per_s == pytest.approx(4 * 1100 / (wq + 2.5))


def test_no_rate_means_no_queueing():
    m = service_metrics(prefill_s=0.5, decode_s=0.02, batch=1, isl=10, osl=0, rate=None)
    assert m.ttft_s == 0.5 and m.rho is None and m.stable


def test_bad_batch_is_a_user_error():
    with pytest.raises(MoeplanError, match="batch"):
        service_metrics(prefill_s=1, decode_s=1, batch=0, isl=1, osl=1, rate=None)
