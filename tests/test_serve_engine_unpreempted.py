"""The engines of :mod:`moeplan.serve.engine.unpreempted` against the general engine loop they
stand in for, bit for bit: on generated streams (a stop predicate and horizons included, pools
tight enough to preempt), and on real instances priced by the cost model."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan.serve import EngineConfig
from moeplan.serve.engine import run as engine_mod
from moeplan.serve.engine.run import Engine, simulate
from moeplan.serve.engine.unpreempted import (
    DecodePoolEngine,
    NeedsPreemption,
    UnpreemptedEngine,
)
from moeplan.serve.workload.arrivals import Requests, requests_from_rows
from test_serve_engine_prefill import _equal


def _priced(batch) -> float:  # type: ignore[no-untyped-def]
    """Dyadic iteration times (exact ties with dyadic arrivals): 1/8 s plus 2^-10 s per
    decoding sequence, 2^-20 s per token of mean context and 2^-9 s per prompt chunk."""
    pre = sum(2.0**-9 + c * 2.0**-20 for _, c in batch.prefill)
    return 0.125 + batch.decode * 2.0**-10 + batch.decode_ctx * 2.0**-20 + pre


def _pool(arrival, isl, osl) -> Requests:  # type: ignore[no-untyped-def]
    """Requests as a P/D decode instance receives them: the prompt and first token in KV but
    one token (:func:`moeplan.serve.pools.pd._decode_pool`)."""
    isl = np.asarray(isl, dtype=np.int64)
    return Requests(arrival_s=np.asarray(arrival, dtype=float), isl=isl + 1,
                    osl=np.asarray(osl, dtype=np.int64), cached=isl)  # fmt: skip


@st.composite
def _streams(draw, pool: bool):  # type: ignore[no-untyped-def]
    """A stream, its engine, a horizon and whether a stop predicate asks. ``pool``: as a P/D
    decode instance receives it (:func:`_pool`, ``mixed``); else fresh prompts with or
    without prefix hits, either policy, chunked or whole."""
    n = draw(st.integers(1, 80 if pool else 60))
    gaps = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))  # eighths of a second
    isl = draw(st.lists(st.integers(1, 3000), min_size=n, max_size=n))
    top = 60 if pool else 40
    osl = draw(st.lists(st.integers(1, top), min_size=n, max_size=n))
    osl[draw(st.integers(0, n - 1))] = draw(st.integers(2, top))  # some request decodes
    running = draw(st.integers(1, 16))
    if pool:
        reqs, mixed, chunk = _pool(np.cumsum(gaps) * 0.125, isl, osl), True, running
    else:
        hit = draw(st.sampled_from([0.0, 0.5]))
        reqs = requests_from_rows(np.cumsum(gaps) * 0.125, isl, osl, prefix_hit=hit)
        mixed = draw(st.booleans())
        chunk = draw(st.sampled_from([0, 64, 512, 2048, 8192]))
    if mixed:  # decodes share the budget: it must exceed the running cap
        chunk = max(chunk, running + draw(st.sampled_from([1, 7, 64, 4096])))
    big = max(i + o for i, o in zip(isl, osl, strict=True)) + 1
    cfg = EngineConfig(
        policy="mixed" if mixed else "prefill-first",
        chunk_tokens=chunk,
        max_running=running,
        # from a pool one request fills (preemptions) to one that never fills
        kv_tokens=big + draw(st.sampled_from([0, 50, 500, 5000, 10**6])),
        admit_reserve=draw(st.sampled_from([0.0, 0.5, 0.7, 1.0])),
        admit_reserve_new=draw(st.sampled_from([None, 1.0])),
    )
    horizon = draw(st.sampled_from([None, 2.0, 7.75]))
    return reqs, cfg, horizon, draw(st.booleans())


def _same_as_the_general_loop(cls, run) -> None:  # type: ignore[no-untyped-def]
    """``cls``'s run equals the general loop's bit for bit (the stop predicate asked at the
    same instants), or ``cls`` declines where, and only where, the general loop preempts."""
    reqs, cfg, horizon, stopping = run
    asked: list[list[float]] = [[], []]
    ref = Engine(reqs, cfg, _priced, horizon_s=horizon, stop=_stop(stopping, asked[1]))._run_open()
    try:
        got = cls(reqs, cfg, _priced, horizon_s=horizon, stop=_stop(stopping, asked[0])).run()
    except NeedsPreemption:
        assert ref.preemptions > 0
        return
    _equal(got, ref)
    assert asked[0] == asked[1]


@settings(max_examples=examples(200))
@given(_streams(pool=True))
def test_decode_pool_engine_equals_the_general_loop(run) -> None:  # type: ignore[no-untyped-def]
    """Same admissions, iterations, ITLs, token counts and times as the general loop, with
    and without a horizon or a stop predicate; where the general loop preempts, the decode
    pool engine declines (and only there)."""
    _same_as_the_general_loop(DecodePoolEngine, run)


@settings(max_examples=examples(250))
@given(_streams(pool=False))
def test_unpreempted_engine_equals_the_general_loop(run) -> None:  # type: ignore[no-untyped-def]
    """Both policies, chunked and whole prompts, prefix-cache hits, one-token outputs:
    the same run as the general loop; where the general loop preempts, it declines (and
    only there)."""
    _same_as_the_general_loop(UnpreemptedEngine, run)


def _stop(stopping: bool, log: list[float]):  # type: ignore[no-untyped-def]
    """A stop predicate that logs when it was asked and stops at its second call once a
    request has finished (None when not ``stopping``)."""

    def stop(e: Engine) -> bool:
        log.append(e.now)
        return len(log) >= 2 and np.count_nonzero(~np.isnan(e.finish)) > 0

    return stop if stopping else None


def test_simulate_takes_the_unpreempted_engines_and_falls_back_when_they_would_preempt(
    monkeypatch,
) -> None:  # type: ignore[no-untyped-def]
    """simulate runs a decode pool on the decode-pool engine and any other open loop on the
    unpreempted engine; a pool too small for its requests' decode steps (recompute
    preemption) runs on the general engine, with the general engine's answer."""
    runs: list[str] = []
    for cls, name in ((DecodePoolEngine, "pool"), (UnpreemptedEngine, "open")):
        real = cls.run

        def counted(self, real=real, name=name):  # type: ignore[no-untyped-def]
            runs.append(name)
            return real(self)

        monkeypatch.setattr(cls, "run", counted)
    reqs = _pool(np.arange(40) * 0.125, [500 + 7 * i for i in range(40)], [30] * 40)
    roomy = EngineConfig(policy="mixed", chunk_tokens=64, max_running=16, kv_tokens=10**6)
    _equal(simulate(reqs, roomy, _priced), Engine(reqs, roomy, _priced)._run_open())
    assert runs == ["pool"]
    tight = dataclasses.replace(roomy, kv_tokens=1200, kv_tokens_per_rank=1200)
    got = simulate(reqs, tight, _priced)
    assert runs == ["pool", "pool"] and got.preemptions > 0  # it declined: general engine
    _equal(got, Engine(reqs, tight, _priced)._run_open())
    # a prefill-first pool, or prompts not all in KV but one token: the unpreempted engine
    first = dataclasses.replace(roomy, policy="prefill-first")
    _equal(simulate(reqs, first, _priced), Engine(reqs, first, _priced)._run_open())
    cold = dataclasses.replace(reqs, cached=reqs.cached - 1)
    _equal(simulate(cold, roomy, _priced), Engine(cold, roomy, _priced)._run_open())
    assert runs == ["pool", "pool", "open", "open"]
    # without fast-forward (the engine's own reference): the general loop
    simulate(reqs, roomy, _priced, fast_forward=False)
    assert runs == ["pool", "pool", "open", "open"]


