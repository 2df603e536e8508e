"""Fused RS-Combine / AG-Dispatch (MixServe Algs. 1-2): the modelled (closed-form) time
against a round-by-round simulation, the project simulator and hand computations."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moeplan.planners.strategy.comm import Link, all_gather, reduce_scatter
from moeplan.planners.strategy.fused import (
    FusedLayer,
    ag_dispatch,
    critical_path,
    layer_schedules,
    round_times,
    rs_combine,
    simulate_rounds,
    uniform_overlap,
)

INTRA = Link(alpha=10e-6, beta=1 / 400e9)
INTER = Link(alpha=20e-6, beta=1 / 25e9)
durations = st.floats(0.0, 1.0, allow_nan=False, allow_infinity=False)


def test_uniform_overlap_hand_computation():
    """4 nodes, inter 3 s, intra 1 s: local RS at 0-1, chunks arrive 3, 6, 9 -> end 10."""
    assert uniform_overlap(4, 3.0, 1.0) == 10.0
    assert simulate_rounds([3.0] * 3, [1.0] * 4) == 10.0
    # intra-bound: 4 intra rounds of 2 s hide the 1 s inter rounds -> 8
    assert uniform_overlap(4, 1.0, 2.0) == 8.0
    assert simulate_rounds([1.0] * 3, [2.0] * 4) == 8.0


@settings(max_examples=200, deadline=None)
@given(st.lists(durations, min_size=0, max_size=12), st.data())
def test_critical_path_equals_round_by_round_simulation(inter, data):
    intra = data.draw(st.lists(durations, min_size=len(inter) + 1, max_size=len(inter) + 1))
    assert critical_path(inter, intra) == pytest.approx(simulate_rounds(inter, intra), abs=1e-12)


@given(st.integers(1, 16), durations, durations)
def test_uniform_closed_form_equals_simulation(n, tx, tr):
    assert uniform_overlap(n, tx, tr) == pytest.approx(
        simulate_rounds([tx] * (n - 1), [tr] * n), abs=1e-12)


@given(st.integers(2, 16), st.sampled_from([2, 4, 8]), st.floats(1e2, 1e8))
def test_fused_algorithms_match_simulation_and_beat_sequential(nodes, tp, chunk):
    """Modelled fused time == replayed rounds; never slower than RS -> A2A -> AG."""
    inter_r, intra_r = round_times(nodes=nodes, tp=tp, chunk_bytes=chunk, intra=INTRA,
                                   inter=INTER, kind="ag")
    ag = ag_dispatch(nodes=nodes, tp=tp, chunk_bytes=chunk, intra=INTRA, inter=INTER)
    assert ag.fused == pytest.approx(simulate_rounds(inter_r, intra_r), rel=1e-12)
    assert ag.fused <= ag.sequential * (1 + 1e-12)
    out = chunk * tp * nodes / 8
    inter_r, intra_r = round_times(nodes=nodes, tp=tp, chunk_bytes=chunk, intra=INTRA,
                                   inter=INTER, kind="rs")
    rs = rs_combine(nodes=nodes, tp=tp, chunk_bytes=chunk, output_bytes=out, intra=INTRA,
                    inter=INTER)
    tail = all_gather(out, tp, INTRA)
    assert rs.fused == pytest.approx(simulate_rounds(inter_r, intra_r) + tail, rel=1e-12)
    assert rs.fused <= rs.sequential * (1 + 1e-12)


def test_sequential_sum_hand_computation():
    """AG-Dispatch sequential = (n-1) inter rounds + one AG of the n gathered chunks."""
    ag = ag_dispatch(nodes=4, tp=8, chunk_bytes=1e6, intra=INTRA, inter=INTER)
    want = 3 * (20e-6 + 1e6 / 25e9) + (10e-6 + 8e6 * 4 * 7 / 8 / 400e9)
    assert ag.sequential == pytest.approx(want)
    rs = rs_combine(nodes=4, tp=8, chunk_bytes=1e6, output_bytes=2e6, intra=INTRA, inter=INTER)
    want = (reduce_scatter(32e6, 8, INTRA) + 3 * (20e-6 + 1e6 / 25e9)
            + all_gather(2e6, 8, INTRA))
    assert rs.sequential == pytest.approx(want)


def test_matches_project_simulator():
    """The same rounds as tasks on two link resources in moeplan.sim."""
    sim = pytest.importorskip("moeplan.sim")
    inter_r, intra_r = round_times(nodes=4, tp=8, chunk_bytes=3e6, intra=INTRA, inter=INTER,
                                   kind="ag")
    g = sim.TaskGraph()
    arrived = []
    for i, t in enumerate(inter_r):
        arrived.append(g.add(f"dispatch{i}", "inter", t, arrived[-1:]))
    prev: list[int] = []
    for j, t in enumerate(intra_r):
        deps = prev + ([arrived[j - 1]] if j else [])
        prev = [g.add(f"ag{j}", "intra", t, deps)]
    schedule = sim.simulate(g).check()
    ag = ag_dispatch(nodes=4, tp=8, chunk_bytes=3e6, intra=INTRA, inter=INTER)
    assert schedule.makespan == pytest.approx(ag.fused, rel=1e-12)


@given(st.integers(2, 8), st.sampled_from([2, 4, 8]), st.floats(1e3, 1e8), st.floats(1e3, 1e8))
@settings(max_examples=30, deadline=None)
def test_layer_schedules_on_simulator_match_closed_forms(nodes, tp, chunk, out):
    """One layer = AG-Dispatch then RS-Combine: fused and sequential makespans on moeplan.sim
    equal the closed-form sums."""
    layer = FusedLayer(nodes=nodes, tp=tp, chunk_bytes=chunk, output_bytes=out, intra=INTRA,
                       inter=INTER)
    ag, rs = layer.times()
    sched = layer_schedules(layer)
    assert sched["fused"].makespan == pytest.approx(ag.fused + rs.fused, rel=1e-9)
    assert sched["sequential"].makespan == pytest.approx(ag.sequential + rs.sequential, rel=1e-9)
