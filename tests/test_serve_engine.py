"""Serving engine oracles: single request, M/D/1 queueing, conservation, KV bounds, determinism."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from doc_figures import pinned
from hypothesis_budget import examples
from moeplan.cost import cost_model_for
from moeplan.planners.layout import Layout
from moeplan.serve import (
    Batch,
    EngineConfig,
    IterationModel,
    LengthDist,
    ServeWorkload,
    generate,
    requests_from_rows,
    simulate,
    summarize,
)
from moeplan.serve.engine.run import bucket
from moeplan.specs import load_cluster, load_model


def const(d: float):
    return lambda batch: d


def _cfg(**kw) -> EngineConfig:
    base = {
        "policy": "prefill-first",
        "chunk_tokens": 2048,
        "max_running": 64,
        "kv_tokens": 1 << 30,
    }
    base.update(kw)
    return EngineConfig(**base)


@pytest.fixture(scope="module")
def real():
    model = load_model("qwen3-30b-a3b")
    cluster = load_cluster("h100-sxm-8")
    layout = Layout(attn_tp=2, attn_dp=1, moe_tp=1, moe_ep=2)
    return IterationModel(model, cluster, cost_model_for(cluster), layout)


#: a 5,000-token prompt in chunks of 2,048: (new tokens, context) of each prefill iteration
CHUNKS = [(2048, 2048), (2048, 4096), (904, 5000)]
#: the M/D/1 checks: requests of the sample path and its tolerance; Poisson requests of the
#: mean wait, its load and tolerance
LINDLEY_REQUESTS, EXACT = 3000, 1e-9
PK_REQUESTS, PK_RHO, PK_TOL = 100_000, 0.5, 0.03
#: random workloads of the token-conservation property
CONSERVATION_EXAMPLES = 40


def test_single_request_ttft_is_its_prefill_iterations(real):
    """Alone, TTFT = the sum of its prefill chunk iterations at their real contexts."""
    reqs = requests_from_rows([0.0], [5000], [40])
    res = simulate(reqs, _cfg(chunk_tokens=2048), real)
    chunks = CHUNKS
    exact = sum(real(Batch(0, 0, ((q, c),))) for q, c in chunks)
    bucketed = sum(real(Batch(0, 0, ((q, bucket(c)),))) for q, c in chunks)
    ttft = res.first_token_s[0] - res.arrival_s[0]
    assert ttft == pytest.approx(bucketed, rel=1e-12)
    assert ttft == pytest.approx(exact, rel=1 / 64)


def test_single_request_tpot_is_the_decode_iteration_time(real):
    """Alone, TPOT = mean decode iteration time over its contexts (bucketing <= 1/64)."""
    isl, osl = 700, 300
    res = simulate(requests_from_rows([1.0], [isl], [osl]), _cfg(), real)
    steps = [real(Batch(1, isl + j, ())) for j in range(1, osl)]
    tpot = (res.finish_s[0] - res.first_token_s[0]) / (osl - 1)
    assert tpot == pytest.approx(np.mean(steps), rel=1 / 64)
    fake = simulate(requests_from_rows([1.0], [isl], [osl]), _cfg(), const(0.02))
    assert (fake.finish_s[0] - fake.first_token_s[0]) / (osl - 1) == pytest.approx(0.02)
    assert fake.first_token_s[0] - 1.0 == pytest.approx(0.02)


def _md1(n: int, seed: int, rate: float, d: float, osl: int):
    w = ServeWorkload(
        num_requests=n, rate=rate, isl=LengthDist(mean=4000), osl=LengthDist(mean=osl), seed=seed
    )
    reqs = generate(w)
    return reqs, simulate(reqs, _cfg(chunk_tokens=8192, max_running=1), const(d))


def test_md1_sample_path_is_lindley():
    """Batch cap 1, fixed service D: every wait follows W' = max(0, W + D - gap) exactly."""
    d, osl = 0.01, 10
    reqs, res = _md1(LINDLEY_REQUESTS, 1, 6.0, d, osl)
    service = osl * d  # one prefill iteration (first token) + osl-1 decode iterations
    wait, expect = 0.0, []
    for gap in np.diff(reqs.arrival_s, prepend=reqs.arrival_s[0]):
        wait = max(0.0, wait + service - gap) if expect else 0.0
        expect.append(wait)
    np.testing.assert_allclose(res.admit_s - res.arrival_s, expect, atol=EXACT)
    np.testing.assert_allclose(res.finish_s - res.admit_s, service, rtol=EXACT)


