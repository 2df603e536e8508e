"""The measured window of a steady probe comes from the run's own request lifetimes
(:mod:`moeplan.search.capacity.slo`, "Warm-up from the run"), so that a looser SLO judges the
very same requests. Oracles: the same probe under two SLOs, the same probe from first
streams of other lengths, and the full P/D run behind every miss the prefill pool alone
proves."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import moeplan.search.capacity.slo as slo_mod
from hypothesis_budget import examples
from moeplan.search.capacity.slo import lower_bound_misses, steady_probe
from moeplan.serve import SLO, LengthDist, ServeWorkload
from moeplan.serve.engine.config import EngineConfig
from moeplan.serve.iteration.model import Batch
from moeplan.serve.pools.pd import prefill_view, simulate_pd
from test_serve_pd import _setup
from test_serve_pd import _workload as _pd_workload

OSL = 50


def _linear(b: Batch) -> float:  # 5 ms + 1 ms per decode sequence + 1 us per prompt token
    return 0.005 + 0.001 * b.decode + 1e-6 * sum(q for q, _ in b.prefill)


def _cfg(cap: int) -> EngineConfig:
    return EngineConfig(policy="prefill-first", chunk_tokens=4096, max_running=cap, kv_tokens=10**7)


WL = ServeWorkload(
    num_requests=200, rate=1.0, isl=LengthDist(mean=128),
    osl=LengthDist(kind="uniform", mean=OSL, low=10, high=90), seed=5,
)  # fmt: skip


def _probe(rate: float, slo: SLO, cap: int = 32):
    return steady_probe(_cfg(cap), _linear, WL, slo, rate, requests=200, horizon=True,
                        window_lifetimes=2.0)  # fmt: skip


@settings(max_examples=examples(25), deadline=None)
@given(
    rate=st.floats(5.0, 80.0),
    ttft=st.floats(0.05, 2.0),
    tpot=st.floats(0.005, 0.2),
    looser=st.floats(1.0, 4.0),
    which=st.sampled_from(["ttft", "tpot", "both"]),
    pct=st.sampled_from([50.0, 90.0, 99.0]),
)
def test_a_looser_slo_measures_the_same_requests_and_passes_what_a_tighter_passed(
    rate, ttft, tpot, looser, which, pct
):
    tight = SLO(ttft_s=ttft, tpot_s=tpot, percentile=pct)
    loose = SLO(
        ttft_s=ttft * (looser if which != "tpot" else 1.0),
        tpot_s=tpot * (looser if which != "ttft" else 1.0),
        percentile=pct,
    )
    a, b = _probe(rate, tight), _probe(rate, loose)
    if a.meets(tight):
        assert b.meets(loose)
        assert a.window == b.window
        assert b.ttft[1] <= a.ttft[1] and b.tpot[1] <= a.tpot[1]


@pytest.mark.parametrize("rate", [10.0, 30.0, 45.0, 70.0])
def test_the_first_streams_length_changes_nothing(rate, monkeypatch):
    """A first stream shorter or longer than the default: a short one is doubled until it
    covers the window and its verdict, and any stream that decides decides the same (a
    miss may be measured on another window: what is judged is that it misses)."""
    slo = SLO(ttft_s=0.5, tpot_s=0.03)
    ref = _probe(rate, slo)
    for lifetimes in (0.3, 12.0):
        monkeypatch.setattr(slo_mod, "STREAM_LIFETIMES", lifetimes)
        p = _probe(rate, slo)
        assert p.meets(slo) == ref.meets(slo), lifetimes
        if ref.meets(slo):
            assert p.window == ref.window
            assert p.ttft == pytest.approx(ref.ttft) and p.tpot == pytest.approx(ref.tpot)


@pytest.mark.parametrize("x,y", [(1, 1), (2, 1)])
def test_a_miss_the_prefill_pool_proves_is_the_deployments(x, y):
    """Over rates from light to overloaded: whenever the prefill pool alone proves a miss
    (:func:`moeplan.search.capacity.slo.lower_bound_misses`), the whole P/D deployment's
    probe misses too; and the proof fires somewhere on the sweep."""
    setup = _setup(lambda isl: 1e-4 * isl / 64, x, y)
    wl = _pd_workload(n=200, seed=7)
    slo = SLO(ttft_s=0.02, tpot_s=0.05)

    def view(reqs, stop):
        return prefill_view(reqs, setup, horizon_s=stop)

    def whole(reqs, stop):
        return simulate_pd(reqs, setup, horizon_s=stop).result

    proved = 0
    for rate in (20.0, 60.0, 100.0, 140.0, 180.0, 260.0):
        pre = lower_bound_misses(view, wl, slo, rate, requests=200, window_lifetimes=2.0)
        full = steady_probe(None, None, wl, slo, rate, requests=200, runner=whole,
                            horizon=True, window_lifetimes=2.0)  # fmt: skip
        if pre is not None:
            proved += 1
            assert not pre.meets(slo)
            assert not full.meets(slo), rate
    assert proved >= 1
