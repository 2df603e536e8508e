"""Prefill/decode disaggregation on the serving engine: oracles for the KV
transfer, the pools against standalone engine runs, rate matching and pool stability."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan.cost import CostModel
from moeplan.errors import MoeplanError
from moeplan.planners.layout import Layout
from moeplan.search.disagg.pools import Context, candidates, rate_match, stable
from moeplan.serve import (
    SLO,
    EngineConfig,
    LengthDist,
    ServeWorkload,
    generate,
    simulate,
)
from moeplan.serve.deployment import PDLayout
from moeplan.serve.metrics import request_latencies
from moeplan.serve.pools.pd import PoolSetup, kv_senders, kv_transfer_s, simulate_pd
from moeplan.specs import LinkSpec, load_cluster, load_model

PRE = EngineConfig(policy="prefill-first", chunk_tokens=4096, max_running=64, kv_tokens=200_000)
DEC = EngineConfig(
    policy="mixed", chunk_tokens=129, max_running=128, kv_tokens=400_000, admit_reserve=0.0
)


def prefill_time(batch):  # fake evaluator: 2 ms + 10 us per prompt token
    return 2e-3 + 1e-5 * batch.tokens


def decode_time(batch):  # fake evaluator: 8 ms + 20 us per sequence (context-free)
    return 8e-3 + 2e-5 * batch.sequences


def _layout(x=1, y=1):
    return PDLayout(prefill=Layout(), decode=Layout(), x=x, y=y)


def _setup(transfer, x=1, y=1):
    return PoolSetup(
        layout=_layout(x, y),
        prefill_cfg=PRE,
        decode_cfg=DEC,
        prefill_eval=prefill_time,
        decode_eval=decode_time,
        transfer=transfer,
    )


def _workload(rate=20.0, n=300, seed=3):
    return ServeWorkload(
        num_requests=n,
        rate=rate,
        isl=LengthDist(kind="uniform", mean=600, low=100, high=1100),
        osl=LengthDist(kind="uniform", mean=60, low=1, high=120),
        seed=seed,
    )


def test_kv_transfer_is_bytes_over_bandwidth_plus_latency():
    """One request's KV: latency + prompt KV bytes / (senders x link bandwidth)."""
    c = load_cluster("h100-sxm-8", 2)
    cm = CostModel(c)
    for name, tp in (("deepseek-v3", 4), ("qwen3-235b-a22b", 4), ("qwen3-235b-a22b", 1)):
        m = load_model(name)
        lay = Layout(attn_tp=tp, attn_dp=8 // tp, moe_ep=8)
        nbytes = m.kv_bytes_per_token * 3000
        senders = 1 if m.attention == "mla" else min(tp, m.num_kv_heads)
        want = c.inter.latency + nbytes / senders / c.inter.bw
        assert kv_senders(m, lay) == senders
        assert kv_transfer_s(m, cm, lay, 3000, True) == pytest.approx(want, rel=1e-12)
        intra = c.intra.latency + nbytes / senders / c.intra.bw
        assert kv_transfer_s(m, cm, lay, 3000, False) == pytest.approx(intra, rel=1e-12)


def test_infinite_link_pd_equals_the_standalone_pools():
    """With an infinitely fast link and one instance of each: PD TTFT = the prefill pool's
    TTFT and PD TPOT = the decode pool's TPOT, each from its own standalone engine run."""
    c = load_cluster("h100-sxm-8", 2)
    c = replace(c, inter=LinkSpec(kind="ideal", bw=1e300, latency=0.0))
    m = load_model("qwen3-30b-a3b")
    cm = CostModel(c)
    reqs = generate(_workload())
    run = simulate_pd(reqs, _setup(lambda isl: kv_transfer_s(m, cm, Layout(), isl, True)))
    alone_pre = simulate(replace(reqs, osl=np.ones(len(reqs), dtype=np.int64)), PRE, prefill_time)
    ttft, tpot, _ = request_latencies(run.result)
    assert np.allclose(ttft, alone_pre.first_token_s - reqs.arrival_s, rtol=0, atol=1e-12)
    many = reqs.osl > 1
    order = np.argsort(alone_pre.first_token_s[many], kind="stable")
    dec_reqs = replace(
        reqs,
        arrival_s=alone_pre.first_token_s[many][order],
        isl=reqs.isl[many][order] + 1,
        osl=reqs.osl[many][order] - 1,
        cached=reqs.isl[many][order],
    )
    alone_dec = simulate(dec_reqs, DEC, decode_time)
    dec_tpot = (alone_dec.finish_s - dec_reqs.arrival_s) / dec_reqs.osl
    assert np.allclose(np.sort(tpot[many]), np.sort(dec_tpot), rtol=1e-12, atol=0)


def test_lone_request_closed_form():
    """One request: TTFT = prefill iteration + transfer; TPOT = the batch-1 decode step."""
    reqs = replace(generate(_workload(n=1)), isl=np.array([800]), osl=np.array([40]))
    run = simulate_pd(reqs, _setup(lambda isl: 1e-3 + isl * 1e-6))
    ttft, tpot, _ = request_latencies(run.result)
    assert ttft[0] == pytest.approx(2e-3 + 1e-5 * 800 + 1e-3 + 800e-6, rel=1e-12)
    assert tpot[0] == pytest.approx(8e-3 + 2e-5, rel=1e-12)
    assert run.transfer_s[0] == pytest.approx(1e-3 + 800e-6, rel=1e-12)


@pytest.mark.parametrize("x,y", [(1, 1), (2, 3), (3, 2)])
def test_every_token_once_and_causal_times(x, y):
    """Token conservation and order: arrival <= admission <= KV arrival <= finish."""
    reqs = generate(_workload(rate=40.0))
    run = simulate_pd(reqs, _setup(lambda isl: 2e-4, x, y))
    r = run.result
    assert r.output_tokens == int(reqs.osl.sum())
    assert sum(int(p.prefill_tokens) for p in run.prefill_runs) == int(reqs.isl.sum())
    dec_out = sum(int(d.output_tokens) for d in run.decode_runs)
    assert dec_out == int((reqs.osl - 1).sum())
    assert np.all(r.arrival_s <= r.admit_s) and np.all(r.admit_s < r.first_token_s)
    assert np.all(r.first_token_s <= r.finish_s)
    assert len(run.prefill_runs) == x and len(run.decode_runs) == y


def test_closed_loop_is_refused():
    w = ServeWorkload(num_requests=10, rate=None, concurrency=4)
    with pytest.raises(MoeplanError, match="open arrival stream"):
        simulate_pd(generate(w), _setup(lambda isl: 0.0))


@settings(max_examples=examples(60))
@given(
    mu_p=st.floats(0.1, 50),
    gp=st.sampled_from([1, 2, 4, 8]),
    mu_d=st.floats(0.1, 50),
    gd=st.sampled_from([1, 2, 4, 8]),
    budget=st.integers(2, 40),
)
def test_rate_match_is_the_best_split(mu_p, gp, mu_d, gd, budget):
    """No (x, y) within the budget sustains more requests/s per GPU than the pick."""
    got = rate_match(mu_p, gp, mu_d, gd, budget)
    if gp + gd > budget:
        assert got is None
        return
    assert got is not None
    x, y, rate = got
    assert x * gp + y * gd <= budget and rate == min(x * mu_p, y * mu_d)
    for a in range(1, budget // gp + 1):
        for b in range(1, (budget - a * gp) // gd + 1):
            assert min(a * mu_p, b * mu_d) / (a * gp + b * gd) <= rate / (x * gp + y * gd) * (
                1 + 1e-12
            )


def test_queue_growth_is_detected():
    """The stability test fails a deployment whose decode pool cannot keep up."""
    slow = replace(_setup(lambda isl: 1e-4), decode_eval=lambda b: 0.05 + 1e-3 * b.sequences)
    run = simulate_pd(generate(_workload(rate=80.0, n=400)), slow)
    assert not stable(run, SLO(ttft_s=1.0, tpot_s=0.1))
    calm = simulate_pd(generate(_workload(rate=5.0, n=400)), _setup(lambda isl: 1e-4))
    assert stable(calm, SLO(ttft_s=1.0, tpot_s=0.1))


def test_capacity_holds_over_a_ten_times_longer_window():
    """The steady capacity of the best rate-matched P/D deployment (what ``serve-sim --pd``
    and ``plan`` report) is not an artefact of its window: 10 % below it (a rate the
    capacity's definition requires to meet the SLOs) a run measuring ten times more requests
    meets the SLOs with neither pool's queue growing."""
    from moeplan.search.capacity.slo import steady_probe
    from moeplan.search.disagg.given import simulate_given
    from moeplan.search.disagg.search import WINDOW_LIFETIMES

    m = load_model("qwen3-30b-a3b")
    c = replace(load_cluster("h100-sxm-8"), gpus_per_node=4)
    w = ServeWorkload(
        num_requests=100, rate=1.0, isl=LengthDist(mean=1024), osl=LengthDist(mean=32), seed=1
    )
    slo = SLO(ttft_s=1.0, tpot_s=0.05)
    ctx = Context(model=m, cluster=c, cost=CostModel(c), workload=w, slo=slo)
    k = candidates(ctx, "pd")[0]
    r = simulate_given(ctx, k.layout, rate_given=False, requests=100)
    lam = r.max_rate_meeting_slo_rps
    assert r.meets_slo and lam > 0

    def run(reqs, stop):
        return simulate_pd(reqs, k.setup, horizon_s=stop).result

    p = steady_probe(None, None, w, slo, 0.9 * lam, requests=100, runner=run, horizon=True,
                     window_lifetimes=10 * WINDOW_LIFETIMES)  # fmt: skip
    assert p.stable and p.meets(slo)


@settings(max_examples=25)
@given(
    x=st.integers(1, 3),
    y=st.integers(1, 3),
    rate=st.floats(1.0, 80.0),
    seed=st.integers(0, 10_000),
    latency=st.floats(0.0, 0.05),
)
def test_random_pd_runs_conserve_tokens_and_repeat(x, y, rate, seed, latency):
    """Any pools, rate and link: every output token once, KV arrives after the prefill plus
    its transfer, the decode pool never starts a request before its KV, same seed same run."""
    reqs = generate(_workload(rate=rate, n=120, seed=seed))
    setup = _setup(lambda isl: latency + isl * 1e-7, x, y)
    a, b = simulate_pd(reqs, setup), simulate_pd(reqs, setup)
    assert np.array_equal(a.result.finish_s, b.result.finish_s)
    assert a.result.output_tokens == int(reqs.osl.sum())
    assert np.all(a.kv_arrival_s >= a.result.admit_s + a.transfer_s - 1e-12)
    for run, idx in a.decode_index:
        assert np.all(run.admit_s >= a.kv_arrival_s[idx] - 1e-12)
        assert int(run.output_tokens) == int((reqs.osl[idx] - 1).sum())


def test_prefill_pool_capacity_matches_its_saturated_simulation():
    """The prefill pool's analytic rate (full iterations of its chunk) equals what its own
    scheduler and evaluator sustain when saturated: 192 prompts queued at once, output 1
    token (each request ends at its first token), throughput over the run. A per-layer
    floor in the price makes an iteration of the wrong size visibly wrong."""
    from moeplan.search.disagg.pools import prefill_pool
    from moeplan.serve import requests_from_rows, simulate
    from moeplan.serve.metrics import SLO

    m, c = load_model("qwen3-30b-a3b"), load_cluster("h100-sxm-8")
    w = ServeWorkload(num_requests=50, rate=1.0, isl=LengthDist.parse("2000"),
                      osl=LengthDist.parse("100"))  # fmt: skip

    class Floor(CostModel):  # a per-layer floor: iterations of different sizes differ
        def expert_ffn(self, *a, **k):  # type: ignore[no-untyped-def]
            return super().expert_ffn(*a, **k) + 2e-3

    ctx = Context(model=m, cluster=c, cost=Floor(c), workload=w, slo=SLO())
    p = prefill_pool(ctx, Layout(attn_dp=4, moe_ep=4))
    assert p is not None
    n = 192
    res = simulate(requests_from_rows([0.0] * n, [2000] * n, [1] * n), p.cfg, p.evaluate)
    assert n / float(res.finish_s.max()) == pytest.approx(p.rate, rel=0.05)


@pytest.mark.parametrize("x,y,rate", [(1, 1, 60.0), (2, 1, 150.0), (3, 2, 400.0)])
def test_prefill_view_is_a_lower_bound_of_the_deployment(x, y, rate):
    """The prefill-only view (the search's cheap rejection) runs the very prefill pool of the
    deployment: the same admissions, and every TTFT at most the full run's (transfers
    queue on their lanes in the full run, not in the view), light and overloaded alike."""
    from moeplan.serve.pools.pd import prefill_view

    setup = _setup(lambda isl: 1e-4 * isl / 64, x, y)
    reqs = generate(_workload(rate=rate, n=400, seed=11))
    full = simulate_pd(reqs, setup).result
    view = prefill_view(reqs, setup)
    np.testing.assert_array_equal(view.admit_s, full.admit_s)
    ttft_full = full.first_token_s - full.arrival_s
    ttft_view = view.first_token_s - view.arrival_s
    assert np.all(ttft_view <= ttft_full + 1e-12)
    assert np.all(view.finish_s == view.first_token_s)
