"""Co-clustering: exact steps vs brute force, exhaustive vs CP-SAT, never below the greedy."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moeplan.planners.placement import cocluster as cc


def _instance(seed, layers=2, rows=5, experts=4):
    rng = np.random.default_rng(seed)
    w = rng.integers(0, 10, size=(layers, rows, experts)).astype(np.float64)
    w *= rng.random((layers, rows, experts)) < 0.6  # sparse, like real affinity
    freq = rng.integers(1, 6, size=rows).astype(np.float64)
    return w, freq


def _cpsat_optimum(w, freq, ep, cap):
    from ortools.sat.python import cp_model

    num_l, v, e = w.shape
    m = cp_model.CpModel()
    x = {(i, c): m.NewBoolVar("") for i in range(v) for c in range(ep)}
    y = {(l_, j, c): m.NewBoolVar("") for l_ in range(num_l) for j in range(e) for c in range(ep)}
    for i in range(v):
        m.AddExactlyOne(x[i, c] for c in range(ep))
    for c in range(ep):
        m.Add(sum(int(freq[i]) * x[i, c] for i in range(v)) <= int(np.floor(cap + 1e-9)))
    for l_ in range(num_l):
        for j in range(e):
            m.AddExactlyOne(y[l_, j, c] for c in range(ep))
        for c in range(ep):
            m.Add(sum(y[l_, j, c] for j in range(e)) == e // ep)
    obj = []
    for l_, i, j in itertools.product(range(num_l), range(v), range(e)):
        if w[l_, i, j] > 0:
            for c in range(ep):
                z = m.NewBoolVar("")
                m.AddImplication(z, x[i, c])
                m.AddImplication(z, y[l_, j, c])
                obj.append(int(w[l_, i, j]) * z)
    m.Maximize(sum(obj))
    s = cp_model.CpSolver()
    s.parameters.num_workers = 1
    assert s.Solve(m) == cp_model.OPTIMAL
    return s.ObjectiveValue()


@pytest.mark.parametrize("seed", range(6))
def test_exhaustive_equals_cpsat_optimum(seed):
    """On tiny instances the enumerated optimum equals CP-SAT's optimum of the 0-1 program."""
    w, freq = _instance(seed)
    ep = 2
    cap = cc.row_cap(freq, ep, 0.05)
    ex = cc.exhaustive(w, freq, ep)
    assert ex.objective == pytest.approx(_cpsat_optimum(w, freq, ep, cap))
    assert cc.objective(w, ex.x, ex.y) == pytest.approx(ex.objective)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 100_000), ep=st.sampled_from([2, 4]))
def test_cocluster_never_below_greedy_and_never_above_optimum(seed, ep):
    """solve() >= the paper-style greedy on the same input, <= the exhaustive optimum."""
    rows = 6 if ep == 2 else 4
    w, freq = _instance(seed, rows=rows, experts=8)
    ours, greedy = cc.solve(w, freq, ep)
    assert ours.objective >= greedy.objective - 1e-9
    opt = cc.exhaustive(w, freq, ep).objective
    assert ours.objective <= opt + 1e-9
    cap = cc.row_cap(freq, ep, 0.05)
    for sol in (ours, greedy):  # both feasible: equal experts per device, row caps
        assert (np.bincount(sol.x, weights=freq, minlength=ep) <= cap + 1e-9).all()
        for yl in sol.y:
            assert (np.bincount(yl, minlength=ep) == 8 // ep).all()


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 100_000))
def test_expert_step_is_optimal_against_brute_force(seed):
    """The assignment step equals the best of all equal-count expert placements."""
    w, freq = _instance(seed, layers=1, rows=4, experts=6)
    ep = 3
    x = np.random.default_rng(seed).integers(0, ep, size=4)
    y = cc.expert_step(w, x, ep)
    best = 0.0
    for combo in set(itertools.permutations([0, 0, 1, 1, 2, 2])):
        best = max(best, cc.objective(w, x, np.array([combo])))
    assert cc.objective(w, x, y) == pytest.approx(best)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 100_000))
def test_row_step_matches_brute_force_when_integral(seed):
    """With unit frequencies the transportation LP is integral: the row step is optimal."""
    rng = np.random.default_rng(seed)
    g = rng.integers(0, 20, size=(6, 2)).astype(float)
    freq = np.ones(6)
    cap = 3.0
    x = cc.row_step(g, freq, cap)
    assert (np.bincount(x, minlength=2) <= cap).all()
    best = max(
        g[np.arange(6), np.array(c)].sum()
        for c in itertools.product(range(2), repeat=6)
        if sum(c) in (3,)
    )
    assert g[np.arange(6), x].sum() == pytest.approx(best)


def test_balance_repair_reaches_tolerance():
    """Swap repair brings max/mean device load under the tolerance when that is reachable."""
    rng = np.random.default_rng(0)
    w = rng.random((3, 40, 16))
    hot = rng.pareto(2.0, size=(3, 16)) + 1.0
    x = rng.integers(0, 4, size=40)
    y = cc.balance_experts(w, x, hot, 4, tol=1.1)
    for layer in range(3):
        load = np.bincount(y[layer], weights=hot[layer], minlength=4)
        assert (np.bincount(y[layer], minlength=4) == 4).all()
        # reachable: a balanced packing (LPT) exists with this imbalance or better
        assert load.max() / load.mean() <= max(1.1, _lpt_imbalance(hot[layer], 4)) + 1e-9


def _lpt_imbalance(h, ep):
    from moeplan.planners.placement.eplb import balanced_packing

    pack, _ = balanced_packing(h[None, :], ep)
    load = np.bincount(pack[0], weights=h, minlength=ep)
    return load.max() / load.mean()