@pytest.mark.parametrize("rate", [60.0, 240.0])
def test_a_priced_decode_instance_is_the_same_on_both_engines(rate) -> None:
    """Qwen3-30B-A3B's decode instance (attention DP4 / MoE EP4 on H100s) priced by the cost
    model, 3,000 requests of 1,024 + 256 tokens: below and past its capacity."""
    from moeplan.cost import CostModel
    from moeplan.planners.layout import Layout
    from moeplan.serve.iteration.model import IterationModel
    from moeplan.serve.pools.pd import DecodeStepEvaluator
    from moeplan.specs import load_cluster, load_model

    model, cluster = load_model("qwen3-30b-a3b"), load_cluster("h100-sxm-8")
    lay = Layout(attn_tp=1, attn_dp=4, moe_tp=1, moe_ep=4)
    ev = DecodeStepEvaluator(IterationModel(model, cluster, CostModel(cluster), lay))
    rng = np.random.default_rng(0)
    n = 3000
    reqs = _pool(np.cumsum(rng.exponential(1 / rate, n)), rng.integers(512, 1537, n),
                 rng.integers(128, 385, n))  # fmt: skip
    cfg = EngineConfig(policy="mixed", chunk_tokens=2036, max_running=2035,
                       kv_tokens=2_603_044, kv_tokens_per_rank=650_761, admit_reserve=0.7)  # fmt: skip
    got = DecodePoolEngine(reqs, cfg, ev).run()
    _equal(got, Engine(reqs, cfg, ev)._run_open())
    assert got.preemptions == 0 and np.isfinite(got.finish_s).all()
    assert engine_mod.one_token_prompts(reqs.isl, reqs.cached, reqs.osl)
