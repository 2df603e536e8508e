"""One A2E link model for every (ag, eg) split on findep-a."""

from __future__ import annotations

import pytest

from moeplan.cost import cost_model_for
from moeplan.cost.linear import AlphaBeta
from moeplan.cost.profile import findep_a6000_profile
from moeplan.planners import dep
from moeplan.planners.dep.link import a2e_seconds, a2e_source, interpolated_a2e
from moeplan.specs import load_cluster, load_model

MB = 1e6


def _cm():
    return cost_model_for(load_cluster("findep-a"))


def test_fitted_splits_reproduce_the_papers_fits():
    cm, prof = _cm(), findep_a6000_profile()
    for (ag, eg), fit in prof.a2e.items():
        for z in (1e4, MB, 3e7):
            assert a2e_seconds(cm, z, ag, eg) == pytest.approx(fit(z), rel=1e-12)
        assert a2e_source(cm, ag, eg) == "fitted"


def test_neighbouring_splits_differ_smoothly_and_monotonically():
    """Unfitted splits fell back to the 25 GB/s datasheet link, 7x off their
    neighbours. Now each step in ag changes the A2E time by less than 1.7x, in one direction."""
    cm = _cm()
    t = [a2e_seconds(cm, 8 * MB, ag, 8 - ag) for ag in range(1, 8)]
    assert all(b > a for a, b in zip(t, t[1:], strict=False)), t
    assert max(b / a for a, b in zip(t, t[1:], strict=False)) < 1.7, t
    assert {a2e_source(cm, ag, 8 - ag) for ag in (3, 5, 6, 7)} == {"interpolated"}


def test_interpolation_is_piecewise_linear_in_the_log_ratio():
    fits = {(1, 1): AlphaBeta(alpha=0.0, beta=1.0), (4, 1): AlphaBeta(alpha=2.0, beta=3.0)}
    mid = interpolated_a2e(fits, 2, 1)  # log2 ratio 1, halfway between 0 and 2
    assert (mid.alpha, mid.beta) == pytest.approx((1.0, 2.0))
    out = interpolated_a2e(fits, 8, 1)  # extended with the segment's slope
    assert (out.alpha, out.beta) == pytest.approx((3.0, 4.0))
    assert interpolated_a2e({(1, 1): fits[(1, 1)]}, 2, 1) is None  # one fit: no model


def test_findep_a_split_search_uses_the_one_model():
    """The (ag, eg) search compares splits on one model and says which kind it picked."""
    cl = load_cluster("findep-a")
    model, cm = load_model("deepseek-v2-lite"), cost_model_for(cl)

    def make(ag, eg):
        return dep.dep_problem(model, cl, cm, ag=ag, eg=eg, seq_len=1024, layers=4, batch=8)

    problem, res = dep.search_groups(make, 8)
    assert problem.a2e_source in ("fitted", "interpolated")
    per_split = {ag: dep.solve(make(ag, 8 - ag)).throughput for ag in range(1, 8)}
    assert res.throughput == pytest.approx(max(per_split.values()), rel=1e-12)
