"""Behaviour of the event-driven simulator (moeplan.sim.timeline)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hypothesis_budget import examples
from moeplan.sim import InvariantError, Schedule, TaskGraph, simulate, simulate_list
from moeplan.sim.timeline import CHECK_RTOL


def _chain_graph() -> TaskGraph:
    g = TaskGraph()
    a = g.add("a", "gpu", 2.0)
    b = g.add("b", "link", 1.0, [a])
    g.add("c", "gpu", 3.0)
    g.add("d", "gpu", 1.0, [b])
    return g


def test_fixed_order_is_semi_active():
    """Each task starts as soon as its predecessors and the previous task on its resource end."""
    s = simulate(_chain_graph()).check()
    assert s.start.tolist() == [0.0, 2.0, 2.0, 5.0]
    assert s.makespan == 6.0


def test_explicit_order_is_respected():
    """A given per-resource order changes the schedule accordingly."""
    g = _chain_graph()
    s = simulate(g, order={"gpu": [2, 0, 3]}).check()
    assert s.start.tolist() == [3.0, 5.0, 0.0, 6.0]


def test_order_that_deadlocks_is_rejected():
    """Ordering a successor before its predecessor on one resource cannot be scheduled."""
    g = TaskGraph()
    a = g.add("a", "gpu", 1.0)
    g.add("b", "gpu", 1.0, [a])
    with pytest.raises(ValueError, match="deadlock"):
        simulate(g, order={"gpu": [1, 0]})


def test_order_must_be_a_permutation():
    g = _chain_graph()
    with pytest.raises(ValueError, match="permutation"):
        simulate(g, order={"gpu": [0, 3]})


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_bad_durations_are_rejected(bad):
    with pytest.raises(ValueError, match="duration"):
        TaskGraph().add("x", "gpu", bad)


def test_unknown_dependency_is_rejected():
    with pytest.raises(ValueError, match="dependency"):
        TaskGraph().add("x", "gpu", 1.0, [0])


def test_list_tie_break_is_priority_then_insertion():
    """Pinned tie-break: ready at the same time -> smaller priority first, then insertion order."""
    g = TaskGraph()
    g.add("late", "gpu", 1.0, priority=2)
    g.add("first", "gpu", 1.0, priority=0)
    g.add("second", "gpu", 1.0, priority=1)
    g.add("third", "gpu", 1.0, priority=1)
    s = simulate_list(g)
    assert [g.names[i] for i in np.argsort(s.start)] == ["first", "second", "third", "late"]


def test_list_fifo_prefers_earlier_ready_time_over_priority():
    """Under rule='fifo' the ready time decides before the priority; 'priority' flips that."""
    g = TaskGraph()
    blocker = g.add("blocker", "gpu", 2.0)
    pre = g.add("pre", "cpu", 1.0)
    g.add("early", "gpu", 1.0, [pre], priority=5)
    g.add("urgent", "gpu", 1.0, [g.add("pre2", "cpu2", 1.5)], priority=0)
    fifo = simulate_list(g, rule="fifo").check()
    prio = simulate_list(g, rule="priority").check()
    assert fifo.start[2] == 2.0 and fifo.start[4] == 3.0
    assert prio.start[4] == 2.0 and prio.start[2] == 3.0
    assert fifo.start[blocker] == 0.0


def test_completions_at_same_time_release_in_key_order():
    """Two predecessors ending together release their successors by (time, priority, seq)."""
    g = TaskGraph()
    p1 = g.add("p1", "a", 1.0, priority=1)
    p0 = g.add("p0", "b", 1.0, priority=0)
    g.add("s1", "c", 1.0, [p1], priority=0)
    g.add("s0", "c", 1.0, [p0], priority=0)
    s = simulate_list(g)
    assert s.start[2] == 1.0 and s.start[3] == 2.0  # same ready time and priority: seq decides


def test_list_rule_is_validated():
    with pytest.raises(ValueError, match="rule"):
        simulate_list(TaskGraph(), rule="lifo")


def test_empty_graph():
    assert simulate(TaskGraph()).makespan == 0.0
    assert simulate_list(TaskGraph()).makespan == 0.0


def test_invariant_check_catches_overlap_and_precedence():
    g = _chain_graph()
    good = simulate(g)
    broken = Schedule(
        graph=g,
        start=good.start - np.array([0, 1.5, 0, 0]),
        end=good.end - np.array([0, 1.5, 0, 0]),
        mode="fixed",
    )
    with pytest.raises(InvariantError, match="precedence"):
        broken.check()
    overlap = Schedule(
        graph=g,
        start=np.array([0.0, 2.0, 1.0, 5.0]),
        end=np.array([2.0, 3.0, 4.0, 6.0]),
        mode="fixed",
    )
    with pytest.raises(InvariantError, match="overlap"):
        overlap.check()


def test_busy_plus_gaps_is_makespan():
    s = simulate(_chain_graph())
    for r, name in enumerate(s.graph.resources):
        gaps = sum(b - a for a, b in s.idle_gaps(name))
        assert gaps + s.busy[r] == pytest.approx(s.makespan)
    assert s.idle_gaps("link") == [(0.0, 2.0), (3.0, 6.0)]
    assert s.utilization()["gpu"] == pytest.approx(1.0)


@st.composite
def random_graphs(draw):
    n = draw(st.integers(1, 40))
    nres = draw(st.integers(1, 4))
    g = TaskGraph()
    for i in range(n):
        deps = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        g.add(
            f"t{i}",
            f"r{draw(st.integers(0, nres - 1))}",
            draw(st.floats(0, 10, allow_nan=False)),
            deps,
            priority=draw(st.integers(0, 3)),
        )
    return g


def _relaxation_oracle(g: TaskGraph, order: dict[int, list[int]]) -> np.ndarray:
    """Semi-active start times by Bellman-Ford-style relaxation to a fixed point."""
    start = np.zeros(len(g))
    prev = {b: a for seq in order.values() for a, b in zip(seq[:-1], seq[1:], strict=True)}
    for _ in range(len(g) + 1):
        new = start.copy()
        for i in range(len(g)):
            lo = [start[p] + g.dur[p] for p in g.preds[i]]
            if i in prev:
                lo.append(start[prev[i]] + g.dur[prev[i]])
            new[i] = max(lo, default=0.0)
        if np.array_equal(new, start):
            break
        start = new
    return start


@settings(max_examples=examples(60))
@given(random_graphs(), st.randoms(use_true_random=False))
def test_fixed_order_matches_relaxation_oracle(g, rnd):
    """Both code paths of mode (a) equal the fixed point of the start-time inequalities."""
    default = {r: g.tasks_on(r) for r in range(len(g.resources))}
    assert np.allclose(simulate(g).start, _relaxation_oracle(g, default))
    # a random order that is consistent with precedence: sort by a random topological key
    key = {i: rnd.random() for i in range(len(g))}
    for i in range(len(g)):
        key[i] = max([key[i]] + [key[p] + 1 for p in g.preds[i]])
    order = {r: sorted(seq, key=key.__getitem__) for r, seq in default.items()}
    s = simulate(g, order=order).check()
    assert np.allclose(s.start, _relaxation_oracle(g, order))


def _tiny_graph() -> TaskGraph:
    """A 8.9e-238 s task feeding a zero-length one: an absolute tolerance sees a false wait."""
    g = TaskGraph()
    g.add("tiny", "r0", 8.9e-238)
    g.add("after", "r1", 0.0, [0])
    return g


def _idle_while_ready(s: Schedule) -> list[str]:
    """Idle gaps during which a task of that resource was already ready (non-delay breaks)."""
    g = s.graph
    tol = CHECK_RTOL * s.makespan  # the simulator's own relative tolerance
    ready = np.array([max((s.end[p] for p in g.preds[i]), default=0.0) for i in range(len(g))])
    out = []
    for r, name in enumerate(g.resources):
        for a, b in s.idle_gaps(name):
            waiting = [i for i in g.tasks_on(r) if ready[i] <= a + tol and s.start[i] >= b - tol]
            out += [f"{name} idle in [{a}, {b}) while {waiting} were ready"] if waiting else []
    return out


def test_non_delay_check_uses_a_relative_tolerance():
    """The oracle itself: a real idle-while-ready gap is caught, a tiny time scale is not one."""
    assert _idle_while_ready(simulate_list(_tiny_graph()).check()) == []
    g = TaskGraph()
    g.add("a", "r0", 1e-200)
    g.add("b", "r0", 1e-200)
    late = simulate(g)
    delayed = Schedule(
        graph=g,
        start=late.start + np.array([0, 1e-200]),
        end=late.end + np.array([0, 1e-200]),
        mode="fixed",
    )
    assert _idle_while_ready(delayed.check())


@settings(max_examples=examples(60))
@given(random_graphs(), st.sampled_from(["fifo", "priority"]))
@example(_tiny_graph(), "fifo")
def test_list_schedule_is_valid_and_non_delay(g, rule):
    """Greedy schedules satisfy the invariants and never idle a resource with a ready task."""
    assert _idle_while_ready(simulate_list(g, rule=rule).check()) == []
