"""Baselines: transition placement (CP-SAT vs brute force), EPLB and contiguous placements."""

import itertools

import numpy as np
import pytest

from moeplan.planners.placement import baselines as base


def _placements(e, ep):
    per = e // ep
    seen = set()
    for p in itertools.permutations(np.repeat(np.arange(ep), per)):
        if p not in seen:
            seen.add(p)
            yield np.array(p)


@pytest.mark.parametrize("seed", range(4))
def test_transition_exact_equals_brute_force(seed):
    """CP-SAT's transition placement is the optimum over all equal-count placements."""
    rng = np.random.default_rng(seed)
    t = rng.integers(0, 9, size=(3, 4, 4)).astype(float)
    y = base.transition_exact(t, 2)
    best = max(
        base.transition_objective(t, np.stack(ys))
        for ys in itertools.product(list(_placements(4, 2)), repeat=3)
    )
    assert base.transition_objective(t, y) == pytest.approx(best)
    for yl in y:
        assert (np.bincount(yl, minlength=2) == 2).all()


def test_transition_sweeps_never_exceed_exact_and_beat_contiguous():
    """The sweep heuristic is feasible, <= the optimum and >= contiguous on a planted case."""
    rng = np.random.default_rng(3)
    num_l, e, ep = 3, 6, 3
    perm = [rng.permutation(e) for _ in range(num_l)]
    t = np.zeros((num_l, e, e))
    for layer in range(1, num_l):  # planted: expert perm[l-1][j] -> perm[l][j]
        t[layer, perm[layer - 1], perm[layer]] = 10.0
    t += rng.random(t.shape)
    ys = base.transition_sweeps(t, ep)
    exact = base.transition_exact(t, ep)
    assert base.transition_objective(t, ys) <= base.transition_objective(t, exact) + 1e-9
    assert base.transition_objective(t, ys) >= base.transition_objective(
        t, base.contiguous(num_l, e, ep)
    )


def test_eplb_placement_is_equal_count_and_balanced():
    """EPLB without replicas: E/C experts per device; load no worse than contiguous."""
    rng = np.random.default_rng(0)
    hot = rng.pareto(1.5, size=(4, 16)) + 1
    y, rep = base.eplb_placement(hot, 4)
    cont = base.contiguous(4, 16, 4)
    for layer in range(4):
        assert (np.bincount(y[layer], minlength=4) == 4).all()
        assert (rep[layer].sum(axis=1) == 1).all()
        assert (rep[layer].argmax(axis=1) == y[layer]).all()
        ld = np.bincount(y[layer], weights=hot[layer], minlength=4)
        lc = np.bincount(cont[layer], weights=hot[layer], minlength=4)
        assert ld.max() <= lc.max() + 1e-9


def test_eplb_redundant_slots_replicate_the_hottest_experts():
    """With redundant slots every device holds E/C + r copies and the hottest expert gets >1."""
    hot = np.array([[100.0, 1, 1, 1, 1, 1, 1, 1]])
    y, rep = base.eplb_placement(hot, 2, redundant=1)
    assert (rep[0].sum(axis=0) == 5).all()
    assert rep[0, 0].sum() >= 2
    assert rep[0, np.arange(8), y[0]].min() >= 1