@functools.cache
def _pk_error() -> float:
    """The simulated M/D/1 mean wait over Pollaczek-Khinchine's, less one (Poisson arrivals at
    load :data:`PK_RHO`, cap 1, fixed service)."""
    d, osl = 0.01, 10
    service = osl * d
    _, res = _md1(PK_REQUESTS, 0, PK_RHO / service, d, osl)
    wait = float((res.admit_s - res.arrival_s).mean())
    return wait / (PK_RHO * service / (2 * (1 - PK_RHO))) - 1


def test_md1_mean_wait_matches_pollaczek_khinchine():
    """Poisson arrivals, cap 1, fixed service: mean wait = rho D / 2(1 - rho) within 3 %."""
    assert abs(_pk_error()) <= PK_TOL


def test_the_docs_figures_are_these_oracles():
    """serve.md's figures (docs/benchmarks/data/serve-oracles.json): the oracles' sizes and
    tolerances, and the M/D/1 mean wait's error this run measures (to the digit shown)."""
    figures = pinned("serve-oracles")
    assert figures["single_request_chunks"] == len(CHUNKS)
    assert (figures["lindley_requests"], figures["exact_tolerance"]) == (LINDLEY_REQUESTS, EXACT)
    assert (figures["pk_requests"], figures["pk_load"]) == (PK_REQUESTS, PK_RHO)
    assert figures["pk_tolerance"] == PK_TOL
    assert abs(figures["pk_error_measured"] - abs(_pk_error())) < 5e-4
    assert figures["conservation_examples"] == CONSERVATION_EXAMPLES


def _check_run(reqs, cfg, res):
    assert np.all(np.isfinite(res.finish_s)), "every request finishes"
    assert res.output_tokens == int(reqs.osl.sum())
    assert res.prefill_tokens == int((reqs.isl - reqs.cached).sum())
    assert int(res.iter_prefill.sum()) == res.prefill_tokens + res.recomputed_tokens
    assert int(res.iter_kv.max()) <= cfg.kv_tokens
    assert np.all(res.first_token_s >= res.arrival_s)
    assert np.all(res.finish_s >= res.first_token_s)
    assert np.all(res.iter_start_s[1:] >= res.iter_end_s[:-1] - 1e-12), "iterations overlap"
    if res.preemptions == 0:
        assert res.recomputed_tokens == 0
    dec = int(res.iter_decode.sum())
    assert res.output_tokens - len(reqs) - res.preemptions <= dec <= res.output_tokens - len(reqs)


@settings(derandomize=True, deadline=None, max_examples=examples(CONSERVATION_EXAMPLES))
@given(
    n=st.integers(1, 40),
    seed=st.integers(0, 10_000),
    policy=st.sampled_from(["prefill-first", "mixed"]),
    chunk=st.sampled_from([0, 64, 256]),
    cap=st.integers(1, 16),
    kv_extra=st.integers(0, 600),
    hit=st.sampled_from([0.0, 0.5]),
)
def test_random_workloads_conserve_tokens_and_kv(n, seed, policy, chunk, cap, kv_extra, hit):
    """Every output token once, every prompt token prefilled once (recompute apart), KV bounded."""
    rng = np.random.default_rng(seed)
    isl, osl = rng.integers(1, 200, n), rng.integers(1, 60, n)
    reqs = requests_from_rows(np.sort(rng.exponential(0.05, n).cumsum()), isl, osl, hit)
    if policy == "mixed":
        chunk = max(chunk, cap + 1)
    kv = int((isl + osl).max()) + kv_extra
    cfg = _cfg(policy=policy, chunk_tokens=chunk, max_running=cap, kv_tokens=kv)
    res = simulate(reqs, cfg, lambda b: 1e-3 + 1e-5 * b.tokens + 1e-8 * b.decode * b.decode_ctx)
    _check_run(reqs, cfg, res)


def test_tight_kv_preempts_and_recomputes():
    """A pool smaller than the running set's growth forces recompute preemptions."""
    reqs = requests_from_rows(np.zeros(12), np.full(12, 100), np.full(12, 200))
    cfg = _cfg(policy="mixed", chunk_tokens=4096, max_running=12, kv_tokens=1200)
    res = simulate(reqs, cfg, const(1e-3))
    assert res.preemptions > 0 and res.recomputed_tokens > 0
    _check_run(reqs, cfg, res)


def test_same_seed_same_results():
    w = ServeWorkload(
        num_requests=300,
        rate=30.0,
        isl=LengthDist.parse("lognormal:300:0.7"),
        osl=LengthDist.parse("uniform:10:200"),
        seed=3,
    )
    cfg = _cfg(kv_tokens=20_000)
    a = simulate(generate(w), cfg, lambda b: 1e-3 + 2e-6 * b.tokens)
    b = simulate(generate(w), cfg, lambda b: 1e-3 + 2e-6 * b.tokens)
    for f in ("first_token_s", "finish_s", "iter_end_s", "itl_s"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))


