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


@pytest.fixture(scope="module", params=params())
def base(request):
    return request.param, planned(request.param)[0]


def _per_gpu(out: dict) -> float:
    return out["winner"]["metrics"]["output_tokens_per_s_per_gpu"]


#: (question, loosened SLO) -> the measured drop: the property fails there on this tree
MISSED = {
    ("deepseek-v2-lite/h100x1/chat", "tpot"): (
        "TPOT 50 -> 100 ms lowers the winner's output tokens/s per GPU 7,511 -> 7,393 (-1.6 %, "
        "past RATE_TOL). The same P/D deployment wins both (4 prefill : 1 decode), TTFT-bound; "
        "its probes measure a window sized in SLO lifetimes (TTFT SLO + output tokens x TPOT "
        "SLO: 14.8 s, then 27.6 s), so the looser SLO measures other requests (5,731 then "
        "10,688) and the two capacities differ by the window's noise. Monotone by "
        "construction needs windows that do not depend on the SLO (sized by the stream's "
        "own request lifetime), so that a looser SLO judges the very same requests"
    ),
    ("qwen3-30b-a3b/h200x2/chat", "tpot"): (
        "TPOT 50 -> 100 ms lowers the winner's output tokens/s per GPU 5,430 -> 5,363 (-1.2 %, "
        "past RATE_TOL): the same cause, the probe window sized by the SLO's lifetime"
    ),
}


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
