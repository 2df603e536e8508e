"""Loosening an SLO never lowers capacity: the search's upper bound of a layout's capacity
(:func:`moeplan.search.capacity.bound.capacity_bound`, what prunes the space) is nondecreasing
in each SLO, and ``plan``'s winner on every question of the grid (``bench/questions.json``)
serves at least as many output tokens/s per GPU under a looser TTFT or TPOT SLO."""

from __future__ import annotations

from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grid import QUESTIONS, params, plan, planned, slo_ms
from hypothesis_budget import examples
from moeplan.backends import priced_engine
from moeplan.kernel_tables import engine_cost_model
from moeplan.planners.layout import Layout
from moeplan.search.capacity.slo import RATE_TOL
from moeplan.search.colocated.search import SpaceCandidate, prepare
from moeplan.search.job.memo_cost import memo_cost
from moeplan.serve import SLO, LengthDist, ServeWorkload
from moeplan.specs import load_cluster, load_model

LAYOUTS = [Layout(attn_tp=2, moe_tp=2), Layout(attn_dp=4, moe_ep=4), Layout(attn_tp=8, moe_ep=8)]
W = ServeWorkload(num_requests=300, rate=1.0, isl=LengthDist(mean=2048),
                  osl=LengthDist(mean=256), seed=0)  # fmt: skip


@cache
def _priced():
    m, c = load_model("qwen3-30b-a3b"), load_cluster("h100-sxm-8")
    return m, c, memo_cost(engine_cost_model(c, None, engine=priced_engine("engine", "sglang")))


def _bound(lay: Layout, ttft_ms: float, tpot_ms: float, pct: float) -> float:
    m, c, cost = _priced()
    cand = SpaceCandidate(layout=lay, replicas=1, spare_gpus=0)
    slo = SLO(ttft_s=ttft_ms / 1e3, tpot_s=tpot_ms / 1e3, percentile=pct)
    prepare(cand, m, c, cost, W, slo, "sglang", knobs=False)
    assert cand.bound is not None, cand.reason
    return cand.bound.rate_rps


@settings(max_examples=examples(40))
@given(
    lay=st.sampled_from(LAYOUTS),
    ttft=st.floats(100, 10_000),
    tpot=st.floats(5, 200),
    looser=st.floats(1.0, 4.0),
    which=st.sampled_from(["ttft", "tpot"]),
    pct=st.sampled_from([50.0, 90.0, 99.0]),
)
def test_the_search_bound_is_nondecreasing_in_each_slo(lay, ttft, tpot, looser, which, pct):
    base = _bound(lay, ttft, tpot, pct)
    loose = _bound(lay, ttft * looser if which == "ttft" else ttft,
                   tpot * looser if which == "tpot" else tpot, pct)  # fmt: skip
    assert loose >= base * (1 - 1e-12), (base, loose)


@settings(max_examples=examples(200))
@given(
    data=st.data(),
    n=st.integers(4, 400),
    start=st.tuples(st.integers(0, 399), st.integers(0, 399)),
    cap=st.tuples(st.integers(0, 420), st.integers(0, 420)),
)
def test_the_capacity_search_is_monotone_in_its_verdicts(data, n, start, cap):
    """The search (:func:`moeplan.search.capacity.slo._grid_search`) driven by two verdicts
    on the grid, one meeting wherever the other does (a looser SLO on the same runs), from a
    start and a cap no lower: its capacity is no lower, whatever the verdicts' pattern in the
    rate (noisy runs are not monotone in it)."""
    from moeplan.search.capacity import slo as cs

    base = cs._grid_index(1.0)
    tight = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    extra = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    loose = [a or b for a, b in zip(tight, extra, strict=True)]

    def meets(v: list[bool]):
        def m(r: float) -> bool:
            i = cs._grid_index(r * (1 + 1e-9)) - base  # the grid index of a grid rate
            return i < 0 or (i < len(v) and v[i])  # light loads meet; past the list, none

        return m

    a, b = sorted(start)
    c_t, c_l = sorted(cap)

    def rate(i: int) -> float:
        return cs._grid_rate(base + i)

    lo_t, _ = cs._grid_search(meets(tight), rate(a), rate(c_t))
    lo_l, _ = cs._grid_search(meets(loose), rate(b), rate(c_l))
    assert lo_l >= lo_t, (lo_t, lo_l)


