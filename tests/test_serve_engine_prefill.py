"""The engine's shortcuts against what they replace, bit for bit on generated inputs: the
prefill-only queue (:mod:`moeplan.serve.engine.prefill`) against the general engine loop, and
the P/D KV-transfer queue against it written out request by request."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan.serve import EngineConfig, requests_from_rows
from moeplan.serve.engine.run import Engine


def _priced(batch) -> float:  # type: ignore[no-untyped-def]
    """Dyadic iteration times (exact ties with dyadic arrivals): 1/4 s plus 2^-12 s per
    prompt token and 2^-20 s per token of context."""
    return 0.25 + sum(q * 2.0**-12 + c * 2.0**-20 for q, c in batch.prefill)


def _equal(a, b) -> None:  # type: ignore[no-untyped-def]
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype, f.name
            assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), f.name
        else:
            assert x == y and type(x) is type(y), f.name


@st.composite
def _runs(draw):  # type: ignore[no-untyped-def]
    n = draw(st.integers(1, 80))
    gaps = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))  # quarter seconds
    # prompts of whole 500s make the KV test land on its boundary (kv_tokens below)
    size = st.sampled_from([500, 1000]) if draw(st.booleans()) else st.integers(1, 3000)
    isl = draw(st.lists(size, min_size=n, max_size=n))
    hit = draw(st.sampled_from([0.0, 0.5]))
    reqs = requests_from_rows(np.cumsum(gaps) * 0.25, isl, [1] * n, prefix_hit=hit)
    chunk = draw(st.sampled_from([0, 512, 2048, 8192]))
    cfg = EngineConfig(
        policy=draw(st.sampled_from(["prefill-first", "mixed"])) if chunk else "prefill-first",
        chunk_tokens=chunk,
        max_running=draw(st.integers(1, 8)),
        kv_tokens=max(isl) + draw(st.integers(1, 4)) + 500 * draw(st.integers(0, 6)),
        admit_reserve=draw(st.sampled_from([0.0, 0.5, 1.0])),
        admit_reserve_new=draw(st.sampled_from([None, 1.0])),
    )
    horizon = draw(st.sampled_from([None, 2.0, 7.75]))
    return reqs, cfg, horizon, draw(st.booleans())


@settings(max_examples=examples(150))
@given(_runs())
def test_prefill_only_queue_equals_the_general_loop(run) -> None:  # type: ignore[no-untyped-def]
    """Same admissions, iterations, token counts and times as the general loop, with and
    without a horizon or a stop predicate."""
    reqs, cfg, horizon, stopping = run
    asked: list[list[float]] = [[], []]

    def stop_after(k: int, log: list[float]):  # type: ignore[no-untyped-def]
        def stop(e: Engine) -> bool:
            log.append(e.now)
            return len(log) >= k and np.count_nonzero(~np.isnan(e.finish)) > 0

        return stop if stopping else None

    fast = Engine(reqs, cfg, _priced, horizon_s=horizon, stop=stop_after(2, asked[0]))
    assert fast.prefill_only
    ref = Engine(reqs, cfg, _priced, horizon_s=horizon, stop=stop_after(2, asked[1]))
    _equal(fast.run(), ref._run_open())
    assert asked[0] == asked[1]


def _transfers_one_by_one(first, runs, lanes, seconds, isl):  # type: ignore[no-untyped-def]
    """The KV transfer queue written out request by request (the oracle of ``_transfers``):
    per instance, in order of prefill end, the lane free first (lowest index among ties)."""
    arrive, took = np.full(len(first), np.nan), np.full(len(first), np.nan)
    for _, idx in runs:
        free = [0.0] * lanes
        done = [r for r in idx if not np.isnan(first[r])]
        for r in sorted(done, key=lambda r: first[r]):  # sorted() is stable
            d = seconds(int(isl[r]))
            j = free.index(min(free))
            free[j] = arrive[r] = max(float(first[r]), free[j]) + d
            took[r] = d
    return arrive, took


@settings(max_examples=examples(100))
@given(
    st.lists(st.integers(0, 12), min_size=1, max_size=60),
    st.integers(1, 4),
    st.integers(1, 3),
    st.sampled_from([0.3, 0.25]),
)
def test_kv_transfer_queue_equals_one_by_one(ends, x, lanes, per_k) -> None:  # type: ignore[no-untyped-def]
    """Per-instance FIFO on ``lanes`` lanes, ties and horizon-cut (NaN) prefills included."""
    from moeplan.serve.pools.pd import _transfers

    n = len(ends)
    first = np.array([np.nan if e == 12 else e * 0.125 for e in ends])
    isl = np.array([1000 + 500 * (e % 3) for e in ends])
    runs = [(None, np.arange(j, n, x)) for j in range(x)]

    def seconds(size: int) -> float:
        return 0.01 + per_k * size / 1000

    got = _transfers(first, runs, lanes, seconds, isl)
    ref = _transfers_one_by_one(first, runs, lanes, seconds, isl)
    for a, b in zip(got, ref, strict=True):
        assert np.array_equal(a, b, equal_nan=True)
