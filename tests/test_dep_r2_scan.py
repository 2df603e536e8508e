"""Algorithm 1's ``r2`` search against brute force when tile padding breaks unimodality."""

from __future__ import annotations

import pytest

from moeplan.cost import cost_model_for
from moeplan.planners import dep
from moeplan.planners.dep.solver import DepConfig, best_r2, evaluate
from moeplan.specs import load_cluster, load_model


def _problem(ag: int, eg: int, seq: int, batch: int = 4):
    cl = load_cluster("findep-c")
    return dep.dep_problem(
        load_model("deepseek-v2"),
        cl,
        cost_model_for(cl, None),
        ag=ag,
        eg=eg,
        seq_len=seq,
        layers=6,
        batch=batch,
        r2_max=16,
    )


def test_issue_reproduction_solve_equals_brute_force():
    """A binary search on r2 stopped at (1, 4, 9, ASAS), 62,471 tok/s; the grid
    optimum is (2, 2, 1), 64,711 tok/s."""
    p = _problem(7, 1, 2048)
    alg, bf = dep.solve(p), dep.brute_force(p)
    assert alg.throughput == pytest.approx(bf.throughput, rel=1e-9)
    assert (alg.config.ma, alg.config.r1, alg.config.r2) == (2, 2, 1)


def test_the_reproduction_is_not_unimodal_in_r2():
    """The instance really has a makespan that rises then falls again in r2 (why a scan)."""
    p = _problem(7, 1, 2048)
    f = [evaluate(p, DepConfig(ma=2, r1=2, r2=r2, order="AASS")) for r2 in range(1, 17)]
    rises = [i for i in range(1, 15) if f[i] > f[i - 1] and min(f[i + 1 :]) < f[i]]
    assert rises, f


def test_best_r2_with_a_lower_bound_equals_the_full_scan():
    """Branch and bound over aass_estimate returns the same r2 optimum as evaluating every r2."""
    from moeplan.planners.dep.solver import _aass_screen

    for ag, eg, seq in ((7, 1, 2048), (4, 4, 1024), (3, 5, 4096)):
        p = _problem(ag, eg, seq, batch=8)
        for ma, r1 in dep.solver.feasible_pairs(p)[:6]:
            full = best_r2(p, ma, r1, "AASS")
            bnb = best_r2(p, ma, r1, "AASS", lower=_aass_screen)
            assert bnb[1] == pytest.approx(full[1], rel=1e-12), (ag, eg, seq, ma, r1)


@pytest.mark.parametrize(
    "ag,eg,seq", [(7, 1, 1024), (6, 2, 2048), (5, 3, 4096), (2, 6, 2048), (1, 7, 8192)]
)
def test_solve_within_one_percent_of_brute_force_on_a_grid(ag, eg, seq):
    p = _problem(ag, eg, seq)
    alg, bf = dep.solve(p), dep.brute_force(p)
    assert alg.throughput >= bf.throughput * (1 - 0.01)
    assert alg.throughput <= bf.throughput * (1 + 1e-9)
