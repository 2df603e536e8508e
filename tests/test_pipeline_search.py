"""SMIDT search (Algorithms 1-2) against exact oracles on random small instances."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from doc_figures import pinned
from moeplan.planners.pipeline.search import (
    WindowKnapsack,
    discretize,
    exhaustive_partition,
    level_memory,
    naive_dp_partition,
    search_partition,
)

EPS = 1e-3


def _tradeoff(mem: np.ndarray, time: np.ndarray) -> np.ndarray:
    out = np.empty_like(mem)
    out[np.argsort(time)] = np.sort(mem)[::-1]  # the fastest choice gets the most memory
    return out


#: the random instances: modules, choices per module and stages (each an inclusive range)
MODULES, CHOICES, STAGES = (1, 12), (1, 4), (1, 4)
BLOCKS, SEEDS_PER_BLOCK = 8, 30


def _instance(seed: int):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(MODULES[0], MODULES[1] + 1))
    times = [
        rng.uniform(0.1, 2.0, size=int(rng.integers(CHOICES[0], CHOICES[1] + 1))) for _ in range(n)
    ]
    mems = [rng.uniform(0.5, 4.0, size=len(t)) * 1e9 for t in times]
    # faster choices tend to use more memory (DPMoE-like trade-off)
    mems = [_tradeoff(m, t) if rng.random() < 0.7 else m for m, t in zip(mems, times, strict=True)]
    stages = int(rng.integers(STAGES[0], min(n, STAGES[1]) + 1))
    need = sum(float(m.min()) for m in mems) / stages
    cap_bytes = float(rng.uniform(0.9, 2.0)) * need + 4e9
    units, base, cap = discretize(mems, cap_bytes, resolution=int(rng.integers(8, 64)))
    return times, mems, units, base, cap, cap_bytes, stages


def _joint_brute_force(times, units, base, cap, stages):
    """Every boundary set × every joint choice assignment (no per-stage decomposition)."""
    n, best = len(times), float("inf")
    for cuts in itertools.combinations(range(1, n), stages - 1):
        bounds = (0, *cuts, n)
        for assign in itertools.product(*(range(len(t)) for t in times)):
            worst = 0.0
            for a, b in itertools.pairwise(bounds):
                room = math.floor(
                    cap - float(np.cumsum(np.r_[0.0, base])[b] - np.cumsum(np.r_[0.0, base])[a])
                )
                if sum(int(units[m][assign[m]]) for m in range(a, b)) > room:
                    worst = float("inf")
                    break
                worst = max(worst, sum(float(times[m][assign[m]]) for m in range(a, b)))
            best = min(best, worst)
    return best


def _check_partition(part, times, mems, units, base, cap, cap_bytes, stages):
    assert part.bounds[0] == 0 and part.bounds[-1] == len(times)
    assert len(part.bounds) - 1 == stages
    for (a, b), st in zip(itertools.pairwise(part.bounds), part.stage_times, strict=True):
        used_units = sum(int(units[m][part.choice[m]]) + base[m] for m in range(a, b))
        used_bytes = sum(float(mems[m][part.choice[m]]) for m in range(a, b))
        assert used_units <= cap + 1e-9 and used_bytes <= cap_bytes
        assert sum(float(times[m][part.choice[m]]) for m in range(a, b)) == pytest.approx(st)


@pytest.mark.parametrize("block", range(BLOCKS))
def test_search_matches_exhaustive_on_random_instances(block):
    """240 random instances: search bottleneck within eps of the exact optimum; same feasibility."""
    solved = 0
    for seed in range(block * SEEDS_PER_BLOCK, (block + 1) * SEEDS_PER_BLOCK):
        times, mems, units, base, cap, cap_bytes, stages = _instance(seed)
        got = search_partition(times, units, cap, stages, eps=EPS, base=base)
        exact = exhaustive_partition(times, units, cap, stages, base=base)
        assert (got is None) == (exact is None), seed
        if exact is None:
            continue
        assert exact.bottleneck - 1e-9 <= got.bottleneck <= exact.bottleneck + EPS, seed
        _check_partition(got, times, mems, units, base, cap, cap_bytes, stages)
        _check_partition(exact, times, mems, units, base, cap, cap_bytes, stages)
        solved += 1
    assert solved >= 20  # most instances are feasible, so the comparison is not vacuous


def test_exhaustive_and_naive_dp_agree_with_joint_brute_force():
    """Oracles cross-checked: per-stage exhaustive and the O(n^2) DP equal joint enumeration."""
    checked = 0
    for seed in range(1000, 1200):
        times, _, units, base, cap, _, stages = _instance(seed)
        if len(times) > 6:
            continue
        brute = _joint_brute_force(times, units, base, cap, stages)
        exact = exhaustive_partition(times, units, cap, stages, base=base)
        naive = naive_dp_partition(times, units, cap, stages, base=base)
        if brute == float("inf"):
            assert exact is None and naive is None
        else:
            assert exact.bottleneck == pytest.approx(brute)
            assert naive.bottleneck == pytest.approx(brute)
        checked += 1
    assert checked >= 50


def test_window_knapsack_equals_enumeration():
    """Each window's knapsack optimum equals the minimum over all fitting choice combinations."""
    rng = np.random.default_rng(7)
    for _ in range(40):
        n = int(rng.integers(1, 6))
        times = [rng.uniform(0, 1, size=int(rng.integers(1, 5))) for _ in range(n)]
        units = [rng.integers(0, 10, size=len(t)) for t in times]
        cap = int(rng.integers(0, 30))
        ks = WindowKnapsack(times, units, cap)
        for a in range(n):
            for b in range(a + 1, n + 1):
                vals = [
                    sum(times[m][c[m - a]] for m in range(a, b))
                    for c in itertools.product(*(range(len(t)) for t in times[a:b]))
                    if sum(units[m][c[m - a]] for m in range(a, b)) <= cap
                ]
                want = min(vals) if vals else float("inf")
                assert ks.best(a, b) == pytest.approx(want)
                if vals:
                    picks = ks.choose(a, b)
                    assert sum(units[m][picks[m - a]] for m in range(a, b)) <= cap
                    assert sum(times[m][picks[m - a]] for m in range(a, b)) == pytest.approx(want)


