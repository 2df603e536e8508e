"""Sem-MoE's fallback guard keeps real held-out gains and still rejects no-structure traces
(qwen3-30b-a3b EP8 seed 1, LAR 0.237 vs 0.125 and faster on test, rejected
by a point estimate on ~80 validation requests)."""

from __future__ import annotations

import numpy as np
import pytest

from moeplan.cost import cost_model_for
from moeplan.planners.placement.guard import RequestTally, decide
from moeplan.planners.placement.metrics import Tally, roofline_evaluator, summarize
from moeplan.planners.placement.planner import PlaceConfig, cost_evaluator, place
from moeplan.specs import load_cluster, load_model
from moeplan.traces.synthetic import SynthConfig, synthesize

LAYERS, REQUESTS, SPLIT_SEED = 8, 512, 3
# NO_BASELINES: the guard compares Sem-MoE with contiguous placement only; the EPLB and
# transition baselines (their statistics, placements and held-out metrics) are not computed.
# Sem-MoE's and contiguous placement's results and the guard's verdict are the same with or
# without them (test_baselines_do_not_change_the_guard_inputs).


@pytest.fixture(scope="module")
def qwen_case():
    m = load_model("qwen3-30b-a3b")
    tr = synthesize(
        SynthConfig(
            num_layers=LAYERS,
            num_experts=m.num_experts,
            top_k=m.top_k,
            vocab_size=32000,
            num_requests=REQUESTS,
            seed=0,
        )
    )
    ev = cost_evaluator(cost_model_for(load_cluster("h100-sxm-8")), m, 8)
    return place(
        tr,
        num_layers=LAYERS,
        num_experts=m.num_experts,
        hidden_bytes=m.hidden_bytes,
        evaluate=ev,
        cfg=PlaceConfig(ep=8, seed=SPLIT_SEED, baselines=False),  # NO_BASELINES
    )


def test_issue_case_keeps_the_held_out_gain(qwen_case):
    """qwen3-30b-a3b EP8 (8 MoE layers, 512 requests, split seed 3): the old point estimate
    on ~80 validation requests (>= 0.995 x contiguous: fall back) rejected Sem-MoE although it
    is more local and faster on the held-out requests; the bootstrap guard keeps it."""
    g = qwen_case.extra["guard"]
    assert 50 <= g["requests"] <= 120
    assert g["val_time_ratio"] >= 0.995  # the old guard's verdict: fall back
    assert not qwen_case.fallback, g  # the new one keeps it ...
    sem = qwen_case.methods["semmoe"].metrics
    con = qwen_case.methods["contiguous"].metrics
    assert sem["lar"] > 1.5 * con["lar"]  # ... and the gain is real on held-out requests
    assert sem["moe_layer_time_s"] < con["moe_layer_time_s"]


def _tally_pair(rng, n_req: int, local_shift: float):
    """Two placements' per-request tallies on synthetic routing: the second sends a fraction
    ``local_shift`` of its remote activations locally instead."""
    ep, layers = 4, 2
    out = []
    for shift in (0.0, local_shift):
        t = RequestTally(num_layers=layers, ep=ep)
        rs = np.random.default_rng(0)
        for r in range(n_req):
            n = 20
            experts = rs.integers(0, 8, size=(n, layers, 2)).astype(np.int16)
            src = rs.integers(0, ep, size=(n, layers))
            y = np.tile(np.arange(8) % ep, (layers, 1))
            if shift:  # move some activations to the source device's experts
                move = rs.random((n, layers, 2)) < shift
                experts = np.where(
                    move,
                    (src[:, :, None] + ep * rs.integers(0, 2, (n, layers, 2))).astype(np.int16),
                    experts,
                )
            t.add(np.full(n, r), experts, y, src)
        out.append(t)
    return out


def test_request_tally_sums_to_the_streaming_tally():
    """Per-request counts add up to the aggregate Tally the reported metrics come from."""
    rng = np.random.default_rng(3)
    ep, layers, n = 4, 3, 200
    experts = rng.integers(-1, 8, size=(n, layers, 2)).astype(np.int16)
    src = rng.integers(0, ep, size=(n, layers))
    rid = rng.integers(0, 17, size=n)
    y = np.tile(np.arange(8) % ep, (layers, 1))
    agg, per = Tally(num_layers=layers, ep=ep), RequestTally(num_layers=layers, ep=ep)
    agg.add(experts, y, src)
    per.add(rid[:120], experts[:120], y, src[:120])
    per.add(rid[120:], experts[120:], y, src[120:])  # a request split over chunks
    load, send, tokens = per.arrays()
    np.testing.assert_allclose(load.sum(0), agg.load)
    np.testing.assert_allclose(send.sum(0), agg.send)
    assert tokens.sum() == n


