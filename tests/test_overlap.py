"""The overlap mechanism (cost/overlap.py) against independent answers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from moeplan.cost.overlap import (
    Piece,
    fused_rounds,
    makespan,
    sequential,
    two_batch,
)
from moeplan.planners.strategy.fused import critical_path, simulate_rounds

times = st.floats(min_value=0.0, max_value=10.0, allow_nan=False)


@given(st.lists(times, min_size=1, max_size=8), st.data())
def test_fused_rounds_equal_mixserve_critical_path(inter, data):
    """The mechanism reproduces MixServe's closed form and its round-by-round simulation."""
    intra = data.draw(st.lists(times, min_size=len(inter) + 1, max_size=len(inter) + 1))
    got = fused_rounds(inter, intra)
    assert got == pytest.approx(critical_path(inter, intra), abs=1e-9)
    assert got == pytest.approx(simulate_rounds(inter, intra), abs=1e-9)


def test_one_chain_is_the_sum():
    assert makespan([[Piece("a", 1.0), Piece("b", 2.0), Piece("a", 3.0)]]) == 6.0


def test_two_batch_hand_schedule():
    """Compute 2 s then comm 1 s per layer, two micro-batches, one layer: mb0 computes
    [0, 2], mb1 computes [2, 4] while mb0 communicates [2, 3]; mb1 communicates [4, 5]."""
    assert two_batch([], [("compute", 2.0), ("comm", 1.0)], 1) == 5.0
    # comm fully hidden after the first layer: 2 layers = 2 * 2 * 2 + 1
    assert two_batch([], [("compute", 2.0), ("comm", 1.0)], 2) == 9.0


@given(
    st.lists(st.tuples(st.sampled_from(["compute", "comm"]), times), min_size=1, max_size=6),
    st.integers(min_value=1, max_value=8),
)
def test_overlap_bounds(layer, layers):
    """Two halves overlapped: no faster than the busiest resource, no slower than in series."""
    t = two_batch([], layer, layers)
    busiest = max(sum(s for r, s in layer if r == res) for res in ("compute", "comm"))
    assert t >= 2 * layers * busiest - 1e-9
    assert t <= 2 * sequential([], layer, layers) + 1e-9


def test_negative_piece_rejected():
    with pytest.raises(ValueError):
        makespan([[Piece("compute", -1.0)]])