def test_a_capacity_probe_measures_the_same_requests_under_any_slo():
    """A capacity probe's geometry is the deployment's (its slots), not the SLO's: under TPOT
    50 and 100 ms the run at one rate is the same run and measures the same requests, and a
    rate that meets the tighter SLO meets the looser."""
    from moeplan.search.capacity.slo import in_service, saturated_lifetime, steady_probe
    from moeplan.serve.engine.config import EngineConfig
    from moeplan.serve.iteration.model import Batch

    def step(b: Batch) -> float:  # 5 ms + 0.1 ms per decode sequence + 1 us per prompt token
        return 0.005 + 1e-4 * b.decode + 1e-6 * sum(q for q, _ in b.prefill)

    cfg = EngineConfig(policy="prefill-first", chunk_tokens=4096, max_running=64,
                       kv_tokens=10**6)  # fmt: skip
    wl = ServeWorkload(num_requests=100, rate=1.0, isl=LengthDist(mean=512),
                       osl=LengthDist(mean=64), seed=3)  # fmt: skip
    slots, life = in_service(cfg, wl), saturated_lifetime(cfg, step, wl)
    runs = [
        steady_probe(cfg, step, wl, SLO(ttft_s=1.0, tpot_s=t, percentile=90.0), 40.0,
                     requests=100, slots=slots, life_s=life, horizon=True, window_lifetimes=2.0)
        for t in (0.05, 0.1)
    ]  # fmt: skip
    tight, loose = runs
    assert tight.window == loose.window
    w = tight.window
    assert (tight.res.arrival_s[w] == loose.res.arrival_s[w]).all()
    assert tight.ttft == loose.ttft and tight.tpot == loose.tpot
    assert loose.meets(SLO(ttft_s=1.0, tpot_s=0.1)) >= tight.meets(SLO(ttft_s=1.0, tpot_s=0.05))


@pytest.fixture(scope="module", params=params())
def base(request):
    return request.param, planned(request.param)[0]


def _per_gpu(out: dict) -> float:
    return out["winner"]["metrics"]["output_tokens_per_s_per_gpu"]


#: (question, loosened SLO) -> the measured drop: the property fails there on this tree
MISSED: dict[tuple[str, str], str] = {}


@pytest.mark.parametrize("which", ["tpot", pytest.param("ttft", marks=pytest.mark.slow)])
def test_loosening_an_slo_never_lowers_the_winners_capacity_per_gpu(base, which, tmp_path, request):
    """Twice the SLO: the winner's SLO-bound capacity (output tokens/s per GPU, the figure the
    deployments are ranked by) is at least the tighter SLO's, to the resolution the capacity
    search brackets it to (:data:`moeplan.search.capacity.slo.RATE_TOL`: two searches end
    anywhere inside their brackets)."""
    name, out = base
    if (name, which) in MISSED:
        request.applymarker(pytest.mark.xfail(strict=True, reason=MISSED[(name, which)]))
    ttft, tpot = slo_ms(QUESTIONS[name])
    slo = {"ttft_ms": 2 * ttft} if which == "ttft" else {"tpot_ms": 2 * tpot}
    loose = plan(name, tmp_path / "o", **slo)
    assert _per_gpu(loose) >= _per_gpu(out) * (1 - RATE_TOL), (out["winner"], loose["winner"])


@pytest.mark.slow
def test_one_layouts_capacity_never_drops_when_the_ttft_slo_loosens():
    """The case that fell 21.1 -> 16.8 req/s per instance ("queue growth") while each probe
    measured 300 requests, less than one SLO lifetime of arrivals
    (:data:`moeplan.search.capacity.slo.WINDOW_LIFETIMES`)."""
    from moeplan.search.capacity.sim import layout_capacity

    m, c, cost = _priced()
    lay = Layout(attn_tp=2, moe_tp=2)

    def cap(ttft_ms: float) -> float:
        slo = SLO(ttft_s=ttft_ms / 1e3, tpot_s=0.05, percentile=90.0)
        got = layout_capacity(m, c, cost, lay, W, slo, engine="sglang", requests=300, replicas=4)
        assert got.capacity is not None
        return got.capacity.rate_rps

    assert cap(4000) >= cap(2000) * (1 - RATE_TOL)