def test_bootstrap_decision_on_synthetic_tallies():
    """No locality difference: fall back. A clear locality gain: keep."""
    ev = roofline_evaluator(expert_flops=1e6, gpu_flops=1e12, a2a_bw=1e9)
    kw = dict(
        num_experts=8, step_tokens=1024, hidden_bytes=1024, evaluate=ev, balance_tol=1.03, seed=0
    )
    rng = np.random.default_rng(0)
    same = _tally_pair(rng, 60, 0.0)
    assert not decide(same[1], same[0], **kw)["keep"]
    better = _tally_pair(rng, 60, 0.5)
    v = decide(better[1], better[0], **kw)
    assert v["keep"] and v["p_more_local"] >= 0.95, v


def test_guard_prices_a_resample_with_the_reported_metric_formula():
    """The guard prices a resample with the reported metric's formula (no resampling)."""
    from moeplan.planners.placement.guard import _times

    rng = np.random.default_rng(5)
    ep, layers, n = 4, 2, 300
    experts = rng.integers(0, 8, size=(n, layers, 2)).astype(np.int16)
    src = rng.integers(0, ep, size=(n, layers))
    y = np.tile(np.arange(8) % ep, (layers, 1))
    ev = roofline_evaluator(expert_flops=1e6, gpu_flops=1e12, a2a_bw=1e9, a2a_latency=1e-5)
    agg, per = Tally(num_layers=layers, ep=ep), RequestTally(num_layers=layers, ep=ep)
    agg.add(experts, y, src)
    per.add(rng.integers(0, 9, size=n), experts, y, src)
    load, send, tokens = per.arrays()
    got = _times(
        load.sum(0)[None],
        send.sum(0)[None],
        np.array([tokens.sum()]),
        num_experts=8,
        step_tokens=4096,
        hidden_bytes=2048,
        evaluate=ev,
    )[0]
    want = summarize(agg, num_experts=8, hidden_bytes=2048, step_tokens=4096, evaluate=ev)[
        "moe_layer_time_s"
    ]
    assert got == pytest.approx(want, rel=1e-12)


@pytest.mark.slow
def test_full_qwen3_30b_ep8_case_the_point_estimate_rejected():
    """All 48 MoE layers, 512 requests, split seed 0: the old guard (validation point
    estimate >= 0.995 x contiguous) fell back although Sem-MoE was 3 % faster on test with
    LAR 0.24 vs 0.13 (measured when this guard was written); the bootstrap guard keeps it."""
    m = load_model("qwen3-30b-a3b")
    tr = synthesize(
        SynthConfig(
            num_layers=m.num_moe_layers,
            num_experts=m.num_experts,
            top_k=m.top_k,
            vocab_size=32000,
            num_requests=512,
            seed=0,
        )
    )
    ev = cost_evaluator(cost_model_for(load_cluster("h100-sxm-8")), m, 8)
    res = place(
        tr,
        num_layers=m.num_moe_layers,
        num_experts=m.num_experts,
        hidden_bytes=m.hidden_bytes,
        evaluate=ev,
        cfg=PlaceConfig(ep=8, seed=0, baselines=False),  # NO_BASELINES
    )
    sem, con = res.methods["semmoe"].metrics, res.methods["contiguous"].metrics
    g = res.extra["guard"]
    assert 50 <= g["requests"] <= 120
    assert g["val_time_ratio"] >= 0.995, g  # the old guard's verdict: fall back
    assert not res.fallback, g
    assert sem["lar"] > 1.5 * con["lar"]
    assert sem["moe_layer_time_s"] < con["moe_layer_time_s"]


