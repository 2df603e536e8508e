"""Fused RS-Combine / AG-Dispatch (MixServe Algs. 1-2): the modelled (closed-form) time
against a round-by-round simulation, the project simulator and hand computations; each step
priced by the cost model with the group and bytes the algorithms name."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan.errors import MoeplanError
from moeplan.planners.strategy.comm import Collectives
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

durations = st.floats(0.0, 1.0, allow_nan=False, allow_infinity=False)


class Linear:
    """A cost model with one α-β law per link level (per-GPU bandwidth, ring volumes)."""

    def collective(self, op, nbytes, group_size, nodes=1):
        n = group_size
        bw, lat = (25e9, 20e-6) if nodes > 1 else (400e9, 10e-6)
        rounds = 2 if op == "all_reduce" else 1
        return rounds * ((n - 1) * lat + (n - 1) / n * nbytes / bw)

    def p2p(self, nbytes, inter_node):
        return (20e-6 + nbytes / 25e9) if inter_node else (10e-6 + nbytes / 400e9)


def _layer(nodes: int, tp: int, chunk: float, out: float) -> FusedLayer:
    return FusedLayer.priced(
        nodes=nodes, tp=tp, chunk_bytes=chunk, output_bytes=out, coll=Collectives(Linear(), tp)
    )


def test_uniform_overlap_hand_computation():
    """4 nodes, inter 3 s, intra 1 s: local RS at 0-1, chunks arrive 3, 6, 9 -> end 10."""
    assert uniform_overlap(4, 3.0, 1.0) == 10.0
    assert simulate_rounds([3.0] * 3, [1.0] * 4) == 10.0
    # intra-bound: 4 intra rounds of 2 s hide the 1 s inter rounds -> 8
    assert uniform_overlap(4, 1.0, 2.0) == 8.0
    assert simulate_rounds([1.0] * 3, [2.0] * 4) == 8.0


@settings(max_examples=examples(200))
@given(st.lists(durations, min_size=0, max_size=12), st.data())
def test_critical_path_equals_round_by_round_simulation(inter, data):
    intra = data.draw(st.lists(durations, min_size=len(inter) + 1, max_size=len(inter) + 1))
    assert critical_path(inter, intra) == pytest.approx(simulate_rounds(inter, intra), abs=1e-12)


@given(st.integers(1, 16), durations, durations)
def test_uniform_closed_form_equals_simulation(n, tx, tr):
    assert uniform_overlap(n, tx, tr) == pytest.approx(
        simulate_rounds([tx] * (n - 1), [tr] * n), abs=1e-12
    )


def test_priced_steps_are_the_cost_model_calls_the_algorithms_name():
    """Inter round = P2P of one chunk between nodes; intra steps = TP collectives inside one
    node; the sequential A2A runs over the EP group (one rank per node, ``nodes`` nodes)."""
    cm, tp, n, a, out = Linear(), 8, 4, 1e6, 2e6
    lay = _layer(n, tp, a, out)
    assert lay.t_inter == cm.p2p(a, True)
    assert lay.t_ag == cm.collective("all_gather", a * tp, tp, 1)
    assert lay.t_rs == cm.collective("reduce_scatter", a * tp, tp, 1)
    assert lay.t_ag_all == cm.collective("all_gather", a * tp * n, tp, 1)
    assert lay.t_rs_all == cm.collective("reduce_scatter", a * tp * n, tp, 1)
    assert lay.t_a2a == cm.collective("all_to_all", a * n, n, n)
    assert lay.t_ag_out == cm.collective("all_gather", out, tp, 1)
    one = _layer(1, tp, a, out)
    assert one.t_inter == one.t_a2a == 0.0


@given(st.integers(2, 16), st.sampled_from([2, 4, 8]), st.floats(1e2, 1e8))
def test_fused_algorithms_match_simulation(nodes, tp, chunk):
    """Modelled fused time == replayed rounds (plus Alg. 1's final AG)."""
    out = chunk * tp * nodes / 8
    lay = _layer(nodes, tp, chunk, out)
    ag, rs = ag_dispatch(lay), rs_combine(lay)
    assert ag.fused == pytest.approx(simulate_rounds(*round_times(lay, "ag")), rel=1e-12)
    assert rs.fused == pytest.approx(
        simulate_rounds(*round_times(lay, "rs")) + lay.t_ag_out, rel=1e-12
    )
    assert (ag.inter_rounds, ag.intra_rounds) == (nodes - 1, nodes)


def test_sequential_sum_and_weighting_hand_computation():
    """Sequential = one A2A of all n chunks + one TP collective of them (+ Alg. 1's AG);
    the top-k weighting is paid once per chunk in both schedules."""
    cm = Linear()
    lay = _layer(4, 8, 1e6, 2e6)
    a2a = 3 * 20e-6 + 3 / 4 * 4e6 / 25e9
    assert ag_dispatch(lay).sequential == pytest.approx(a2a + 7 * 10e-6 + 7 / 8 * 32e6 / 400e9)
    w = 1e-4
    rs = rs_combine(lay, weighting_s=w)
    want = (
        cm.collective("reduce_scatter", 32e6, 8, 1)
        + 4 * w
        + a2a
        + cm.collective("all_gather", 2e6, 8, 1)
    )
    assert rs.sequential == pytest.approx(want)
    assert rs.fused == pytest.approx(uniform_overlap(4, lay.t_inter, lay.t_rs + w) + lay.t_ag_out)


def test_matches_project_simulator():
    """The same rounds as tasks on two link resources in moeplan.sim."""
    sim = pytest.importorskip("moeplan.sim")
    lay = _layer(4, 8, 3e6, 1e6)
    inter_r, intra_r = round_times(lay, "ag")
    g = sim.TaskGraph()
    arrived = []
    for i, t in enumerate(inter_r):
        arrived.append(g.add(f"dispatch{i}", "inter", t, arrived[-1:]))
    prev: list[int] = []
    for j, t in enumerate(intra_r):
        deps = prev + ([arrived[j - 1]] if j else [])
        prev = [g.add(f"ag{j}", "intra", t, deps)]
    schedule = sim.simulate(g).check()
    assert schedule.makespan == pytest.approx(ag_dispatch(lay).fused, rel=1e-12)


@given(st.integers(1, 8), st.sampled_from([2, 4, 8]), st.floats(1e3, 1e8), st.floats(1e3, 1e8))
@settings(max_examples=30)
def test_layer_schedules_on_simulator_match_closed_forms(nodes, tp, chunk, out):
    """One layer = AG-Dispatch then RS-Combine: fused and sequential makespans on moeplan.sim
    equal the closed-form sums."""
    layer = _layer(nodes, tp, chunk, out)
    ag, rs = layer.times()
    sched = layer_schedules(layer)
    assert sched["fused"].makespan == pytest.approx(ag.fused + rs.fused, rel=1e-9)
    assert sched["sequential"].makespan == pytest.approx(ag.sequential + rs.sequential, rel=1e-9)


def test_round_times_rejects_unknown_kind():
    with pytest.raises(MoeplanError, match="kind"):
        round_times(_layer(2, 8, 1e6, 1e6), "ar")