def test_fast_forward_equals_single_steps():
    """Decode fast-forward reproduces one-step-at-a-time simulation."""
    w = ServeWorkload(
        num_requests=200,
        rate=8.0,
        isl=LengthDist.parse("uniform:50:500"),
        osl=LengthDist.parse("uniform:20:300"),
        seed=11,
    )
    cfg = _cfg(kv_tokens=15_000, max_running=32)

    def ev(b: Batch) -> float:
        return 2e-3 + 1e-5 * b.tokens + 3e-9 * b.decode * b.decode_ctx

    fast, slow = (simulate(generate(w), cfg, ev, fast_forward=f) for f in (True, False))
    np.testing.assert_allclose(fast.finish_s, slow.finish_s, rtol=EXACT)
    np.testing.assert_allclose(fast.first_token_s, slow.first_token_s, rtol=EXACT)
    np.testing.assert_allclose(fast.iter_end_s, slow.iter_end_s, rtol=EXACT)
    np.testing.assert_array_equal(fast.iter_kv, slow.iter_kv)
    assert fast.preemptions == slow.preemptions
    ms = [summarize(r, 8) for r in (fast, slow)]
    assert ms[0].itl_p90_s == pytest.approx(ms[1].itl_p90_s, rel=EXACT)
    assert (
        fast.itl_weight.sum()
        == slow.itl_weight.sum()
        == int((w_osl := generate(w).osl).sum() - len(w_osl))
    )


def test_arrival_at_iteration_end_joins_next_iteration():
    """Heap key (time, priority, seq): an arrival at an iteration's end is queued first."""
    reqs = requests_from_rows([0.0, 1.0], [10, 10], [3, 3])
    res = simulate(reqs, _cfg(policy="mixed", chunk_tokens=64, max_running=4), const(1.0))
    assert res.first_token_s.tolist() == [1.0, 2.0]
    assert res.iter_decode[1] == 1 and res.iter_prefill[1] == 10


def test_closed_loop_keeps_concurrency():
    """concurrency=C: C requests in flight, the next issued when one finishes."""
    w = ServeWorkload(
        num_requests=50, rate=None, concurrency=4, isl=LengthDist(mean=20), osl=LengthDist(mean=5)
    )
    res = simulate(generate(w), _cfg(max_running=64), const(0.01))
    assert res.iter_decode.max() <= 4
    starts = np.sort(res.arrival_s)
    assert np.all(starts[:4] == 0.0) and np.all(np.isin(starts[4:], res.finish_s))


def test_request_larger_than_kv_is_rejected():
    from moeplan.errors import MoeplanError

    with pytest.raises(MoeplanError, match="KV pool"):
        simulate(requests_from_rows([0.0], [900], [200]), _cfg(kv_tokens=1000), const(1e-3))


@pytest.mark.parametrize("fast", [True, False])
def test_a_burst_admission_reserves_each_new_requests_whole_output(fast):
    # SGLang's PrefillAdder (managers/schedule_policy.py): a request admitted into the batch
    # being formed reserves its prompt and its whole max_new_tokens, the requests already
    # running 0.7 of their outstanding output. Four requests of 10 prompt tokens asking 20
    # at t = 0 into a 104-token pool, every iteration D long:
    #   t = 0: r0 10 + 20 = 30, r1 30 + 30 = 60, r2 60 + 30 = 90 <= 104; r3 90 + 30 = 120 > 104
    #   t = D: r3 alone: 30 prompt tokens in use + 10 + at most 0.7 x 60 + 20 = 102 <= 104
    # (counting the admissions at 0.7, r3 fits at t = 0: 30 + 10 + 0.7 x 80 = 96)
    d = 0.01
    reqs = requests_from_rows(np.zeros(4), [10] * 4, [20] * 4)
    new = _cfg(kv_tokens=104, admit_reserve=0.7, admit_reserve_new=1.0)
    res = simulate(reqs, new, const(d), fast_forward=fast)
    assert np.allclose(res.admit_s, [0, 0, 0, d])
    assert np.allclose(res.first_token_s, [d, d, d, 2 * d])
    old = simulate(reqs, _cfg(kv_tokens=104, admit_reserve=0.7), const(d), fast_forward=fast)
    assert np.allclose(old.admit_s, 0) and np.allclose(old.first_token_s, d)


def test_sglang_new_admissions_reserve_their_whole_output():
    from moeplan.serve.knobs import engine_config

    m, c = load_model("deepseek-v2-lite"), load_cluster("h100-sxm-8")
    sg = engine_config("sglang", m, c, Layout(attn_tp=1))
    assert (sg.admit_reserve, sg.admit_reserve_new) == (0.7, 1.0)
    assert engine_config("vllm", m, c, Layout(attn_tp=1)).admit_reserve_new is None