def test_too_few_validation_requests_resolve_nothing_and_say_so():
    """10 validation requests resolve nothing: undecided, the guard falls back to contiguous
    placement, marked unresolved."""
    from moeplan.planners.placement.guard import MIN_REQUESTS

    ev = roofline_evaluator(expert_flops=1e6, gpu_flops=1e12, a2a_bw=1e9)
    kw = dict(
        num_experts=8, step_tokens=1024, hidden_bytes=1024, evaluate=ev, balance_tol=1.03, seed=0
    )
    few = _tally_pair(np.random.default_rng(0), MIN_REQUESTS // 2, 0.5)
    v = decide(few[1], few[0], **kw)
    assert not v["keep"] and not v["resolved"] and v["requests"] < MIN_REQUESTS
    assert v["decision"].startswith("unresolved")


def test_baselines_do_not_change_the_guard_inputs():
    """The EPLB and transition baselines are extra rows: Sem-MoE's and contiguous placement's
    placements, held-out metrics and the guard's verdict are the same without them (what lets
    the tests above skip them)."""
    tr = synthesize(
        SynthConfig(
            num_layers=4,
            num_experts=32,
            top_k=4,
            vocab_size=4000,
            num_requests=160,
            min_len=32,
            max_len=96,
            num_groups=8,
            num_topics=32,
            seed=2,
        )
    )
    ev = roofline_evaluator(expert_flops=1e7, gpu_flops=1e15, a2a_bw=1.5e11, a2a_latency=2e-5)
    kw = dict(num_layers=4, num_experts=32, hidden_bytes=4096, evaluate=ev)
    full = place(tr, **kw, cfg=PlaceConfig(ep=4, seed=1))
    bare = place(tr, **kw, cfg=PlaceConfig(ep=4, seed=1, baselines=False))
    assert set(full.methods) == {"contiguous", "eplb", "transition", "semmoe"}
    assert set(bare.methods) == {"contiguous", "semmoe"}
    assert bare.extra["guard"]["requests"] >= 20  # the guard decided, on the same requests
    assert bare.fallback == full.fallback and bare.extra["guard"] == full.extra["guard"]
    for name in bare.methods:
        np.testing.assert_array_equal(bare.methods[name].y, full.methods[name].y)
        assert bare.methods[name].metrics == full.methods[name].metrics, name


@pytest.mark.parametrize(("seed", "gain"), [(4, 0.03), (9, 0.05)])
def test_weak_affinity_gains_the_validation_data_cannot_resolve_are_kept(seed, gain):
    """bench/bench_guard.py's traces: ~30 validation requests; the old rule (locality at 0.95,
    slower or imbalanced at 0.8) fell back on both although Sem-MoE is 3.4 % and 6.0 %
    faster on the 760-request test split. The time difference is unresolved (its 90 %
    interval spans 1): the fitted plan is kept and the verdict says so."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "bench_guard", Path(__file__).parents[1] / "bench" / "bench_guard.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    m = load_model("qwen3-30b-a3b")
    _, tr = bench.weakened_trace(seed, m)
    ev = cost_evaluator(cost_model_for(load_cluster("h100-sxm-8")), m, 8)
    res = place(
        tr,
        num_layers=4,
        num_experts=m.num_experts,
        hidden_bytes=m.hidden_bytes,
        evaluate=ev,
        cfg=PlaceConfig(ep=8, seed=seed, baselines=False, test_fraction=0.8, val_fraction=0.2),
    )
    g = res.extra["guard"]
    lo, hi = g["time_ratio_interval_90"]
    assert lo < 1 < hi and not g["resolved"] and g["time_ratio_se"] > 0
    assert not res.fallback, g
    sem, con = res.methods["semmoe"].metrics, res.methods["contiguous"].metrics
    assert sem["moe_layer_time_s"] < (1 - gain) * con["moe_layer_time_s"]  # the oracle


def _shuffled_ratio(seed: int, num_requests: int) -> tuple[float, dict]:
    """Sem-MoE's held-out MoE-layer time / contiguous placement's, guard on, on a small
    synthetic trace whose expert rows are shuffled across tokens (no token->expert affinity
    at all); and the guard's verdict."""
    from dataclasses import replace

    experts, top_k, ep, layers = 32, 4, 4, 2
    tr = synthesize(
        SynthConfig(
            num_layers=layers,
            num_experts=experts,
            top_k=top_k,
            vocab_size=4000,
            num_requests=num_requests,
            min_len=24,
            max_len=72,
            seed=seed,
        )
    )
    tr = replace(
        tr, experts=tr.experts[np.random.default_rng(1000 + seed).permutation(len(tr.experts))]
    )
    ev = roofline_evaluator(
        expert_flops=2 * 3 * 2048 * 768, gpu_flops=0.7 * 989e12, a2a_bw=50e9, a2a_latency=1e-5
    )
    res = place(
        tr,
        num_layers=layers,
        num_experts=experts,
        hidden_bytes=4096,
        evaluate=ev,
        cfg=PlaceConfig(ep=ep, seed=seed, baselines=False),  # NO_BASELINES
    )
    sem, con = res.methods["semmoe"].metrics, res.methods["contiguous"].metrics
    return sem["moe_layer_time_s"] / con["moe_layer_time_s"], res.extra["guard"]


#: The guard's promise on traces without structure (guard module docstring).
NO_AFFINITY_TOLERANCE = 0.008


def test_guard_is_never_more_than_0_8_percent_worse_on_36_shuffled_traces():
    """With the guard off, Sem-MoE's fit is up to ~10 % worse than contiguous placement on
    some of these traces; undecided, the guard falls back, so none is kept worse."""
    worse = {}
    for seed in range(36):
        ratio, verdict = _shuffled_ratio(seed, 120)
        if ratio > 1 + NO_AFFINITY_TOLERANCE:
            worse[seed] = (ratio, verdict["decision"])
    assert not worse, worse


@pytest.mark.slow
def test_guard_on_72_larger_shuffled_traces():
    """The same promise on twice as many traces with twice the requests (more validation
    requests, so more of the decisions go through the bootstrap rather than the minimum)."""
    worse = {}
    for seed in range(100, 172):
        ratio, verdict = _shuffled_ratio(seed, 240)
        if ratio > 1 + NO_AFFINITY_TOLERANCE:
            worse[seed] = (ratio, verdict["decision"])
    assert not worse, worse
