"""The deployment-space search (moeplan.search.colocated.space, .bound, .space_search) against brute force:
every layout listed, the bound never below the simulated capacity, and the searched winner
equal to exhaustive simulation of the whole space."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from moeplan.cost import cost_model_for
from moeplan.errors import MoeplanError
from moeplan.planners.layout import Layout
from moeplan.search.colocated.search import (
    SpaceCandidate,
    _by_estimate,
    prepare,
    search_capacity,
    search_space,
)
from moeplan.search.colocated.space import copies, layouts
from moeplan.serve import SLO, LengthDist, ServeWorkload
from moeplan.specs import load_cluster, load_model

REQUESTS = 150


def _brute(model, cluster):
    n = cluster.num_gpus
    sizes = {n} | {2**k for k in range(n.bit_length()) if 2**k <= n}
    out = set()
    for at, ad, mt, me, pp in itertools.product(range(1, n + 1), repeat=5):
        if at * ad != mt * me or at * ad * pp not in sizes:
            continue
        try:
            out.add(
                Layout(attn_tp=at, attn_dp=ad, moe_tp=mt, moe_ep=me, pp=pp).validate(model, cluster)
            )
        except MoeplanError:
            continue
    return out


@pytest.mark.parametrize("nodes", [1, 2])
def test_space_lists_every_layout_brute_force_finds(nodes):
    m = load_model("qwen3-30b-a3b")
    c = (
        load_cluster("h100-sxm-8").with_nodes(nodes)
        if nodes > 1
        else replace(load_cluster("h100-sxm-8"), gpus_per_node=4)
    )
    got = layouts(m, c)
    assert len(got) == len(set(got))
    assert set(got) == _brute(m, c)
    for lay in got:
        k, spare = copies(c, lay)
        assert k * lay.gpus + spare == c.num_gpus and 0 <= spare < lay.gpus


@pytest.fixture(scope="module")
def exhaustive():
    m = load_model("qwen3-30b-a3b")
    c = replace(load_cluster("h100-sxm-8"), gpus_per_node=2, name="h100-sxm-2")
    cm = cost_model_for(c)
    wl = ServeWorkload(
        num_requests=100, rate=1.0, isl=LengthDist(mean=1024), osl=LengthDist(mean=128), seed=1
    )
    slo = SLO(ttft_s=1.0, tpot_s=0.03)
    every = []
    for lay in layouts(m, c):
        k, spare = copies(c, lay)
        s = SpaceCandidate(layout=lay, replicas=k, spare_gpus=spare)
        prepare(s, m, c, cm, wl, slo, "sglang")
        if s.bound is not None:
            search_capacity(s, wl, slo, REQUESTS)
        every.append(s)
    return m, c, cm, wl, slo, every


def test_bound_is_never_below_the_simulated_capacity(exhaustive):
    *_, wl, _, every = exhaustive
    osl = wl.osl.mean
    assert len([s for s in every if s.capacity is not None]) >= 5
    for s in every:
        if s.capacity is not None:
            assert s.bound_per_gpu(osl) >= s.capacity_per_gpu(osl), s.layout.label


def test_searched_winner_equals_exhaustive_simulation(exhaustive):
    m, c, cm, wl, slo, every = exhaustive
    osl = wl.osl.mean
    best = max(s.capacity_per_gpu(osl) for s in every)
    ranked, cert = search_space(m, c, cm, wl, slo, requests=REQUESTS)
    assert ranked[0].capacity_per_gpu(osl) >= 0.99 * best
    assert cert.layouts == len(every)
    assert (
        cert.simulated + cert.beaten_at_incumbent_rate + cert.pruned_by_bound + cert.infeasible
    ) == cert.layouts
    assert cert.best_remaining_bound <= cert.winner_capacity
    for s in ranked:  # everything not simulated is pruned by a bound below the winner
        if s.capacity is None and s.beaten_at == 0.0 and s.bound is not None:
            assert s.bound_per_gpu(osl) <= cert.winner_capacity


def _eager_and_lazy(m, c, cm, wl, slo):
    eager, lazy = [], []
    for lay in layouts(m, c):
        k, spare = copies(c, lay)
        for out, knobs in ((eager, True), (lazy, False)):
            s = SpaceCandidate(layout=lay, replicas=k, spare_gpus=spare)
            prepare(s, m, c, cm, wl, slo, "sglang", knobs=knobs)
            out.append(s)
    return eager, lazy


@pytest.mark.parametrize(
    "gpus,tpot", [(2, 0.03), pytest.param(8, 0.05, marks=pytest.mark.slow), (8, 0.02)]
)  # 8 GPUs at a 50 ms TPOT: the costliest (~2 min), the same paths as at 20 ms
def test_estimate_never_exceeds_bound_and_lazy_order_is_eager(gpus, tpot):
    """The simulation order computes estimates only down to the first bound below the best
    estimate capped by its bound: no estimate exceeds a nonzero bound (checked on every
    layout; a zero bound — a lone request misses an SLO — caps it to 0), and the first layout
    is the best capped estimate of all, computed eagerly (oracle)."""
    m = load_model("qwen3-30b-a3b")
    c = replace(load_cluster("h100-sxm-8"), gpus_per_node=gpus, name=f"h100-sxm-{gpus}")
    cm = cost_model_for(c)
    wl = ServeWorkload(
        num_requests=100, rate=1.0, isl=LengthDist(mean=1024), osl=LengthDist(mean=256), seed=0
    )
    slo = SLO(ttft_s=2.0, tpot_s=tpot)
    eager, lazy = _eager_and_lazy(m, c, cm, wl, slo)
    osl = wl.osl.mean
    for s in eager:
        if s.bound is not None:
            assert s.estimate is not None and s.cfg is not None
            assert s.bound.rate_rps == 0 or s.estimate.rate_rps <= s.bound.rate_rps, s.layout
    best = max(
        (s for s in eager if s.bound is not None),
        key=lambda s: min(s.estimate.rate_rps, s.bound.rate_rps) * osl / s.layout.gpus,
    )
    order = sorted((s for s in lazy if s.bound is not None), key=lambda s: -s.bound_per_gpu(osl))
    first = _by_estimate(order, wl, slo)[0]
    assert first.layout == best.layout
    for s, e in zip(lazy, eager, strict=True):  # knobs picked later are the eager ones
        if s.cfg is not None:
            assert s.cfg == e.cfg and s.estimate == e.estimate
    if gpus == 8:  # the cut leaves layouts unestimated
        assert any(s.cfg is None for s in order)


def test_a_layout_the_engine_cannot_launch_is_not_priced():
    """TensorRT-LLM cannot launch attention TP2 x DP4 (enable_attention_dp makes every GPU an
    attention-DP rank): the search gives it its rule as the reason and no bound; the same
    layout is priced for SGLang, and attention DP8 is priced for TensorRT-LLM."""
    m, c = load_model("qwen3-30b-a3b"), load_cluster("h100-sxm-8")
    cm = cost_model_for(c, None)
    wl = ServeWorkload(
        num_requests=60, rate=1.0, isl=LengthDist(mean=1024), osl=LengthDist(mean=64), seed=1
    )
    slo = SLO(ttft_s=2.0, tpot_s=0.1)
    hybrid, adp = Layout(attn_tp=2, attn_dp=4, moe_ep=8), Layout(attn_dp=8, moe_ep=8)
    got, _ = search_space(m, c, cm, wl, slo, engine="trtllm", requests=60, space=[hybrid, adp])
    by = {s.layout: s for s in got}
    assert "attention TP2 x DP4" in by[hybrid].reason and by[hybrid].bound is None
    assert by[adp].reason == "" and by[adp].bound is not None
    (sg,), _ = search_space(m, c, cm, wl, slo, engine="sglang", requests=60, space=[hybrid])
    assert sg.reason == "" and sg.bound is not None
