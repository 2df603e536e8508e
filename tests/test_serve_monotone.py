"""Serving figures that must be monotone: a decode step against its context, on the engine's
context grid; and what CRN arrivals do and do not guarantee for TTFT against the rate."""

from __future__ import annotations

import numpy as np
import pytest

from moeplan.kernel_tables import engine_cost_model
from moeplan.serve import (
    Batch,
    EngineConfig,
    IterationModel,
    LengthDist,
    ServeLayout,
    ServeWorkload,
    generate,
    simulate,
)
from moeplan.serve.iteration.grid import bucket, bucket_grid
from moeplan.specs import load_cluster, load_model


def test_the_grid_is_every_bucket_value():
    values = {bucket(x) for x in range(1, 70_001)}
    assert bucket_grid(70_000) == sorted(v for v in values if v <= 70_000)
    assert bucket(2048) == 2080  # a cell boundary moves up half a cell (engine docstring)


@pytest.fixture(scope="module")
def a100_mixtral():
    cluster = load_cluster("a100-sxm-8")
    cost = engine_cost_model(cluster, None, engine="sglang")
    layout = ServeLayout(attn_tp=4, attn_dp=1, moe_tp=4, moe_ep=1)
    return IterationModel(load_model("mixtral-8x7b"), cluster, cost, layout)


@pytest.mark.parametrize("batch", [1, 8, 24])
def test_decode_step_never_gets_cheaper_with_more_context(a100_mixtral, batch):
    """Before: 32,512 -> 33,280 keys at batch 8 was 0.62 % cheaper (the measured line of
    A100 sglang decode attention ends at 32,767 keys and the correction switched there)."""
    grid = bucket_grid(140_000)
    t = np.array([a100_mixtral(Batch(batch, c, ())) for c in grid])
    drops = np.flatnonzero(np.diff(t) < 0)
    assert drops.size == 0, [(grid[i], grid[i + 1], t[i + 1] / t[i] - 1) for i in drops[:5]]
    assert t[-1] > t[0]


def test_the_floor_changes_nothing_where_the_price_already_rises(a100_mixtral):
    """Up to the end of the measured line the raw price rises: the step is the raw one."""
    cm, md = a100_mixtral.cost, a100_mixtral.model
    for c in (1_000, 8_000, 30_000):
        raw = cm.attention_core(md, 8, 1, bucket(c), 4)
        assert a100_mixtral._decode_core(8, bucket(c), False) == raw


def _const(d: float):
    return lambda batch: d


CFG1 = EngineConfig(policy="prefill-first", chunk_tokens=0, max_running=1, kv_tokens=1 << 30)


def test_a_one_at_a_time_server_has_ttft_monotone_in_rate_per_request():
    """max_running 1: requests are served alone in arrival order, each for a fixed time, so
    TTFT follows Lindley's recursion W' = max(0, W + S - gap / rate) and every request's
    TTFT (hence every percentile) rises with the rate on common random numbers."""
    w = ServeWorkload(
        num_requests=400,
        isl=LengthDist(kind="uniform", low=100, high=900),
        osl=LengthDist(kind="uniform", low=1, high=4),
        seed=5,
    )
    d = 0.01  # every iteration (prefill or decode) 10 ms
    prev = None
    for rate in (20.0, 30.0, 40.0, 45.0):
        reqs = generate(w.with_rate(rate))
        ttft = simulate(reqs, CFG1, _const(d)).first_token_s - reqs.arrival_s
        service = d * reqs.osl  # one prefill iteration + osl - 1 decode steps
        wait, lindley = 0.0, []
        for i in range(len(reqs)):
            if i:
                gap = reqs.arrival_s[i] - reqs.arrival_s[i - 1]
                wait = max(0.0, wait + service[i - 1] - gap)
            lindley.append(wait + d)
        assert ttft == pytest.approx(np.array(lindley), abs=1e-9)
        if prev is not None:
            assert np.all(ttft >= prev - 1e-12)
        prev = ttft


def test_with_batching_a_higher_rate_can_lower_a_request_ttft():
    """Why TTFT percentiles of a batching engine need not be monotone in the rate even on
    common random numbers: at rate 1, C arrives just after B's prefill started and waits for
    it; at rate 2, B and C both arrive during A's prefill and share the next one."""
    from moeplan.serve import requests_from_rows

    cfg = EngineConfig(policy="prefill-first", chunk_tokens=4096, max_running=8, kv_tokens=1 << 20)
    unit = np.array([0.0, 1.5, 1.6])
    ttft = {}
    for rate in (1.0, 2.0):
        reqs = requests_from_rows(unit / rate, [100, 100, 100], [1, 1, 1])
        ttft[rate] = simulate(reqs, cfg, _const(1.0)).first_token_s - reqs.arrival_s
    assert ttft[1.0][2] == pytest.approx(1.9)  # waits 0.9 s for B's iteration, then 1 s
    assert ttft[2.0][2] == pytest.approx(1.2)  # waits 0.2 s for A's, shares B's
    assert ttft[2.0][1] > ttft[1.0][1]  # B, alone before, now waits
