"""A steady probe stopped once its SLO miss is certain: the full run is the oracle."""

from __future__ import annotations

import numpy as np
import pytest

from moeplan.search.capacity.certain_miss import _needed
from moeplan.search.capacity.slo import steady_probe
from moeplan.serve import SLO, LengthDist, ServeWorkload
from moeplan.serve.engine.config import EngineConfig
from moeplan.serve.iteration.model import Batch

OSL = 50


def _linear(b: Batch) -> float:  # 5 ms + 1 ms per decode sequence + 1 us per prompt token
    return 0.005 + 0.001 * b.decode + 1e-6 * sum(q for q, _ in b.prefill)


def _flat(b: Batch) -> float:  # 10 ms per iteration + 1 us per prompt token
    return 0.01 + 1e-6 * sum(q for q, _ in b.prefill)


def _cfg(cap: int) -> EngineConfig:
    return EngineConfig(policy="prefill-first", chunk_tokens=4096, max_running=cap, kv_tokens=10**7)


@pytest.mark.parametrize("n", [1, 2, 7, 35, 100, 101])
@pytest.mark.parametrize("p", [50.0, 90.0, 99.0])
def test_needed_count_is_the_least_that_proves_the_percentile_above(n, p):
    """Brute force: with k >= the count the stop rule waits for, values above a limit put the
    point percentile above it whatever the rest are; with one fewer, values just above the
    limit and the rest at 0 leave it at or below the limit (the count is the least)."""
    need = _needed(n, p)
    rng = np.random.default_rng(n)
    for k in range(need, n + 1):
        x = np.concatenate([rng.uniform(0.0, 1.0, n - k), 1.0 + 1e-9 + rng.uniform(0, 1, k)])
        assert float(np.percentile(x, p)) > 1.0, (n, p, k)
    if need >= 1:
        k = need - 1
        x = np.concatenate([np.zeros(n - k), np.full(k, 1.0 + 1e-9)])
        assert float(np.percentile(x, p)) <= 1.0, (n, p, k)


GRID = [
    (_linear, 16, SLO(ttft_s=0.5, tpot_s=0.02)),  # TPOT binds
    (_linear, 64, SLO(ttft_s=0.3, tpot_s=0.1)),  # TTFT binds
    (_flat, 16, SLO(ttft_s=1.0, tpot_s=0.05)),
    (_flat, 32, SLO(ttft_s=None, tpot_s=0.012)),
]


@pytest.mark.parametrize("ev,cap,slo", GRID)
def test_stopped_probe_verdict_is_the_full_runs(ev, cap, slo):
    """Over rates from light to overloaded: the stopped run's verdict equals the full run's,
    a run that meets the SLOs is never stopped, and some missing runs stop early."""
    wl = ServeWorkload(
        num_requests=100, rate=1.0, isl=LengthDist(mean=128), osl=LengthDist(mean=OSL), seed=3
    )
    shorter = 0
    for rate in (5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 70.0):
        full = steady_probe(_cfg(cap), ev, wl, slo, rate, requests=200, horizon=True)
        cut = steady_probe(
            _cfg(cap), ev, wl, slo, rate, requests=200, horizon=True, stop_on_miss=True
        )
        assert cut.meets(slo) == full.meets(slo), rate
        n_cut, n_full = len(cut.res.iter_start_s), len(full.res.iter_start_s)
        assert n_cut <= n_full
        if full.meets(slo):
            assert n_cut == n_full
        shorter += n_cut < n_full
    assert shorter >= 1
