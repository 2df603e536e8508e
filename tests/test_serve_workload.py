"""Serving workloads: length distributions, arrivals, common random numbers, input errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan.errors import MoeplanError
from moeplan.serve import LengthDist, ServeWorkload, generate, requests_from_rows
from moeplan.serve.trace import serve_trace


def test_poisson_arrivals_have_the_rate_and_exponential_gaps():
    w = ServeWorkload(num_requests=50_000, rate=8.0, seed=4)
    gaps = np.diff(generate(w).arrival_s)
    assert gaps.mean() == pytest.approx(1 / 8.0, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.03)


def test_gamma_arrivals_have_the_requested_burstiness():
    w = ServeWorkload(num_requests=50_000, rate=2.0, arrival="gamma", cv=3.0, seed=4)
    gaps = np.diff(generate(w).arrival_s)
    assert gaps.mean() == pytest.approx(0.5, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.1)


def test_same_seed_at_two_rates_is_the_same_stream_on_a_scaled_clock():
    w = ServeWorkload(num_requests=500, rate=1.0, isl=LengthDist.parse("uniform:10:900"), seed=9)
    a, b = generate(w), generate(w.with_rate(4.0))
    np.testing.assert_allclose(a.arrival_s, 4.0 * b.arrival_s)
    np.testing.assert_array_equal(a.isl, b.isl)


@pytest.mark.parametrize(
    ("text", "kind", "mean", "lo", "hi"),
    [
        ("512", "fixed", 512, 512, 512),
        ("fixed:64", "fixed", 64, 64, 64),
        ("uniform:100:300", "uniform", 200, 100, 300),
        ("lognormal:400:0.5:2000", "lognormal", 400, 1, 2000),
    ],
)
def test_length_parse_and_range(text, kind, mean, lo, hi):
    d = LengthDist.parse(text)
    x = d.sample(np.random.default_rng(0), 20_000)
    assert d.kind == kind and (d.median if kind == "lognormal" else d.mean) == mean
    assert x.min() >= lo and x.max() <= hi and d.max == hi
    if kind == "lognormal":
        assert np.median(x) == pytest.approx(400, rel=0.03)


@pytest.mark.parametrize(
    "text",
    ["lognormal:2048:0.6", "lognormal:400:0.5:600", "lognormal:300:1.0:3072", "lognormal:8:1.5"],
)
def test_lognormal_is_median_sigma_and_mean_is_the_samples_mean(text):
    """lognormal:MEDIAN:SIGMA[:MAX]: the first number is the samples' median, ``mean`` their
    mean (closed form of the clipped lognormal, checked against 400k samples)."""
    d = LengthDist.parse(text)
    x = d.sample(np.random.default_rng(1), 400_000)
    median = int(text.split(":")[1])
    assert np.median(x) == pytest.approx(median, rel=0.01, abs=0.5)
    assert d.mean == pytest.approx(x.mean(), rel=0.01, abs=0.5)
    if text == "lognormal:2048:0.6":  # unclipped: e^(0.18) = 1.197 times the median
        assert d.mean == pytest.approx(2048 * np.exp(0.18), abs=1)


@pytest.mark.parametrize("text", ["", "x", "uniform:5", "lognormal:1", "fixed:0", "gauss:1:2"])
def test_bad_lengths_are_one_line_errors(text):
    with pytest.raises(MoeplanError, match="length"):
        LengthDist.parse(text)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"rate": None}, "exactly one of rate"),
        ({"rate": 1.0, "concurrency": 3}, "exactly one of rate"),
        ({"rate": -1.0}, "workload.rate"),
        ({"prefix_hit": 1.0}, "prefix_hit"),
        ({"arrival": "uniform"}, "workload.arrival"),
    ],
)
def test_bad_workloads_name_the_field(kw, match):
    with pytest.raises(MoeplanError, match=match):
        ServeWorkload(**kw)


@settings(derandomize=True, deadline=None, max_examples=examples(40))
@given(
    rows=st.lists(
        st.tuples(st.floats(0, 1e4), st.integers(1, 10**5), st.integers(1, 10**4)),
        min_size=1,
        max_size=30,
    ),
    hit=st.floats(0.0, 0.99),
)
def test_rows_are_sorted_and_cache_hits_leave_one_token(rows, hit):
    a, i, o = (np.array(c) for c in zip(*rows, strict=True))
    r = requests_from_rows(a, i, o, hit)
    assert np.all(np.diff(r.arrival_s) >= 0)
    assert np.all(r.cached < r.isl) and np.all(r.cached >= 0)
    assert sorted(zip(r.arrival_s, r.isl, r.osl, strict=True)) == sorted(rows)


def test_trace_has_one_event_per_iteration_with_token_counts():
    from moeplan.serve import EngineConfig, simulate

    reqs = requests_from_rows([0.0, 0.0, 0.5], [100, 40, 10], [5, 3, 2])
    cfg = EngineConfig(policy="mixed", chunk_tokens=64, max_running=4, kv_tokens=1000)
    res = simulate(reqs, cfg, lambda b: 0.1)
    tr = serve_trace(res)
    xs = [e for e in tr["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(res.iter_end_s)
    assert sum(e["args"]["decode_tokens"] for e in xs) == int(res.iter_decode.sum())
    assert sum(e["args"]["prefill_tokens"] for e in xs) == 150
    assert xs[0]["ts"] == 0.0 and xs[0]["dur"] == pytest.approx(1e5)


def test_serve_imports_no_torch():
    import subprocess
    import sys

    code = "import sys, moeplan.serve; sys.exit(int('torch' in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