def test_discretize_rounds_up_so_unit_fit_implies_byte_fit():
    """ceil rounding: any selection within the unit capacity is within the byte capacity."""
    rng = np.random.default_rng(3)
    mems = [rng.uniform(0, 5e9, size=3) for _ in range(6)]
    units, base, cap = discretize(mems, 8e9, resolution=37)
    for u, b, m in zip(units, base, mems, strict=True):
        assert np.all((u + b) * (8e9 / cap) >= m)
        assert u.min() == 0  # the cheapest choice is the exact base


def test_level_memory_finds_the_least_peak_memory_at_the_bottleneck():
    """Leveling keeps the bottleneck and no plan within it fits one unit less (exhaustive)."""
    checked = 0
    for seed in range(2000, 2120):
        times, _, units, base, cap, _, stages = _instance(seed)
        if len(times) > 8:
            continue
        opt = exhaustive_partition(times, units, cap, stages, base=base)
        if opt is None:
            continue
        limit = opt.bottleneck + 1e-9  # float sums differ in order between the solvers
        even = level_memory(times, units, cap, stages, limit, base=base)
        assert even is not None and even.bottleneck <= limit
        peak = max(
            math.ceil(sum(int(units[m][even.choice[m]]) + base[m] for m in range(a, b)) - 1e-9)
            for a, b in itertools.pairwise(even.bounds)
        )
        assert peak <= cap
        tighter = exhaustive_partition(times, units, peak - 1, stages, base=base)
        assert tighter is None or tighter.bottleneck > limit
        checked += 1
    assert checked >= 30


def test_the_docs_figures_are_these_instances():
    """pipeline.md's figures (docs/benchmarks/data/pipeline-tests.json) are the instances
    the search is checked on."""
    figures = pinned("pipeline-tests")
    assert figures["search_instances"] == BLOCKS * SEEDS_PER_BLOCK
    assert (figures["modules_min"], figures["modules_max"]) == MODULES
    assert (figures["choices_min"], figures["choices_max"]) == CHOICES
    assert (figures["stages_min"], figures["stages_max"]) == STAGES
